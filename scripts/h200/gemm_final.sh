#!/usr/bin/env bash
# The GEMM family's final H200 run (issue 13), from the repo root, after `pip install -e .` and
# `solbench build` (this script builds nothing):
#   bash scripts/h200/gemm_final.sh          (~5 minutes; every step has its own timeout, and no step
#                                              starts or runs past GEMM_LIMIT_S = 570 s in all)
# 1. pytest -m gpu tests/gpu/test_gemm.py in four parts: the measured variants (~60 s), then each
#    new variant's own tests -- sgemm config=bk32, gemm_mma config=bk64 and bk64_pipe, gemm_decode_mma -- so a
#    failure in a new variant costs only its own tests and its records (~15 s each);
# 2. solbench run --ops gemm,gemm_decode,linear_residual --dtypes float32,bfloat16,float8_e4m3fn
#    (fp16 and tf32 are covered by the tests / not targets), every impl and baseline but the
#    torch.compile one: 85 records at --budget 0.5 s of sampling each (~2 minutes); a new
#    variant only when its tests passed;
# 3. the torch.compile max-autotune baseline (bf16, the five gemm cases: Inductor's template search
#    is 15-40 s per shape) merged into the same results file with --resume (~2 minutes at most;
#    GEMM_COMPILED=0 skips it).
# Files in $OUT: gemm.json (every record), gemm_log.txt (pytest and solbench output).
# The last thing printed is a short table with the targets (scripts/h200/gemm_summary.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/gemm_log.txt
JSON=$OUT/gemm.json
RUNS=${TMPDIR:-/tmp}/gemm_runs   # solbench's own timestamped copies stay out of $OUT
BUDGET=${GEMM_BUDGET:-0.5}
LIMIT=${GEMM_LIMIT_S:-570}
: > "$LOG"
SECONDS=0
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
cap() {  # cap SECONDS: that step's timeout, shortened to what is left of LIMIT (at least 1)
  local left=$(( LIMIT - SECONDS ))
  [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
tests() {  # tests NAME TIMEOUT PYTEST-ARGS...: one pytest part, its summary line in the log
  local name=$1 limit; limit=$(cap "$2"); shift 2
  timeout "$limit" python -m pytest -q -m gpu tests/gpu/test_gemm.py -p no:cacheprovider "$@" >> "$LOG" 2>&1
  local rc=$?
  say "pytest $name rc=$rc ($(grep -E '(passed|failed|error)' "$LOG" | tail -1))"
  return $rc
}

tests "gemm (measured variants)" 150 -k "not (sgemm_configs and bk32) and not bk64 and not decode_mma"
impls=eager,sgemm_fp32,hgemm_mma,hgemm_wgmma,fp8_wgmma,auto,decode_wgmma,unfused,addmm,fused
if tests "sgemm bk32" 60 -k "sgemm_configs and bk32"; then impls=$impls,sgemm_fp32_bk32
else say "sgemm_fp32_bk32 left out of the run"; fi
if tests "gemm_mma bk64 and bk64_pipe" 60 -k bk64; then impls=$impls,hgemm_mma_bk64,hgemm_mma_bk64_pipe
else say "hgemm_mma_bk64 and hgemm_mma_bk64_pipe left out of the run"; fi
if tests "gemm_decode_mma" 60 -k decode_mma; then impls=$impls,decode_mma
else say "decode_mma left out of the run"; fi

say "solbench run --ops gemm,gemm_decode,linear_residual --impls $impls --budget $BUDGET"
timeout "$(cap 300)" solbench run --ops gemm,gemm_decode,linear_residual --dtypes float32,bfloat16,float8_e4m3fn \
  --impls "$impls" --budget "$BUDGET" --timeout 120 --json "$JSON" --out "$RUNS" >> "$LOG" 2>&1
say "solbench run rc=$?"

if [ "${GEMM_COMPILED:-1}" = 1 ] && [ -f "$JSON" ] && [ $(( LIMIT - SECONDS )) -ge 60 ]; then
  say "torch.compile max-autotune baseline (bf16, five shapes, one template search each)"
  timeout "$(cap 200)" solbench run --ops gemm --dtypes bfloat16 --impls compiled --budget "$BUDGET" --timeout 150 \
    --resume "$JSON" --out "$RUNS" >> "$LOG" 2>&1
  say "compiled run rc=$?"
fi

if [ -f "$JSON" ]; then
  python scripts/h200/gemm_summary.py "$JSON" 2>&1 | tee -a "$LOG"
fi
say "done"
