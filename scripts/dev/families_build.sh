#!/usr/bin/env bash
# Build libskfamilies.so: the .cu files of issue 15's families plus the ctypes shim, one nvcc per
# file in parallel, for sm_90a by default (FAMILIES_ARCH=sm_80 for an Ampere build).
# Usage: bash scripts/dev/families_build.sh OUT_DIR  -> OUT_DIR/libskfamilies.so, OUT_DIR/families_ptxas.txt
set -euo pipefail
out=${1:?usage: families_build.sh OUT_DIR}
mkdir -p "$out/obj"
root=$(cd "$(dirname "$0")/../.." && pwd)
arch=${FAMILIES_ARCH:-sm_90a}
gencode="-gencode=arch=compute_${arch#sm_},code=${arch}"
# The flags of kernels_ext/_build.py plus the PyTorch extension's no-operator defines, so these
# objects compile as they will inside the library.
flags=(-std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -Xcompiler -fPIC -Xptxas -v
       -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__
       -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ "$gencode")
families=(gemv quant cross_entropy rope transpose embedding histogram nms)  # slowest first
srcs=()
for f in "${families[@]}"; do srcs+=("$root"/kernels_ext/csrc/"$f"/*.cu); done  # every variant's file
srcs+=("$root/scripts/dev/families_shim.cu")
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
: > "$out/families_ptxas.txt"
for src in "${srcs[@]}"; do
  name=$(basename "$src" .cu)
  echo "== $name" >> "$out/families_ptxas.txt"
  grep -E "Compiling entry|registers|spill" "$out/obj/$name.log" >> "$out/families_ptxas.txt" || true
done
if grep -E "[1-9][0-9]* bytes spill" "$out/families_ptxas.txt" > /dev/null; then
  echo "WARNING: register spills (see families_ptxas.txt)" >&2
fi
nvcc -shared -Xcompiler -fPIC "$gencode" -o "$out/libskfamilies.so" "$out"/obj/*.o -lcudart
echo "$out/libskfamilies.so"
