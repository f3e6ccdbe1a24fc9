#!/usr/bin/env bash
# First look at the harness on the H200: install, environment, gemm + attention + softmax baselines.
# Usage (device machine): bash scripts/h200_smoke.sh  (writes under $OUT)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c "import torch; print(torch.__version__, torch.version.cuda)"
solbench env
timeout 300 solbench run --ops gemm,attention --json "$OUT/gemm_attention.json" 2>&1 | tee "$OUT/gemm_attention.log" | tail -60
timeout 200 solbench run --ops softmax,add --json "$OUT/softmax_add.json" 2>&1 | tail -30
