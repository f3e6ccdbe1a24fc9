#!/usr/bin/env bash
# Issue 18 on the one-GPU H200: `--gpus all` gives the records of a plain run, within noise.
#   bash scripts/h200/scaleout.sh   (repo root, GPU machine; about 3 minutes, at most ~6 by its timeouts; writes $OUT)
# Runs softmax,rmsnorm once as usual and once with --gpus all (one pinned worker per GPU: here one),
# then `solbench compare` of the two: every record must be present in both, none SLOWER.
# Files: $OUT/plain.json, $OUT/gpus.json, $OUT/compare.json, $OUT/compare.md, $OUT/scaleout.log (and the
# run logs runs_*.txt). A run cut by its timeout still leaves its records (results are written after each).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/scaleout.log"
OPS=softmax,rmsnorm
ARGS=(--ops "$OPS" --budget 0.3 --out "${TMPDIR:-/tmp}/scaleout_runs")   # $OUT takes 8 files at most
fail=0

python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOG" 2>&1 || { echo "install failed"; tail "$LOG"; exit 1; }
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >>"$LOG" 2>&1
{ time timeout 100 solbench build ; } >>"$LOG" 2>&1 || { echo "solbench build failed"; tail -20 "$LOG"; fail=1; }

run() {   # run NAME [flags...]: one solbench run, its wall time in $OUT/NAME.time
  local name=$1; shift
  local t0=$SECONDS
  timeout 110 solbench run "${ARGS[@]}" --json "$OUT/$name.json" "$@" >"$OUT/runs_$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc, $((SECONDS - t0)) s" | tee -a "$LOG"
  [ "$rc" -le 1 ] || fail=1    # 1 = a record failed or errored: reported below, not a harness failure
}
run plain
run gpus --gpus all

timeout 30 solbench compare "$OUT/plain.json" "$OUT/gpus.json" --fail-on slower,missing,failed \
  --json "$OUT/compare.json" --markdown "$OUT/compare.md" >>"$LOG" 2>&1
cmp_rc=$?
echo "compare: exit $cmp_rc (0 = every record present in both, none SLOWER, none newly failing)" | tee -a "$LOG"
[ "$cmp_rc" -eq 0 ] || fail=1

python3 - "$OUT" <<'EOF' || fail=1
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
plain, gpus = (json.loads((out / f"{n}.json").read_text()) for n in ("plain", "gpus"))
keys = lambda run: [(r["op"], r["case"], r["dtype"], r["impl"], r["status"]) for r in run["records"]]
same = keys(plain) == keys(gpus)
named = all(r["device_index"] is not None and r["device_fingerprint"] for r in gpus["records"]
            if r["status"] != "skipped")
cmp = json.loads((out / "compare.json").read_text())
print(f"records: plain {len(plain['records'])}, --gpus {len(gpus['records'])}; same keys+statuses in order: {same}; "
      f"--gpus records name their GPU: {named}; config.gpus={gpus['config'].get('gpus')}")
print("verdicts:", cmp["counts"], "missing:", len(cmp.get("missing", [])), "failed:", len(cmp.get("failed", [])))
print(f"{'op':8} {'case':16} {'dtype':9} {'impl':9} {'plain':>10} {'--gpus':>10} {'ratio':>6} verdict")
for p in sorted(cmp["pairs"], key=lambda p: p["key"]):
    op, case, dtype, impl = p["key"]
    base, new = p.get("base"), p.get("new")
    ratio = f"{p['ratio']:.3f}" if p.get("ratio") else "-"
    fmt = lambda v: f"{v * 1e6:9.1f}u" if v else "-"
    print(f"{op:8} {case:16} {dtype:9} {impl:9} {fmt(base):>10} {fmt(new):>10} {ratio:>6} {p['verdict']}")
sys.exit(0 if same and named else 1)
EOF
echo "scaleout: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
