#!/usr/bin/env bash
# The kernel families' first GPU look, in ONE device call (the lead's script; about 9 minutes):
# builds the three ctypes libraries in parallel (gemm, attention, issue-15 families), then runs each
# family's checks and timings in turn, each under its own time limit, so one family hanging cannot
# eat the others' time. Each family's files come back as one tarball ($OUT holds at most 8 files).
#   bash scripts/dev/call_kernels.sh      (from the repo root, on the GPU machine)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/call_kernels}
work=/tmp/call_kernels_work
mkdir -p "$out" "$work"/{gemm,attention,families}
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  nvcc --version | tail -1; date -u; } > "$work/env.txt" 2>&1

stamp "building the three libraries in parallel"
( bash scripts/dev/gemm_build.sh /tmp/gemm_build > "$work/gemm/gemm_build.txt" 2>&1; echo $? > "$work/gemm/build_rc" ) &
( bash scripts/dev/families_build.sh /tmp/families_build > "$work/families/families_build.txt" 2>&1; echo $? > "$work/families/build_rc" ) &
( ATTN_BUILD=/tmp/attention_build python3 scripts/dev/attention_bench.py --out "$work/attention" --build-only \
    > "$work/attention/attention_build.txt" 2>&1; echo $? > "$work/attention/build_rc" ) &
wait
stamp "built: gemm rc=$(cat $work/gemm/build_rc) attention rc=$(cat $work/attention/build_rc) families rc=$(cat $work/families/build_rc)"

if [ "$(cat $work/gemm/build_rc)" = 0 ]; then
  cp /tmp/gemm_build/gemm_ptxas.txt "$work/gemm/" 2>/dev/null
  timeout 170 python3 scripts/dev/gemm_bench.py --lib /tmp/gemm_build/libskgemm.so --out "$work/gemm" \
    --parts "${GEMM_PARTS:-debug,sgemm,mma,wgmma,fp8,residual,decode,dispatch}" > "$work/gemm/stdout.txt" 2>&1
  echo "gemm rc=$?" >> "$work/gemm/stdout.txt"
else tail -30 "$work/gemm/gemm_build.txt"; fi
stamp "gemm done"; tail -35 "$work/gemm/stdout.txt" > "$work/gemm_tail.txt"

if [ "$(cat $work/attention/build_rc)" = 0 ]; then
  ATTN_BUILD=/tmp/attention_build ATTN_PREBUILT=1 timeout 175 python3 scripts/dev/attention_bench.py \
    --out "$work/attention" --max-seconds 160 > "$work/attention/stdout.txt" 2>&1
  echo "attention rc=$?" >> "$work/attention/stdout.txt"
else tail -30 "$work/attention/attention_build.txt"; fi
stamp "attention done"; tail -35 "$work/attention/stdout.txt" > "$work/attention_tail.txt"

if [ "$(cat $work/families/build_rc)" = 0 ]; then
  cp /tmp/families_build/families_ptxas.txt "$work/families/" 2>/dev/null
  timeout 150 python3 scripts/dev/families_bench.py --lib /tmp/families_build/libskfamilies.so \
    --out "$work/families" --budget 130 > "$work/families/stdout.txt" 2>&1
  echo "families rc=$?" >> "$work/families/stdout.txt"
else tail -30 "$work/families/families_build.txt"; fi
stamp "families done"; tail -35 "$work/families/stdout.txt" > "$work/families_tail.txt"

for f in gemm attention families; do tar -czf "$out/$f.tgz" -C "$work" "$f"; done
cp "$work/env.txt" "$out/"
stamp "all done"
echo "===== GEMM"; cat "$work/gemm_tail.txt"
echo "===== ATTENTION"; cat "$work/attention_tail.txt"
echo "===== FAMILIES"; cat "$work/families_tail.txt"
