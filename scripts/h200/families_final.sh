#!/usr/bin/env bash
# Issue 15's kernel families, the final H200 run, from the repo root, after `pip install -e .` and
# `solbench build` (this script builds nothing):
#   bash scripts/h200/families_final.sh          (~5 minutes; every step has its own timeout)
# 1. pytest -m gpu tests/gpu/test_families.py in three parts: everything but the two new variants
#    (~60 s), then transpose variant=regs (-k regs) and gemv variant=mma (-k mma), ~10 s each, so a
#    failure in a new variant costs only its own tests and its records;
# 2. solbench run of the 15 family specs (rope, rope_inplace, transpose, transpose_batched,
#    cross_entropy, cross_entropy_rows, embedding, histogram, histogram_skewed, fp8_quant,
#    fp8_quant_dynamic, fp8_quant_rows, fp8_dequant, gemv, nms) at bf16 / int32 / uint8: 171 records,
#    43 of them torch.compile baselines (one compile per shape; compiled at bf16 / int32 only);
#    then fp32 where it is one of the targets (rope, transpose, transpose_batched, gemv, nms),
#    44 records, merged into the same file (--resume). --budget 0.3 s of sampling per record, all
#    ops in one process (--no-isolate: one CUDA context and one warm Inductor instead of 15; the
#    kernels' GPU tests ran first), ~3.5 minutes in all; cuda_regs / cuda_mma only when their tests
#    passed; nms's host-loop baseline (for CPU runs) left out. fp32 of the other ops is checked by
#    the GPU tests, not timed here.
# Files in $OUT: families.json (every record), families_log.txt (pytest and solbench output).
# The last thing printed is a short table (scripts/h200/families_summary.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/families_log.txt
JSON=$OUT/families.json
RUNS=${TMPDIR:-/tmp}/families_runs   # solbench's own timestamped copies stay out of $OUT
BUDGET=${FAMILIES_BUDGET:-0.3}
: > "$LOG"
SECONDS=0
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
tests() {  # tests NAME TIMEOUT PYTEST-ARGS...: one pytest part, its summary line in the log
  local name=$1 limit=$2; shift 2
  timeout "$limit" python -m pytest -q -m gpu tests/gpu/test_families.py -p no:cacheprovider "$@" >> "$LOG" 2>&1
  local rc=$?
  say "pytest $name rc=$rc ($(grep -E '(passed|failed|error)' "$LOG" | tail -1))"
  return $rc
}

tests "families (measured variants)" 150 -k "not regs and not mma"
# --impls may name only implementations the selected specs have: bf16 adds embedding's
# cuda_unchecked and gemv's bf16-only cuda_mma, fp32 neither.
impls16=eager,compiled,cuda,cuda_unchecked,torchvision
impls32=eager,compiled,cuda,torchvision
if tests "transpose regs" 60 -k regs; then
  impls16=$impls16,cuda_regs; impls32=$impls32,cuda_regs
else
  say "cuda_regs left out of the run"
fi
if tests "gemv mma" 60 -k mma; then impls16=$impls16,cuda_mma; else say "cuda_mma left out of the run"; fi

ops=rope,rope_inplace,transpose,transpose_batched,cross_entropy,cross_entropy_rows,embedding,histogram
ops=$ops,histogram_skewed,fp8_quant,fp8_quant_dynamic,fp8_quant_rows,fp8_dequant,gemv,nms
say "solbench run --ops (15 family specs) --dtypes bfloat16,int32,uint8 --impls $impls16 --budget $BUDGET"
timeout 270 solbench run --ops "$ops" --dtypes bfloat16,int32,uint8 --impls "$impls16" --budget "$BUDGET" \
  --timeout 120 --no-isolate --json "$JSON" --out "$RUNS" >> "$LOG" 2>&1
say "solbench run rc=$?"
if [ -f "$JSON" ]; then
  say "solbench run --ops rope,transpose,transpose_batched,gemv,nms --dtypes float32 (merged: --resume)"
  timeout 120 solbench run --ops rope,transpose,transpose_batched,gemv,nms --dtypes float32 --impls "$impls32" \
    --budget "$BUDGET" --timeout 120 --no-isolate --resume "$JSON" --out "$RUNS" >> "$LOG" 2>&1
  say "solbench run (fp32) rc=$?"
fi

if [ -f "$JSON" ]; then
  python scripts/h200/families_summary.py "$JSON" 2>&1 | tee -a "$LOG"
fi
say "done"
