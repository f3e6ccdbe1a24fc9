#!/usr/bin/env bash
# Are the measured matmul ceilings true maxima? `solbench calibrate`, then the gemm baselines scored
# against them: any SOL above 1 (an `invalid` record) means a ceiling was beaten.
# Usage (GPU machine, repo root): bash scripts/h200_ceilings.sh   -> $OUT/ceilings.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
W=$OUT/ceilings; mkdir -p "$W"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$W/env.txt"
timeout 240 solbench calibrate > "$W/calibrate.txt" 2>&1; echo "calibrate rc=$?"
cp results/calibration/*.json "$W/"; tail -14 "$W/calibrate.txt"
timeout 240 solbench run --ops gemm --peaks measured --json "$W/gemm_measured.json" > "$W/gemm.log" 2>&1
echo "gemm rc=$?"
python3 - "$W/gemm_measured.json" <<'PY'
import json, sys
recs = json.load(open(sys.argv[1]))["records"]
for r in recs:
    print(f"{r['case']:24} {r['dtype']:14} {r['status']:8} SOL {r.get('sol') or 0:.3f} {r.get('message', '')[:80]}")
print("invalid:", sum(r["status"] == "invalid" for r in recs), "of", len(recs))
PY
tar -czf "$OUT/ceilings.tgz" -C "$OUT" ceilings
