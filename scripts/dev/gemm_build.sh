#!/usr/bin/env bash
# Build libskgemm.so: every kernels_ext/csrc/gemm/*.cu plus the ctypes shim, compiled in
# parallel (one nvcc per file), for sm_90a by default (GEMM_ARCH=sm_80 for an Ampere build).
# Usage: bash scripts/dev/gemm_build.sh OUT_DIR   -> OUT_DIR/libskgemm.so, OUT_DIR/gemm_ptxas.txt
set -euo pipefail
out=${1:?usage: gemm_build.sh OUT_DIR}
mkdir -p "$out/obj"
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${GEMM_ARCH:-sm_90a}
gencode="-gencode=arch=compute_${arch#sm_},code=${arch}"
flags=(-std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -Xcompiler -fPIC -Xptxas -v
       -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__
       -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ "$gencode")
srcs=("$root"/kernels_ext/csrc/gemm/*.cu "$root/scripts/dev/gemm_shim.cu")
pids=()
for src in "${srcs[@]}"; do
  name=$(basename "$src" .cu)
  nvcc "${flags[@]}" -c "$src" -o "$out/obj/$name.o" > "$out/obj/$name.log" 2>&1 &
  pids+=("$!:$name")
done
failed=0
for entry in "${pids[@]}"; do
  pid=${entry%%:*}; name=${entry#*:}
  if ! wait "$pid"; then
    echo "BUILD FAILED: $name" >&2
    grep -E "error" "$out/obj/$name.log" | head -20 >&2 || tail -20 "$out/obj/$name.log" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
# registers / shared memory / spills per kernel, with the file each came from
: > "$out/gemm_ptxas.txt"
for src in "${srcs[@]}"; do
  name=$(basename "$src" .cu)
  echo "== $name" >> "$out/gemm_ptxas.txt"
  grep -E "Compiling entry|Used|spill|warning" "$out/obj/$name.log" >> "$out/gemm_ptxas.txt" || true
done
if grep -qE "C7508|C7515|setmaxnreg ignored|serialized" "$out/gemm_ptxas.txt"; then
  echo "WARNING: ptxas reports ignored setmaxnreg or serialized wgmma (see gemm_ptxas.txt)" >&2
fi
nvcc -shared -cudart shared "$gencode" -o "$out/libskgemm.so" "$out"/obj/*.o
echo "$out/libskgemm.so"
