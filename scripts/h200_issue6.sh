#!/usr/bin/env bash
# Issue 6 (kernel library) on the H200. Parts, run in the order given (each under 5 minutes):
#   tests      all GPU tests (odd sizes, fp64 references, opcheck, timing traps)
#   bench      the tuning bench scripts/tune/kernel_tiles.cu (tiles.jsonl / tiles.txt)
#   calibrate  solbench calibrate (copy / read / write bandwidth, matmul ceilings)
#   score      solbench run of the issue's eight ops with measured peaks, from
#              results/h200/calibration_v2.json (a committed `calibrate`)
# Usage (GPU machine, repo root): bash scripts/h200_issue6.sh tests bench score  -> $OUT/issue6.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
W=$OUT/issue6; mkdir -p "$W" results/calibration
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$W/env.txt"
if [[ " $* " == *" bench "* ]]; then
  ( time nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -o /tmp/kernel_tiles \
      scripts/tune/kernel_tiles.cu ) > "$W/bench_build.log" 2>&1 &
fi
( time solbench build ) > "$W/build.log" 2>&1
wait
for part in "$@"; do
  echo "== $part"
  case $part in
    tests)
      timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu --junitxml "$W/gpu_tests.xml" \
          > "$W/gpu_tests.log" 2>&1; echo "tests rc=$?"; tail -1 "$W/gpu_tests.log" ;;
    bench)
      /tmp/kernel_tiles "$W/tiles.jsonl" > "$W/tiles.txt" 2>&1; echo "bench rc=$?" ;;
    calibrate)
      timeout 150 solbench calibrate > "$W/calibrate.txt" 2>&1; echo "calibrate rc=$?"
      cp results/calibration/*.json "$W/" 2>/dev/null; tail -14 "$W/calibrate.txt" ;;
    score)
      cp results/h200/calibration_v2.json results/calibration/nvidia-h200-132sm-140gib.json
      timeout 300 solbench run --ops add,gelu,silu,swiglu,row_sum,softmax,rmsnorm,layernorm --peaks measured \
          --json "$W/kernels.json" > "$W/kernels.log" 2>&1; echo "run rc=$?"
      python3 scripts/issue6_table.py "$W/kernels.json" results/h200/calibration_v2.json | tee "$W/table.md" ;;
    *) echo "unknown part: $part"; exit 2 ;;
  esac
done
tar -czf "$OUT/issue6.tgz" -C "$OUT" issue6
