#!/usr/bin/env bash
# Measurement checks on the GPU machine (timers, traps, A/A). Usage: bash scripts/h200_timing_checks.sh
# Writes under $OUT: timers.json, aa_a.json, aa_b.json and logs. About 3-5 minutes.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
echo "== pytest gpu timing + traps"
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_measure_gpu.py tests/gpu/test_traps_gpu.py 2>&1 | tail -25
echo "== timer agreement"
timeout 150 python3 scripts/timer_agreement.py "$OUT/timers.json" 2>&1 | grep -v USDT
echo "== A/A (eager baselines of softmax and gemm, twice)"
for run in a b; do
  timeout 150 solbench run --ops softmax,gemm --impls eager --json "$OUT/aa_$run.json" > "$OUT/aa_$run.log" 2>&1
  tail -4 "$OUT/aa_$run.log"
done
solbench compare --aa "$OUT/aa_a.json" "$OUT/aa_b.json"
