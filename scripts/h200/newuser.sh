#!/usr/bin/env bash
# Issue 11 on the H200: what a new user meets on a GPU.
#   1. `solbench calibrate`: the measured ceilings now carry their spread (calibration noise);
#   2. gemm baselines against those measured ceilings (`--peaks measured`): the fp32 baseline that tied
#      its own matmul ceiling (SOL 1.001, invalid) must now be `ok` with a tie warning, nothing invalid;
#   3. `run --ops gemm,attention --quick` printed at 80 and at 120 columns: no cut numbers;
#   4. the docs pictures rendered from the newest committed H200 runs, to look at (the lead commits them).
# Usage (device machine, repo root): bash scripts/h200/newuser.sh      about 4 minutes (calibrate ~1.5,
# gemm ~1.5, tables ~0.5, charts ~0.5)
# Writes under $OUT (8 files at most):
#   calibration.json          the calibration (with "noise")
#   gemm_measured.json        gemm baselines on the 8192^3 case, scored against it
#   tables.txt                the quick run's tables at 80 and at 120 columns
#   roofline.png, sol.png     from results/h200/final.json  (docs/roofline.png, docs/sol.png)
#   kernels_roofline.png, kernels_sol.png   from results/h200/kernels_v3.json (docs/kernels_*.png)
#   summary.txt               the short table printed last
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T=$(mktemp -d)
step() { echo; echo "== $* ($(date +%T))"; }

python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2

step "calibrate (measured ceilings and their spread)"
timeout 200 solbench calibrate --out "$T/r" --json "$OUT/calibration.json" 2>&1 | tail -25

step "gemm baselines against the measured ceilings"
timeout 150 solbench run --ops gemm --shape M=8192,N=8192,K=8192 --impls eager --peaks measured \
    --out "$T/r" --json "$OUT/gemm_measured.json" --budget 1.0 > "$T/gemm.txt" 2>&1
echo "rc=$?"; tail -20 "$T/gemm.txt"

step "a quick run's tables at 80 and 120 columns"
timeout 120 solbench run --ops gemm,attention --quick --out "$T/r" --json "$T/quick.json" --budget 0.3 \
    > /dev/null 2>&1
echo "rc=$?"
python3 - "$T/quick.json" "$OUT/tables.txt" <<'EOF'
import io, sys
from rich.console import Console
from solbench import console as ui
from solbench.results import load_run
run = load_run(sys.argv[1])
with open(sys.argv[2], "w") as f:
    for width in (80, 120):
        con = Console(file=io.StringIO(), width=width, record=True, color_system=None)
        for t in ui.op_tables(run.records, width):
            con.print(t)
        text = con.export_text()
        widest = max(len(line.rstrip()) for line in text.splitlines())
        f.write(f"===== {width} columns (widest line {widest}, cut cells: {text.count('…')})\n{text}\n")
        print(f"{width} columns: widest line {widest}, cut cells {text.count('…')}")
EOF

step "docs pictures from the committed H200 runs"
solbench roofline results/h200/final.json -o "$OUT/roofline.png" 2>&1 | head -3
solbench plot sol results/h200/final.json -o "$OUT/sol.png" 2>&1 | head -2
solbench roofline results/h200/kernels_v3.json -o "$OUT/kernels_roofline.png" 2>&1 | head -2
solbench plot sol results/h200/kernels_v3.json -o "$OUT/kernels_sol.png" 2>&1 | head -2

step "summary"
python3 - "$OUT/calibration.json" "$OUT/gemm_measured.json" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
cal = json.load(open(sys.argv[1]))
print("calibration noise (relative spread):", {k: f"{v:.2%}" for k, v in (cal.get("noise") or {}).items()})
recs = json.load(open(sys.argv[2]))["records"]
print(f"{'dtype':14} {'status':8} {'SOL':>7}  note")
for r in recs:
    if r["status"] == "skipped":
        continue
    tie = next((w for w in r.get("warnings", []) if "ties" in w), "")
    sol = f"{r['sol']:.3f}" if r.get("sol") is not None else "-"
    print(f"{r['dtype']:14} {r['status']:8} {sol:>7}  {(tie or r['message'])[:90]}")
bad = [r for r in recs if r["status"] in ("invalid", "failed", "error")]
print("PASS: no invalid, failed or errored gemm baseline" if not bad else f"FAIL: {len(bad)} bad records")
EOF
