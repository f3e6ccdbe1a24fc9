#!/usr/bin/env bash
# Kernel library on the H200: build, GPU tests, calibrate, doctor, and the issue-6 scoring run.
# Usage (device machine): bash scripts/h200_kernels.sh   (writes under $OUT)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
( time solbench build ) 2>&1 | tail -5
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu tests/test_calibrate.py tests/test_doctor.py \
    --junitxml "$OUT/gpu_tests.xml" 2>&1 | tail -25
timeout 120 solbench calibrate 2>&1 | tail -25
cp results/calibration/*.json "$OUT/" 2>/dev/null
timeout 200 solbench doctor 2>&1 | tail -20
timeout 400 solbench run --ops add,gelu,silu,swiglu,row_sum,softmax,rmsnorm,layernorm --peaks measured \
    --json "$OUT/kernels.json" 2>&1 | grep -E "cuda|ok|fail|error|invalid|results" | tail -60
