#!/usr/bin/env bash
# The attention family's final H200 run (issue 14), from the repo root, after `pip install -e .`
# and `solbench build` (this script builds nothing):
#   bash scripts/h200/attention_final.sh    (~4 minutes; every step has its own timeout, 9 minutes
#                                            in all if every one of them ran out)
# 1. pytest -m gpu tests/gpu/test_attention.py, in two parts: every test but those of the new
#    flash_wgmma_persistent variant (~1 min), then that variant's own (-k persistent, ~15 s), so
#    that a hang in the new variant costs only its tests, never the measured ones;
# 2. solbench run of attention + attention_decode, bf16 (fp16 is covered by the tests), every
#    SDPA backend but math (a reference for CPU runs; at S = 16k it materialises 17 GB of scores),
#    our kernels; flash_wgmma_persistent only when its tests passed (~2.5 min);
# 3. the flex_attention baseline (torch.compile'd; its compile is ~10-30 s per shape) at the
#    headline case B=4 H=32 S=4096 D=128, merged into the same results file (--resume), ~45 s.
#    ATTN_FLEX=0 skips it.
# Files in $OUT: attention.json (every record), attention_log.txt (pytest and solbench output).
# The last thing printed is a short table (scripts/h200/attention_summary.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/attention_log.txt
JSON=$OUT/attention.json
RUNS=${TMPDIR:-/tmp}/attention_runs   # solbench's own timestamped copies stay out of $OUT
: > "$LOG"
SECONDS=0
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }

say "pytest: attention GPU tests (all but flash_wgmma_persistent)"
timeout 120 python -m pytest -q -m gpu tests/gpu/test_attention.py -k "not persistent" -p no:cacheprovider \
  >> "$LOG" 2>&1
say "pytest rc=$? ($(grep -E '^[0-9]+ (passed|failed)|passed|failed' "$LOG" | tail -1))"

say "pytest: flash_wgmma_persistent"
timeout 60 python -m pytest -q -m gpu tests/gpu/test_attention.py -k persistent -p no:cacheprovider >> "$LOG" 2>&1
persistent_rc=$?
say "pytest persistent rc=$persistent_rc ($(tail -1 "$LOG"))"

impls=default,cudnn,flash,efficient,flash_wgmma,flash_mma,auto,decode
if [ "$persistent_rc" = 0 ]; then
  impls=$impls,flash_wgmma_persistent
else
  say "flash_wgmma_persistent left out of the run: its tests did not pass"
fi
say "solbench run --ops attention,attention_decode --dtypes bfloat16 --impls $impls"
timeout 270 solbench run --ops attention,attention_decode --dtypes bfloat16 --impls "$impls" --budget 0.5 \
  --timeout 60 --json "$JSON" --out "$RUNS" >> "$LOG" 2>&1
say "solbench run rc=$?"

if [ "${ATTN_FLEX:-1}" = 1 ] && [ -f "$JSON" ]; then
  say "flex_attention at B=4 H=32 S=4096 D=128 (compiles once)"
  timeout 90 solbench run --ops attention --dtypes bfloat16 --impls flex --budget 0.5 --timeout 80 \
    --shape B=4,H=32,HKV=32,SQ=4096,SK=4096,D=128,causal=0 --resume "$JSON" --out "$RUNS" >> "$LOG" 2>&1
  say "flex run rc=$?"
fi

if [ -f "$JSON" ]; then
  python scripts/h200/attention_summary.py "$JSON" 2>&1 | tee -a "$LOG"
fi
say "done"
