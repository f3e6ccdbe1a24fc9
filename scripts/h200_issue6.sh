#!/usr/bin/env bash
# Issue 6 (kernel library) on the H200, in two parts of under 10 minutes each.
#   bash scripts/h200_issue6.sh checks  GPU tests, tuning bench, calibrate  -> $OUT/checks.tgz
#   bash scripts/h200_issue6.sh score   the scoring run, measured peaks     -> $OUT/score.tgz
# `score` reads results/h200/calibration_v2.json (the `checks` calibration, committed).
set -uo pipefail
PART=${1:-checks}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
W=$OUT/$PART; mkdir -p "$W" results/calibration
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$W/env.txt"
if [ "$PART" = checks ]; then
  ( time nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -o /tmp/kernel_tiles \
      scripts/tune/kernel_tiles.cu ) > "$W/bench_build.log" 2>&1 &
  ( time solbench build ) > "$W/build.log" 2>&1
  wait
  echo "== gpu tests"
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu --junitxml "$W/gpu_tests.xml" \
      > "$W/gpu_tests.log" 2>&1; echo "tests rc=$?"; tail -2 "$W/gpu_tests.log"
  echo "== tuning bench"; /tmp/kernel_tiles "$W/tiles.jsonl" > "$W/tiles.txt" 2>&1; echo "bench rc=$?"
  echo "== calibrate"; timeout 150 solbench calibrate > "$W/calibrate.txt" 2>&1; echo "calibrate rc=$?"
  cp results/calibration/*.json "$W/" 2>/dev/null; tail -14 "$W/calibrate.txt"
else
  cp results/h200/calibration_v2.json results/calibration/nvidia-h200-132sm-140gib.json
  ( time solbench build ) > "$W/build.log" 2>&1
  echo "== scoring run"
  timeout 500 solbench run --ops add,gelu,silu,swiglu,row_sum,softmax,rmsnorm,layernorm --peaks measured \
      --json "$W/kernels_v2.json" > "$W/kernels_v2.log" 2>&1; echo "run rc=$?"
  grep -E " cuda " "$W/kernels_v2.log" | tail -40
fi
tar -czf "$OUT/$PART.tgz" -C "$OUT" "$PART"
