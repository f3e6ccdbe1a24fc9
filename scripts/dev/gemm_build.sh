#!/usr/bin/env bash
# Build libskgemm.so: every kernels_ext/csrc/gemm/*.cu plus the ctypes shim, for sm_90a by default
# (GEMM_ARCH=sm_80 for an Ampere build); scripts/dev/shim_build.sh does the work.
# Usage: bash scripts/dev/gemm_build.sh OUT_DIR   -> OUT_DIR/libskgemm.so, OUT_DIR/gemm_ptxas.txt
set -euo pipefail
out=${1:?usage: gemm_build.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
exec bash "$root/scripts/dev/shim_build.sh" gemm "$out" "${GEMM_ARCH:-sm_90a}" \
  "$root"/kernels_ext/csrc/gemm/*.cu "$root/scripts/dev/gemm_shim.cu"
