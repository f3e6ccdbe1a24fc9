#!/usr/bin/env bash
# The recorded H200 session: GPU tests, timer agreement, A/A + deliberately slowed compare, and the
# full scoring run of every op with a CUDA kernel plus gemm/attention. Writes $OUT/<part>.tgz.
# Usage (device machine, repo root): bash scripts/h200_final.sh checks   (~5 min)
#                                     bash scripts/h200_final.sh score    (~5 min)
set -uo pipefail
PART=${1:-checks}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
W=$OUT/$PART; mkdir -p "$W" results/calibration
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
cp results/h200/calibration.json results/calibration/nvidia-h200-132sm-140gib.json  # from `solbench calibrate`
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } > "$W/env.txt"
( time solbench build ) > "$W/build.log" 2>&1
if [ "$PART" = checks ]; then
echo "== gpu tests"; timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu --junitxml "$W/gpu_tests.xml" > "$W/gpu_tests.log" 2>&1
tail -8 "$W/gpu_tests.log"
echo "== timers"; timeout 150 python3 scripts/timer_agreement.py "$W/timers.json" 2>&1 | grep -v -e USDT -e Warning -e _warn_once | tee "$W/timers.txt"
echo "== A/A and slowed"
for run in a b; do timeout 150 solbench run --ops softmax,gemm --impls eager --json "$W/aa_$run.json" > "$W/aa_$run.log" 2>&1; done
timeout 150 solbench run --ops softmax,gemm --impls eager --specs scripts/slowed --json "$W/slowed.json" > "$W/slowed.log" 2>&1
solbench compare --aa "$W/aa_a.json" "$W/aa_b.json" > "$W/aa_check.txt" 2>&1; tail -3 "$W/aa_check.txt"
solbench compare "$W/aa_a.json" "$W/aa_b.json" --markdown "$W/compare_aa.md" > "$W/compare_aa.txt" 2>&1; echo "A/A compare rc=$?"
solbench compare "$W/aa_a.json" "$W/slowed.json" --markdown "$W/compare_slowed.md" > "$W/compare_slowed.txt" 2>&1; echo "slowed compare rc=$?"
grep -E "SLOWER|FASTER" "$W/compare_slowed.txt" | head
else
echo "== final scoring run"
timeout 420 solbench run --ops gemm,attention,softmax,add,gelu,silu,swiglu,row_sum,rmsnorm,layernorm --peaks measured \
    --json "$W/final.json" > "$W/final.log" 2>&1; echo "final rc=$?"
grep -E " cuda |ok|invalid|failed|error" "$W/final.log" | tail -40
fi
tar -czf "$OUT/$PART.tgz" -C "$OUT" "$PART"
