#!/usr/bin/env bash
# The attention family on the GPU machine (H200), from the repo root:
#   bash scripts/dev/attention.sh          (about 3-4 minutes: ~20 s build on 16 cores, checks, bench)
# Builds libsk_attention.so (kernels_ext/csrc/attention/*.cu + scripts/dev/attention_shim.cu, one
# nvcc per file in parallel), checks flash_mma (each tile configuration), decode and flash_wgmma
# against an fp32 reference (one-tile diagnostics first, then lengths 1/17/1000/4097, SQ != SK,
# GQA 1/4/8, causal, bf16/fp16, LSE), each variant in its own process with a timeout (a hang or a
# fault costs only that variant), then times every variant against SDPA cudnn/flash/efficient
# (and flex) in one process. Prints a short table last. Files in $OUT: attention.json (every
# record), attention_log.txt (every worker's output), attention_ptxas.txt (registers, smem,
# spills, wgmma serialisation warnings per kernel), attention_sass.txt (HGMMA/HMMA/LDL counts per
# kernel, when cuobjdump is there).
#   ATTN_DEBUG=1     only the one-tile diagnostics (seconds)
#   ATTN_FLEX=0      skip the flex_attention baseline (its first call compiles for ~30 s)
#   ATTN_SANITIZE=1  also run each variant's diagnostics under compute-sanitizer memcheck
#                    (attention_sanitizer.txt)
#   ATTN_TESTS=1     also build the torch extension and run pytest -m gpu tests/gpu/test_attention.py
set -uo pipefail
py=${PYTHON:-python}
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/attention_out}
export ATTN_BUILD=${ATTN_BUILD:-/tmp/attention_build}
mkdir -p "$out"
args=()
[ "${ATTN_DEBUG:-0}" = 1 ] && args+=(--debug)
[ "${ATTN_FLEX:-1}" = 0 ] && args+=(--no-flex)

if [ "${ATTN_SANITIZE:-0}" = 1 ]; then
  "$py" scripts/dev/attention_bench.py --out "$out" --build-only || exit 1
  : > "$out/attention_sanitizer.txt"
  for v in mma decode_mma decode wgmma wgmma_persistent; do
    timeout 300 compute-sanitizer --tool memcheck --print-limit 20 \
      "$py" scripts/dev/attention_bench.py --worker check --variant "$v" --debug \
      --lib "$ATTN_BUILD/libsk_attention.so" --json "$ATTN_BUILD/sanitize_$v.json" \
      >> "$out/attention_sanitizer.txt" 2>&1
    echo "sanitizer $v: exit $?" | tee -a "$out/attention_sanitizer.txt"
  done
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/attention_sanitizer.txt" | head -20
fi

"$py" scripts/dev/attention_bench.py --out "$out" ${args[@]+"${args[@]}"}
status=$?

if command -v cuobjdump > /dev/null && [ -f "$ATTN_BUILD/libsk_attention.so" ]; then
  cuobjdump --dump-sass "$ATTN_BUILD/libsk_attention.so" 2> /dev/null | awk '
    /Function :/ { if (name) printf "%-6d %-6d %-6d %s\n", hg, hm, lm, name; name=$3; hg=0; hm=0; lm=0 }
    /HGMMA/ { hg++ } /HMMA/ { hm++ } /LDL|STL/ { lm++ }
    END { if (name) printf "%-6d %-6d %-6d %s\n", hg, hm, lm, name }' \
    | { echo "HGMMA  HMMA   LDL/STL kernel"; cat; } > "$out/attention_sass.txt"
fi

if [ "${ATTN_TESTS:-0}" = 1 ]; then
  pip install --no-deps --no-build-isolation -e . > /dev/null 2>&1
  "$py" -m pytest -m gpu tests/gpu/test_attention.py -x -q 2>&1 | tail -15
fi
exit $status
