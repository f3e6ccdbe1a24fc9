#!/usr/bin/env bash
# Build libskfamilies.so: the .cu files of issue 15's families plus the ctypes shim, for sm_90a by
# default (FAMILIES_ARCH=sm_80 for an Ampere build); scripts/dev/shim_build.sh does the work.
# Usage: bash scripts/dev/families_build.sh OUT_DIR  -> OUT_DIR/libskfamilies.so, OUT_DIR/families_ptxas.txt
set -euo pipefail
out=${1:?usage: families_build.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
families=(gemv quant cross_entropy rope transpose embedding histogram nms)  # slowest first
srcs=()
for f in "${families[@]}"; do srcs+=("$root"/kernels_ext/csrc/"$f"/*.cu); done  # every variant's file
exec bash "$root/scripts/dev/shim_build.sh" families "$out" "${FAMILIES_ARCH:-sm_90a}" \
  "${srcs[@]}" "$root/scripts/dev/families_shim.cu"
