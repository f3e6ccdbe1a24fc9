#!/usr/bin/env bash
# Build a ctypes-loadable library of kernel .cu files plus a shim (scripts/dev/*_shim.cu), one nvcc
# per file in parallel, with the flags kernels_ext/_build.py gives nvcc and the PyTorch extension's
# no-operator defines, so the objects compile as they will inside the library.
# Usage: bash scripts/dev/shim_build.sh NAME OUT_DIR ARCH SRC...
#   -> OUT_DIR/libskNAME.so, OUT_DIR/NAME_ptxas.txt (registers, shared memory, spills per kernel,
#      with the file each came from); warns on spills, ignored setmaxnreg and serialized wgmma.
set -euo pipefail
name=${1:?usage: shim_build.sh NAME OUT_DIR ARCH SRC...}
out=${2:?usage: shim_build.sh NAME OUT_DIR ARCH SRC...}
arch=${3:?usage: shim_build.sh NAME OUT_DIR ARCH SRC...}
shift 3
srcs=("$@")
[ "${#srcs[@]}" -gt 0 ] || { echo "shim_build.sh: no source files given" >&2; exit 2; }
mkdir -p "$out/obj"
gencode="-gencode=arch=compute_${arch#sm_},code=${arch}"
flags=(-std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -Xcompiler -fPIC -Xptxas -v
       -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__
       -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ "$gencode")
pids=()
for src in "${srcs[@]}"; do
  obj=$(basename "$src" .cu)
  nvcc "${flags[@]}" -c "$src" -o "$out/obj/$obj.o" > "$out/obj/$obj.log" 2>&1 &
  pids+=("$!:$obj")
done
failed=0
for entry in "${pids[@]}"; do
  pid=${entry%%:*}; obj=${entry#*:}
  if ! wait "$pid"; then
    echo "BUILD FAILED: $obj" >&2
    grep -E "error" "$out/obj/$obj.log" | head -20 >&2 || tail -20 "$out/obj/$obj.log" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
report="$out/${name}_ptxas.txt"
: > "$report"
for src in "${srcs[@]}"; do
  obj=$(basename "$src" .cu)
  echo "== $obj" >> "$report"
  grep -E "Compiling entry|Used|spill|warning" "$out/obj/$obj.log" >> "$report" || true
done
if grep -qE "[1-9][0-9]* bytes spill" "$report"; then
  echo "WARNING: register spills (see $(basename "$report"))" >&2
fi
if grep -qE "C7508|C7515|setmaxnreg ignored|serialized" "$report"; then
  echo "WARNING: ptxas reports ignored setmaxnreg or serialized wgmma (see $(basename "$report"))" >&2
fi
nvcc -shared -cudart shared "$gencode" -o "$out/libsk$name.so" "$out"/obj/*.o
echo "$out/libsk$name.so"
