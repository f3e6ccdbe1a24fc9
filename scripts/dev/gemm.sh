#!/usr/bin/env bash
# The GEMM family on the GPU machine (H200), from the repo root:
#   bash scripts/dev/gemm.sh            (about 4-5 minutes: ~40 s build on 16 cores, then the parts)
# Builds libskgemm.so (kernels_ext/csrc/gemm/*.cu + scripts/dev/gemm_shim.cu, one nvcc per file in
# parallel), checks every variant against float64 on odd and large shapes, times them against
# cuBLAS / torch._scaled_mm / addmm / matmul+add in the same process, sweeps the wgmma tile
# configurations, the sgemm (bk16, bk32) and hgemm_mma (bk32, bk64) loaders and the decode
# kernels (gemm_decode splits, gemm_decode_mma), and prints a short table last.
# Without a GPU, `bash scripts/dev/gemm_build.sh DIR` alone writes DIR/gemm_ptxas.txt (registers,
# shared memory, spills per kernel: what docs/PERF.md lists). Files in $OUT: gemm.json (every record),
# gemm_bench.log (each part's full output), gemm_ptxas.txt (registers, smem, spills per kernel),
# gemm_sass.txt (HGMMA/QGMMA and local-memory counts per kernel, when cuobjdump is there).
# GEMM_PARTS=debug,wgmma runs a subset (debug first: one tile, then the pipeline's edges).
# GEMM_SANITIZE=1 first runs the debug part under compute-sanitizer memcheck (gemm_sanitizer.txt).
# GEMM_TESTS=1 also installs the project and runs pytest -m gpu tests/gpu/test_gemm.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gemm_out}
build=${GEMM_BUILD:-/tmp/gemm_build}
mkdir -p "$out"
start=$(date +%s)
if ! bash scripts/dev/gemm_build.sh "$build" > "$out/gemm_build.txt" 2>&1; then
  echo "BUILD FAILED"; tail -40 "$out/gemm_build.txt"; exit 1
fi
cp "$build/gemm_ptxas.txt" "$out/gemm_ptxas.txt"
echo "built in $(( $(date +%s) - start )) s"
grep -E "warning|C7508|C7515" "$out/gemm_ptxas.txt" | head -5
if command -v cuobjdump > /dev/null; then
  cuobjdump --dump-sass "$build/libskgemm.so" 2> /dev/null | awk '
    /Function :/ { if (name) printf "%-8d %-8d %-6d %s\n", hg, qg, lm, name; name=$3; hg=0; qg=0; lm=0 }
    /HGMMA/ { hg++ } /QGMMA/ { qg++ } /LDL|STL/ { lm++ }
    END { if (name) printf "%-8d %-8d %-6d %s\n", hg, qg, lm, name }' \
    | { echo "HGMMA    QGMMA    LDL/STL kernel"; cat; } > "$out/gemm_sass.txt"
  awk 'NR > 1 && $3 > 0 { bad++ } END { if (bad) print bad " kernels touch local memory (gemm_sass.txt)" }' "$out/gemm_sass.txt"
fi
if [ "${GEMM_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  # memcheck over the debug part only (one-tile cases: a wrong address shows with its kernel)
  compute-sanitizer --tool memcheck --print-limit 20 python scripts/dev/gemm_bench.py \
    --lib "$build/libskgemm.so" --out "$out" --part debug > "$out/gemm_sanitizer.txt" 2>&1
  tail -25 "$out/gemm_sanitizer.txt"
fi
python scripts/dev/gemm_bench.py --lib "$build/libskgemm.so" --out "$out" \
  --parts "${GEMM_PARTS:-debug,sgemm,mma,wgmma,fp8,residual,decode,dispatch}"
status=$?
if [ "${GEMM_TESTS:-0}" = 1 ]; then
  pip install --no-deps --no-build-isolation -e . > /dev/null 2>&1 && \
    python -m pytest -q -m gpu tests/gpu/test_gemm.py 2>&1 | tail -15
fi
echo "total $(( $(date +%s) - start )) s"
exit $status
