#!/usr/bin/env bash
# Issue 16 on the H200: every built-in spec's FLOP and byte formulas against Nsight Compute's counters,
# and `run --nvtx`'s ranges and profiler window seen by a profiler.
# Usage (device machine, repo root): bash scripts/h200/audit.sh      about 6 minutes, capped near 8
#   NSYS=none skips the nsys step (the nsys bundled with Nsight Compute 2025.3 on the H200 captures the
#   range but cannot import its .qdstrm: results/h200/issue16/run/audit/nvtx_check.txt)
# Writes under $OUT (8 files at most):
#   ncu_query_metrics.txt  `ncu --query-metrics` (which tensor-op metric names this ncu has on GH100)
#   audit.json, audit.txt  `solbench audit --ops all` (large cases): the audit file and its printed table
#   audit_ncu.log          the ncu logs of the audit's passes
#   h200_raw.csv           the audit's report as a raw-page CSV, and h200_raw.json (= audit.json, its calls):
#   h200_raw.json          the lead copies both to tests/fixtures/ncu/ (they replace nothing: the synthetic
#                          fixture stays; tests/test_audit_ncu.py then checks the real export too)
#   nvtx_check.txt         kernels profiled between cudaProfilerStart/Stop of `run --nvtx`, with their NVTX
#                          stacks (ncu), and what nsys did with --capture-range=cudaProfilerApi
set -uo pipefail
export PYTHONUNBUFFERED=1 COLUMNS=220
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T=$(mktemp -d)
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
NSYS=${NSYS:-$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
export SOLBENCH_NCU="$NCU"
step() { echo; echo "== $* ($(date +%T))"; }

python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
step "build the kernel library"
( time timeout 100 solbench build ) 2>&1 | tail -4

step "ncu $("$NCU" --version 2>&1 | tail -1)"
timeout 30 "$NCU" --query-metrics > "$OUT/ncu_query_metrics.txt" 2>&1
echo "metrics listed: $(grep -cE '^[a-z0-9]+__' "$OUT/ncu_query_metrics.txt")"
echo "tensor / SASS names:"; grep -oE '^(sm__ops_path_tensor[a-z0-9_]*|sm__inst_executed_pipe_tensor[a-z0-9_]*|smsp__sass_thread_inst_executed_op_[dfh](add|mul|fma)_pred_on|lts__t_sectors_srcunit_tex_op_write)' \
    "$OUT/ncu_query_metrics.txt" | tr '\n' ' ' | cut -c1-2500; echo

step "run --nvtx under ncu: kernels between cudaProfilerStart/Stop, with their NVTX stacks"
timeout 45 "$NCU" --profile-from-start off --nvtx --launch-count 24 --metrics gpu__time_duration.sum \
    --export "$T/nvtx" --force-overwrite \
    solbench run --ops add --quick --dtypes bfloat16 --impls cuda --nvtx --no-isolate --budget 0.1 --min-samples 3 \
    --out "$T/r" > "$T/nvtx_ncu.log" 2>&1
echo "rc=$? ($(grep -c '==PROF== Profiling' "$T/nvtx_ncu.log") kernels profiled)"
{ "$NCU" --import "$T/nvtx.ncu-rep" --csv --page raw > "$T/nvtx.csv" 2>&1 && python3 scripts/h200/audit_report.py nvtx "$T/nvtx.csv"; } \
    > "$OUT/nvtx_check.txt" 2>&1
grep -E "==ERROR==" "$T/nvtx_ncu.log" | head -5 >> "$OUT/nvtx_check.txt"
head -c 2500 "$OUT/nvtx_check.txt"

# audit's defaults leave out the torch.compile'd baselines and the calls a spec marks `audit: false`
# (SDPA's math backend, flex_attention); the committed H200 run named the same set with --impls.
step "solbench audit --ops all (large cases, one dtype each, no torch.compile, no SDPA math, no flex)"
timeout "${AUDIT_LIMIT_S:-420}" solbench audit --ops all --timeout "${AUDIT_NCU_S:-330}" --reports "$T/audit" \
    --json "$OUT/audit.json" > "$OUT/audit.txt" 2>&1
echo "audit rc=$? (0: every formula passes, 1: some flagged or not counted)"
cat "$T"/audit/pass*.log > "$OUT/audit_ncu.log" 2>/dev/null
grep -E "==ERROR==|==WARNING==" "$OUT/audit_ncu.log" | sort | uniq -c | head -8
if [ -f "$OUT/audit.json" ]; then
    python3 scripts/h200/audit_report.py summary "$OUT/audit.json"
    cp "$OUT/audit.json" "$OUT/h200_raw.json"
    # the pass that profiled the cuBLAS GEMM (tests/test_audit_ncu.py checks its tensor FLOPs against 2MNK)
    REQ=$(grep -l '"label": "gemm M=' "$T"/audit/pass*.request.json 2>/dev/null | tail -1)
    REP=${REQ%.request.json}.ncu-rep
    [ -f "$REP" ] && "$NCU" --import "$REP" --csv --page raw --print-units base > "$OUT/h200_raw.csv" 2>&1
    echo "raw CSV: $(wc -l < "$OUT/h200_raw.csv" 2>/dev/null) lines from $REP"
else
    tail -n 30 "$OUT/audit.txt"
fi

step "nsys profile --capture-range=cudaProfilerApi solbench run --nvtx ($NSYS)"
if [ -n "$NSYS" ] && [ "$NSYS" != none ]; then
    timeout 40 "$NSYS" profile --capture-range=cudaProfilerApi --capture-range-end=repeat:2 -t cuda,nvtx \
        --force-overwrite true -o "$T/nsys_nvtx" \
        solbench run --ops add --quick --dtypes bfloat16 --impls cuda --nvtx --no-isolate --budget 0.1 \
        --min-samples 3 --out "$T/r2" > "$T/nsys.log" 2>&1
    echo "nsys rc=$?; files: $(ls "$T" | grep nsys_nvtx | tr '\n' ' ')" | tee -a "$OUT/nvtx_check.txt"
    tail -n 6 "$T/nsys.log" | tee -a "$OUT/nvtx_check.txt"
    REP=$(ls "$T"/nsys_nvtx*.nsys-rep 2>/dev/null | head -1)
    [ -n "$REP" ] && timeout 30 "$NSYS" stats --report nvtx_sum --format csv "$REP" 2>&1 | head -20 | tee -a "$OUT/nvtx_check.txt"
else
    echo "no nsys on this machine" | tee -a "$OUT/nvtx_check.txt"
fi
ls -la "$OUT"
