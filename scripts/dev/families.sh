#!/usr/bin/env bash
# Issue 15's kernel families on the GPU machine (H200), from the repo root:
#   bash scripts/dev/families.sh        (about 4 minutes: ~45 s build on 16 cores, then the families)
# Builds libskfamilies.so (kernels_ext/csrc/{rope,transpose,cross_entropy,embedding,histogram,quant,
# gemv,nms}/*.cu + scripts/dev/families_shim.cu, one nvcc per file in parallel), checks every kernel
# against float64 references or bit for bit (torchvision.ops.nms for NMS) on random, odd-sized,
# misaligned and bad inputs, times it against PyTorch eager and torch.compile in the same process,
# and prints a short table last. Files in $OUT: families.json (every record), families.jsonl (the
# raw event stream), families_bench.log (the children's output), families_build.txt,
# families_ptxas.txt (registers / spills per kernel).
# FAMILIES=rope,gemv runs a subset. FAMILIES_TESTS=1 also installs the project, builds the
# extension and runs pytest -m gpu tests/gpu/test_families.py (a few minutes more).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/families_out}
build=${FAMILIES_BUILD:-/tmp/families_build}
mkdir -p "$out"
start=$(date +%s)
if ! bash scripts/dev/families_build.sh "$build" > "$out/families_build.txt" 2>&1; then
  echo "BUILD FAILED"; tail -40 "$out/families_build.txt"; exit 1
fi
cp "$build/families_ptxas.txt" "$out/families_ptxas.txt"
built=$(( $(date +%s) - start ))
echo "built in ${built} s"
grep -E "WARNING" "$out/families_build.txt" | head -3
budget=$(( 230 - built ))
[ "$budget" -lt 90 ] && budget=90
python scripts/dev/families_bench.py --lib "$build/libskfamilies.so" --out "$out" --budget "$budget" \
  ${FAMILIES:+--families "$FAMILIES"}
status=$?
if [ "${FAMILIES_TESTS:-0}" = 1 ]; then
  pip install --no-deps --no-build-isolation -e . > /dev/null 2>&1 && \
    python -m pytest -q -m gpu tests/gpu/test_families.py 2>&1 | tail -25
fi
echo "total $(( $(date +%s) - start )) s"
exit $status
