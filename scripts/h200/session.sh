#!/usr/bin/env bash
# One device call running several H200 stages in order, each under its own time limit, each
# stage's files packed into $OUT/<stage>.tgz (the device returns at most 8 files) and one line per
# stage in $OUT/session.txt. From the repo root:
#   bash scripts/h200/session.sh setup probe configs tests gate        (stages in the order given)
# Stages:
#   setup    pip install -e ., solbench build (SOLBENCH_KERNELS_CACHE=.kcache: a warm machine reuses it)
#   probe    every bad input of the compiled ops, each in its own process (scripts/dev/bad_input_probe.py)
#   configs  every wgmma tile configuration timed three ways (scripts/tune/gemm_configs.py)
#   tests    every kernel GPU test (pytest-xdist: a crashing test costs its worker, not the run)
#   harness  the GPU tests of the measure package and the traps
#   fp8      solbench run of the FP8 quantisation specs with their compiled peers, and the FP8 GPU tests
#   gemm     solbench run --ops gemm,gemm_decode,linear_residual, every impl (GEMM_RESUME=FILE reuses records)
#   compiled the gemm torch.compile max-autotune baseline alone (bf16, the five cases)
#   attention solbench run --ops attention,attention_decode (every impl, every SDPA backend)
#   prefill  solbench run --ops attention (cudnn, flash, our wgmma launches, auto) and the prefill GPU tests
#   flex     solbench run --ops attention,attention_decode --impls cudnn,flex (torch.compile'd flex_attention)
#   sgemm    solbench run --ops gemm --dtypes float32 (cuBLAS fp32, sgemm bk16 / bk32 / bm64 and auto's pick) and the sgemm GPU tests
#   ssmall   sgemm's automatic block (bm64 at 1024^3, bk32 at 4096^3) beside both and cuBLAS fp32
#   mma      solbench run --ops gemm --dtypes bfloat16 (cuBLAS, hgemm_mma bk64 and bk64_pipe) and the gemm_mma GPU tests
#   sweep    the wgmma tile configurations under solbench run (scripts/tune/specs/gemm_configs.yaml)
#   rsweep   linear_residual's configurations the same way (scripts/tune/specs/linear_residual_configs.yaml)
#   dsweep   attention_decode's key-range splits (scripts/tune/specs/decode_splits.yaml), and the decode GPU tests
#   asweep   flash_wgmma's tile configurations beside cuDNN (scripts/tune/specs/flash_wgmma_configs.yaml), and their GPU tests
#   ptail    the persistent launch's split last round against whole items, the grid launch and cuDNN
#            (scripts/tune/specs/prefill_tail.yaml), then the persistent launch's GPU tests
#   xent     solbench run --ops cross_entropy,cross_entropy_rows and the cross-entropy GPU tests
#   embed    solbench run --ops embedding (check_order after / before / unchecked) and the embedding GPU tests
#   nms      solbench run --ops nms (torchvision and ours) and the NMS GPU tests
#   nmsprofile  wall time and a profiler timeline of one NMS call, ours and torchvision's
#   transpose solbench run --ops transpose,transpose_batched (eager, compiled, ours) and the transpose GPU tests
#   tprobe   the transpose kernels and experiments beside a copy (scripts/tune/transpose_probe.cu)
#   tsweep   the transpose kernels' tile orders under solbench run (scripts/tune/specs/transpose_bands.yaml), and their GPU tests
#   ttiles   the smem transpose's two tiles under solbench run (scripts/tune/specs/transpose_tiles.yaml)
#   tsmall   the small aligned 16-bit transposes, smem_w16 / smem_w32 / ldsm beside compiled, twice (scripts/tune/specs/transpose_small.yaml), and the transpose GPU tests
#   todd     the odd 16-bit transposes, smem and ldsm in each block and order (scripts/tune/specs/transpose_odd.yaml)
#   eunits   embedding's units per thread under solbench run, beside eager and compiled (scripts/tune/specs/embedding_units.yaml)
#   families scripts/h200/families_final.sh: issue 15's 15 family specs and their GPU tests (~5 min; FAMILIES_BUDGET)
#   small    the small case of every issue-6 family (softmax, norms, row_sum, maps) beside eager and torch.compile
#   mtiles   the map kernel's tile shapes on the small (1024 x 1024) maps, flushed (scripts/tune/kernel_tiles.cu small)
#   tncu     the odd-size bf16 transposes, ours and torch.compile's, under Nsight Compute (scripts/tune/transpose_ncu.py), and both sides' SASS
#   cncu     the compute kernels that miss their targets beside cuBLAS/cuDNN: ncu full set and a clock probe (scripts/tune/compute_ncu.py)
#   sncu     sgemm (bk32) beside cuBLAS fp32 under ncu, and the stall summary (scripts/tune/compute_ncu.py)
#   inductor what torch.compile launches for the small baselines: source and launch dims (scripts/tune/inductor_kernels.py)
#   gate     scripts/h200/gate.sh          serve  scripts/h200/serve.sh (carry .whl; serve8: --in-flight 8; serve2w: --workers 2)
#   decode   solbench run --ops attention_decode (every SDPA backend and ours) and the decode GPU tests
#   readonly solbench run --ops gemm_decode,gemv (cuBLAS and ours; decode_mma with both grids)
#   gdecode  solbench run --ops gemm --shape M=16,N=8192,K=8192 (cuBLAS and kernels_ext.gemm's pick)
#   sdecode  fp32 at M <= 16: the decode GPU tests, solbench run --ops gemm_decode --dtypes float32 (sgemm_decode auto / rows4 / rows2, cuBLAS), the gemm spec's fp32 decode case
#   prefetch the decode kernels' L2 prefetch distances under solbench run (scripts/tune/specs/decode_prefetch.yaml), and their GPU tests
#   sdepth   sgemm_decode's thread tiles, two CTAs per SM and one (scripts/tune/specs/sdecode_depth.yaml), their GPU tests, the gemm spec's fp32 decode case
#   tf3      sgemm_decode's tf32x3: its GPU tests, a short sdecode_depth sweep, the flush probe
#   sflush   flushprobe for the fp32 and bf16 decode GEMMs and a 256 MiB copy, with a no-flush column
#   dncu     the decode GEMM, fp32 (CUDA cores and tf32x3) and bf16, ours and cuBLAS's, under ncu (scripts/tune/compute_ncu.py; DNCU_ONLY=names)
#   flushprobe memory-bound calls timed after each L2 flush mode: write, read, balanced (scripts/tune/flush_probe.py)
#   dtimeline  attention_decode, cuDNN and a plain read kernel by kernel under torch.profiler (scripts/tune/decode_timeline.py)
#   dprobe   the decode GEMM's CTA shapes beside cuBLAS and a plain read (scripts/tune/decode_probe.cu)
#   dtests   the GPU tests of the decode GEMM, the gemv family and embedding
#   gemmprobe  GEMM kernels timed under each condition solbench run differs in (scripts/tune/gemm_timing_probe.py)
#   audit    scripts/h200/audit.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 COLUMNS=200 SOLBENCH_KERNELS_CACHE=$PWD/.kcache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S=/tmp/session; mkdir -p "$S"
SECONDS=0
note() { echo "[$SECONDS s] $*" | tee -a "$OUT/session.txt"; }
RUNS=/tmp/runs
KERNEL_TESTS="tests/gpu/test_kernels.py tests/gpu/test_gemm.py tests/gpu/test_attention.py tests/gpu/test_families.py"

stage() {  # stage NAME: runs in $S/NAME with OUT pointing there
  local name=$1 d=$S/$1 t0=$SECONDS rc
  mkdir -p "$d"
  ( export OUT=$d; "stage_$name" ) > "$d/$name.log" 2>&1
  rc=$?
  note "$name rc=$rc in $((SECONDS - t0)) s: $(grep -E 'passed|failed|SUMMARY|summary|ok$' "$d/$name.log" | tail -1 | cut -c1-150)"
  tar -czf "$OUT/$name.tgz" -C "$S" "$name"
}

stage_setup() {
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.limit --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    nvcc --version | tail -2; date -u; } > "$OUT/env.txt" 2>&1
  python3 -m pip install -q --no-deps --no-build-isolation -e . || return 1
  gcc -shared -fPIC -o /tmp/segv.so scripts/dev/segv_trace.c
  time timeout 300 solbench build
}
stage_probe() { LD_PRELOAD=/tmp/segv.so timeout 200 python3 scripts/dev/bad_input_probe.py; }
stage_configs() { timeout 200 python3 scripts/tune/gemm_configs.py --json "$OUT/gemm_configs.json"; }
stage_tests() {
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 $KERNEL_TESTS --junitxml "$OUT/kernel_tests.xml" \
    -o junit_family=xunit1 -rfE 2>&1 | tail -60
}
stage_harness() {
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_measure_gpu.py tests/gpu/test_traps_gpu.py \
    --junitxml "$OUT/harness_tests.xml" -rfE 2>&1 | tail -30
}
stage_fp8() {
  timeout 200 solbench run --ops fp8_quant,fp8_quant_dynamic,fp8_quant_rows,fp8_dequant --dtypes bfloat16 \
    --impls eager,compiled,cuda --budget 0.2 --json "$OUT/fp8.json" --out $RUNS
  python3 scripts/h200/families_summary.py "$OUT/fp8.json"
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_families.py -k "fp8" -rfE 2>&1 | tail -4
}
stage_gemm() {  # GEMM_RESUME=FILE: reuse its records (the compiled stage's, from an earlier call)
  local resume=()
  [ -n "${GEMM_RESUME:-}" ] && [ -f "$GEMM_RESUME" ] && resume=(--resume "$GEMM_RESUME")
  timeout 330 solbench run --ops gemm,gemm_decode,linear_residual --dtypes float32,bfloat16,float8_e4m3fn \
    --impls eager,compiled,sgemm_fp32,sgemm_fp32_bk32,hgemm_mma,hgemm_mma_bk64,hgemm_mma_bk64_pipe,hgemm_wgmma,fp8_wgmma,auto,decode_wgmma,decode_mma,unfused,addmm,fused \
    --budget "${GEMM_BUDGET:-0.4}" --timeout 200 "${resume[@]}" --json "$OUT/gemm.json" --out $RUNS
  python3 scripts/h200/gemm_summary.py "$OUT/gemm.json"
}
stage_compiled() {  # the torch.compile max-autotune baseline alone (Inductor's template search: ~2.5 min)
  timeout 280 solbench run --ops gemm --dtypes bfloat16 --impls compiled --budget "${GEMM_BUDGET:-0.4}" --timeout 200 \
    --json "$OUT/gemm_compiled.json" --out $RUNS
}
stage_attention() {
  timeout 300 solbench run --ops attention,attention_decode --dtypes bfloat16 \
    --impls default,cudnn,flash,efficient,flash_wgmma,flash_wgmma_persistent,flash_mma,auto,decode \
    --budget "${ATTN_BUDGET:-0.4}" --timeout 150 --json "$OUT/attention.json" --out $RUNS
  python3 scripts/h200/attention_summary.py "$OUT/attention.json"
}
stage_prefill() {  # attention (prefill) beside cuDNN and FlashAttention-2, our wgmma launches and auto; then the
  # attention GPU tests other than decoding's and the configurations'
  timeout 200 solbench run --ops attention --dtypes bfloat16 --impls cudnn,flash,flash_wgmma,flash_wgmma_persistent,auto \
    --budget "${ATTN_BUDGET:-0.3}" --timeout 120 --json "$OUT/attention.json" --out $RUNS
  python3 scripts/h200/attention_summary.py "$OUT/attention.json"
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 tests/gpu/test_attention.py -k "not decode and not config" \
    --junitxml "$OUT/attention_tests.xml" -o junit_family=xunit1 -rfE 2>&1 | tail -8
}
stage_flex() {  # the torch.compile'd flex_attention baseline beside cuDNN (each shape compiles first: 10-30 s)
  timeout 330 solbench run --ops attention,attention_decode --dtypes bfloat16 --impls cudnn,flex \
    --budget "${ATTN_BUDGET:-0.3}" --timeout 90 --json "$OUT/attention_flex.json" --out $RUNS
  python3 scripts/h200/attention_summary.py "$OUT/attention_flex.json"
}
stage_sweep() {  # every wgmma tile configuration timed by solbench run itself; then the gemm op's own
  # wgmma impls at 4096^3 right after hgemm_mma_bk64 (as the full run orders them), and with --timer cupti
  timeout 200 solbench run --specs scripts/tune/specs --ops gemm_configs --budget 0.3 --json "$OUT/gemm_configs.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/gemm_configs.json"
  [ "${SWEEP_ORDER:-0}" = 1 ] || return 0     # SWEEP_ORDER=1: also the two order checks below
  timeout 90 solbench run --ops gemm --dtypes bfloat16,float8_e4m3fn --shape M=4096,N=4096,K=4096 \
    --impls eager,hgemm_mma_bk64,hgemm_wgmma,fp8_wgmma,auto --budget 0.3 --json "$OUT/gemm_order.json" --out $RUNS
  timeout 90 solbench run --ops gemm --dtypes bfloat16,float8_e4m3fn --shape M=4096,N=4096,K=4096 \
    --impls eager,hgemm_mma_bk64,hgemm_wgmma,fp8_wgmma,auto --budget 0.3 --timer cupti --json "$OUT/gemm_cupti.json" --out $RUNS
}
stage_sgemm() {  # the fp32 GEMM's configurations beside cuBLAS fp32, then their GPU tests
  timeout 150 solbench run --ops gemm --dtypes float32 --impls eager,sgemm_fp32,sgemm_fp32_bk32,sgemm_fp32_bm64,auto --budget 0.3 \
    --json "$OUT/sgemm.json" --out $RUNS
  python3 scripts/h200/gemm_summary.py "$OUT/sgemm.json"
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_gemm.py -k "sgemm" -rfE 2>&1 | tail -6
}
stage_ssmall() {  # sgemm's automatic block at 1024^3 (bm64) and 4096^3 (bk32) beside both and cuBLAS fp32
  for n in 1024 4096; do
    timeout 60 solbench run --ops gemm --shape M=$n,N=$n,K=$n --dtypes float32 --impls eager,sgemm_fp32_bk32,sgemm_fp32_bm64,auto \
      --budget 0.3 --json "$OUT/sgemm_small_$n.json" --out $RUNS
  done
}
stage_mma() {  # the mma.sync GEMM's 64-k tilings beside cuBLAS bf16, then the gemm_mma GPU tests
  timeout 150 solbench run --ops gemm --dtypes bfloat16 --impls eager,hgemm_mma_bk64,hgemm_mma_bk64_pipe --budget 0.3 \
    --json "$OUT/mma.json" --out $RUNS
  python3 scripts/h200/gemm_summary.py "$OUT/mma.json"
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_gemm.py -k "gemm_mma" -rfE 2>&1 | tail -6
}
stage_residual() {  # solbench run of linear_residual alone (its three impls)
  timeout 150 solbench run --ops linear_residual --dtypes bfloat16 --impls unfused,addmm,fused --budget 0.4 \
    --json "$OUT/linear_residual.json" --out $RUNS
  python3 scripts/h200/gemm_summary.py "$OUT/linear_residual.json"
}
stage_rsweep() {  # linear_residual's tile configurations beside torch.addmm, timed by solbench run
  timeout 150 solbench run --specs scripts/tune/specs --ops linear_residual_configs --budget 0.3 \
    --json "$OUT/linear_residual_configs.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/linear_residual_configs.json"
  timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gemm.py -k "linear_residual" -rfE 2>&1 | tail -4
}
stage_dsweep() {  # attention_decode's split of the key range beside SDPA, timed by solbench run
  timeout 150 solbench run --specs scripts/tune/specs --ops decode_splits --budget 0.3 \
    --json "$OUT/decode_splits.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/decode_splits.json"
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_attention.py -k "decode" -rfE 2>&1 | tail -4
}
stage_asweep() {  # flash_wgmma's tile configurations (config=) beside cuDNN, timed by solbench run; then their GPU tests
  # (-k config). 6 cases x 13 calls (~80 s; the JSON is written as records come); --timeout: a configuration
  # that hangs costs 30 s and its worker, not the stage.
  timeout 140 solbench run --specs scripts/tune/specs --ops flash_wgmma_configs --budget "${ATTN_BUDGET:-0.25}" --timeout 30 \
    --json "$OUT/flash_wgmma_configs.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/flash_wgmma_configs.json"
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 tests/gpu/test_attention.py -k "config" -rfE 2>&1 | tail -8
}
stage_ptail() {  # the persistent launch with its last round split (tail=split) or whole, beside the grid launch
  # and cuDNN, timed by solbench run; then the persistent launch's GPU tests (the configurations' included)
  timeout 150 solbench run --specs scripts/tune/specs --ops prefill_tail --budget "${ATTN_BUDGET:-0.3}" --timeout 60 \
    --json "$OUT/prefill_tail.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/prefill_tail.json"
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 tests/gpu/test_attention.py -k "persistent or split_tail" \
    --junitxml "$OUT/ptail_tests.xml" -o junit_family=xunit1 -rfE 2>&1 | tail -8
}
stage_xent() {  # cross-entropy with the mean and per row, beside eager (compiled: FAMILIES_COMPILED=1, +1-2 min)
  timeout 150 solbench run --ops cross_entropy,cross_entropy_rows --budget 0.3 \
    --impls "eager,${FAMILIES_COMPILED:+compiled,}cuda" --json "$OUT/cross_entropy.json" --out $RUNS
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_families.py -k "cross_entropy" -rfE 2>&1 | tail -4
}
stage_embed() {  # embedding's two ways to wait for the index check, beside eager (compiled: FAMILIES_COMPILED=1)
  local impls=eager,cuda,cuda_check_after,cuda_unchecked
  timeout 150 solbench run --ops embedding --budget 0.3 --impls "${FAMILIES_COMPILED:+compiled,}$impls" \
    --json "$OUT/embedding.json" --out $RUNS
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_families.py -k "embedding" -rfE 2>&1 | tail -4
}
stage_tsweep() {  # the transpose kernels' tile orders (band) beside PyTorch's copy, timed by solbench run
  timeout 300 solbench run --specs scripts/tune/specs --ops transpose_bands --budget 0.3 \
    --json "$OUT/transpose_bands.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/transpose_bands.json"
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_families.py -k "transpose" -rfE 2>&1 | tail -4
}
stage_ttiles() {  # the smem transpose's 32- and 64-word tiles and the automatic pick, timed by solbench run
  timeout 300 solbench run --specs scripts/tune/specs --ops transpose_tiles --budget 0.3 \
    --json "$OUT/transpose_tiles.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/transpose_tiles.json"
}
stage_tsmall() {  # the small aligned 16-bit transposes, each small tile beside compiled, twice; the transpose GPU tests
  for k in 1 2; do
    timeout 200 solbench run --specs scripts/tune/specs --ops transpose_small --budget 0.3 \
      --json "$OUT/transpose_small_$k.json" --out $RUNS
    python3 scripts/h200/sweep_summary.py "$OUT/transpose_small_$k.json"
  done
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_families.py -k "transpose" -rfE 2>&1 | tail -4
}
stage_todd() {  # the odd 16-bit transposes: smem and ldsm in each block and tile order, beside compiled
  timeout 240 solbench run --specs scripts/tune/specs --ops transpose_odd --budget 0.3 \
    --json "$OUT/transpose_odd.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/transpose_odd.json"
}
stage_eunits() {  # embedding's 1, 2 and 4 units per thread and the automatic pick, beside eager and compiled
  timeout 200 solbench run --specs scripts/tune/specs --ops embedding_units --budget 0.3 \
    --json "$OUT/embedding_units.json" --out $RUNS
  python3 scripts/h200/sweep_summary.py "$OUT/embedding_units.json"
}
stage_families() { FAMILIES_BUDGET=${FAMILIES_BUDGET:-0.2} bash scripts/h200/families_final.sh; }
stage_small() {  # the first (small) case of the issue-6 families beside eager and torch.compile (issue 15's small shapes)
  timeout 240 solbench run --ops softmax,rmsnorm,layernorm,row_sum,gelu,silu,swiglu,add --quick \
    --impls eager,compiled,cuda --budget 0.3 --json "$OUT/small.json" --out $RUNS
  python3 scripts/h200/families_summary.py "$OUT/small.json"
}
stage_mtiles() {  # the map kernel's tile shapes on the 1024 x 1024 maps, each launch after an L2 flush
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -o /tmp/kernel_tiles \
    scripts/tune/kernel_tiles.cu || return 1
  timeout 120 /tmp/kernel_tiles "$OUT/map_tiles_small.jsonl" small
}
stage_tncu() {  # ncu sections of our element-path transpose beside torch.compile's kernel on the same odd sizes
  timeout 200 ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy --section LaunchStats \
    --section InstructionStats -o "$OUT/transpose_ncu" python3 scripts/tune/transpose_ncu.py || return 1
  ncu --import "$OUT/transpose_ncu.ncu-rep" --page details > "$OUT/transpose_ncu.txt"
  ncu --import "$OUT/transpose_ncu.ncu-rep" --page raw --csv > "$OUT/transpose_ncu_raw.csv"
  grep -E "transpose|triton|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Stall" "$OUT/transpose_ncu.txt" | head -80
  # SASS of both sides, for instruction-level comparison: our ldsm kernels and the Triton cubins the run compiled.
  for so in $(find "$HOME" /tmp "$PWD" -name "*.so" -newer scripts/h200/session.sh 2>/dev/null | grep -v site-packages); do
    cuobjdump -sass "$so" 2>/dev/null | awk '/Function : .*transpose_ldsm/{on=1} /Function : /&&!/transpose_ldsm/{on=0} on' >> "$OUT/transpose_ldsm.sass"
  done
  for cb in $(find "$HOME" /tmp "$PWD" -name "*.cubin" -newer scripts/h200/session.sh 2>/dev/null); do
    cuobjdump -sass "$cb" 2>/dev/null | grep -q transpose && cuobjdump -sass "$cb" >> "$OUT/triton_transpose.sass"
  done
  wc -l "$OUT"/*.sass 2>/dev/null
}
stage_cncu() {  # ncu (full set, real clocks) and an NVML clock probe of sgemm, gemm_mma, flash_mma, flash_wgmma beside cuBLAS / cuDNN
  timeout 120 python3 scripts/tune/compute_ncu.py --clocks --out "$OUT/compute_clocks.json" || return 1
  timeout 300 ncu --profile-from-start off --clock-control none --set full --import-source yes \
    -o "$OUT/compute_ncu" python3 scripts/tune/compute_ncu.py ${CNCU_ONLY:+--only $CNCU_ONLY} || return 1
  ncu --import "$OUT/compute_ncu.ncu-rep" --page details > "$OUT/compute_ncu.txt"
  ncu --import "$OUT/compute_ncu.ncu-rep" --page raw --csv > "$OUT/compute_ncu_raw.csv"
  grep -E "^  [a-z_]|Duration|SM Frequency|Issue Slots Busy|Issued Ipc|No Eligible|Compute \(SM\) Throughput|Memory Throughput|Bank Conflicts|Achieved Occupancy|Registers Per" "$OUT/compute_ncu.txt" | head -150
}
stage_sncu() {  # sgemm (bk32) and cuBLAS fp32 under ncu (full set, real clocks), and the summary table
  timeout 240 ncu --profile-from-start off --clock-control none --set full -o "$OUT/sgemm_ncu" python3 scripts/tune/compute_ncu.py \
    --only sgemm_bk32,cublas_fp32 || return 1
  ncu --import "$OUT/sgemm_ncu.ncu-rep" --page raw --csv > "$OUT/sgemm_ncu_raw.csv"
  python3 scripts/tune/compute_ncu.py --summarize "$OUT/sgemm_ncu_raw.csv" | tee "$OUT/sgemm_ncu_summary.txt"
}
stage_inductor() {  # the Triton kernels torch.compile generates for the small baselines, and their launch dims
  TORCH_LOGS=output_code timeout 200 python3 scripts/tune/inductor_kernels.py --out "$OUT" 2> "$OUT/inductor_code.log"
}
stage_nms() {  # NMS beside torchvision.ops.nms, and its GPU tests
  timeout 150 solbench run --ops nms --impls torchvision,cuda --budget 0.3 --json "$OUT/nms.json" --out $RUNS
  python3 scripts/h200/families_summary.py "$OUT/nms.json"
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_families.py -k "nms" -rfE 2>&1 | tail -4
}
stage_nmsprofile() { timeout 120 python3 scripts/tune/nms_profile.py --json "$OUT/nms_profile.json"; }
stage_transpose() {  # the transpose specs beside eager and torch.compile (bf16), and the transpose GPU tests
  timeout 200 solbench run --ops transpose,transpose_batched --impls eager,compiled,cuda,cuda_regs --budget 0.3 \
    --json "$OUT/transpose.json" --out $RUNS
  python3 scripts/h200/families_summary.py "$OUT/transpose.json"
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_families.py -k "transpose" -rfE 2>&1 | tail -4
}
stage_tprobe() {  # the transpose kernels and the probe's experiments beside a plain copy
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -o /tmp/transpose_probe \
    ${TPROBE_SOURCES:-scripts/tune/transpose_probe.cu kernels_ext/csrc/transpose/transpose_regs.cu} || return 1
  timeout 200 /tmp/transpose_probe "$OUT/transpose_probe.jsonl"
}
stage_gate() { GATE_LIMIT_S=${GATE_LIMIT_S:-320} GATE_INSTALL=0 bash scripts/h200/gate.sh; }
stage_serve() { bash scripts/h200/serve.sh; }
stage_serve8() { SERVE_IN_FLIGHT=8 bash scripts/h200/serve.sh; }   # the same with --in-flight 8 (the A/B)
stage_serve2w() { SERVE_WORKERS=2 bash scripts/h200/serve.sh; }    # the same with --workers 2
stage_gemmtests() {  # the GEMM family's GPU tests alone
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_gemm.py --junitxml "$OUT/gemm_tests.xml" \
    -o junit_family=xunit1 -rfE 2>&1 | tail -20
}
stage_gridtest() {  # the GPU test for the per-configuration grid memo (issue 13's c1 slowdown)
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gemm.py -k own_grid -rfE 2>&1 | tail -8
}
stage_flushprobe() {
  timeout 240 python3 scripts/tune/flush_probe.py --json "$OUT/flush_probe.json" | tee "$OUT/flush_probe.txt"
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_measure_gpu.py -k "flush" -rfE 2>&1 | tail -4
}
stage_sflush() {  # the fp32 and bf16 decode GEMMs, ours and cuBLAS's, and a copy timed after each flush mode and with none
  timeout 150 python3 scripts/tune/flush_probe.py --only "fp32,gemm_decode_mma,copy 256" \
    --json "$OUT/sflush_probe.json" | tee "$OUT/sflush_probe.txt"
}
stage_decode() {  # attention_decode beside every SDPA backend (default flush: balanced), and the decode GPU tests
  timeout 200 solbench run --ops attention_decode --dtypes bfloat16 --impls default,cudnn,flash,efficient,decode \
    --budget "${ATTN_BUDGET:-0.4}" --timeout 120 --json "$OUT/attention_decode.json" --out $RUNS
  python3 scripts/h200/attention_summary.py "$OUT/attention_decode.json"
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_attention.py -k "decode" -rfE 2>&1 | tail -4
}
stage_readonly() {  # the calls that mostly read (decode GEMM, GEMV) beside cuBLAS, under the default flush
  timeout 200 solbench run --ops gemm_decode,gemv --dtypes bfloat16 \
    --impls eager,decode_wgmma,decode_mma,decode_mma_tiles,auto,cuda,cuda_mma,cuda_decode \
    --budget 0.3 --timeout 120 --json "$OUT/readonly.json" --out $RUNS
}
stage_gdecode() {  # the gemm spec's decode case (M = 16, N = K = 8192): cuBLAS and kernels_ext.gemm's pick
  timeout 120 solbench run --ops gemm --shape M=16,N=8192,K=8192 --dtypes bfloat16 --impls eager,auto \
    --budget 0.3 --timeout 100 --json "$OUT/gemm_decode_case.json" --out $RUNS
  python3 scripts/h200/gemm_summary.py "$OUT/gemm_decode_case.json"
}
stage_sdecode() {  # fp32 at M <= 16: the decode GPU tests, then sgemm_decode (auto, rows4, rows2) and cuBLAS fp32
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_gemm.py \
    -k "sgemm_decode or decode_mma or picks_a_correct or fp32_decode" \
    --junitxml "$OUT/sdecode_tests.xml" -o junit_family=xunit1 -rfE 2>&1 | tail -6
  timeout 200 solbench run --ops gemm_decode --dtypes float32 --impls eager,sgemm_decode,sgemm_decode_rows4,sgemm_decode_rows2,auto \
    --budget 0.3 --timeout 120 --json "$OUT/sgemm_decode.json" --out $RUNS
  timeout 100 solbench run --ops gemm --shape M=16,N=8192,K=8192 --dtypes float32 --impls eager,sgemm_fp32_bk32,auto \
    --budget 0.3 --timeout 80 --json "$OUT/gemm_fp32_decode_case.json" --out $RUNS
  python3 scripts/h200/gemm_summary.py "$OUT/sgemm_decode.json"; python3 scripts/h200/gemm_summary.py "$OUT/gemm_fp32_decode_case.json"
}
stage_prefetch() {  # the decode kernels' L2 prefetch distances (scripts/tune/specs/decode_prefetch.yaml), their GPU tests first
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_gemm.py \
    -k "sgemm_decode or decode_mma or prefetch or picks_a_correct or fp32_decode or cannot_read" \
    --junitxml "$OUT/prefetch_tests.xml" -o junit_family=xunit1 -rfE 2>&1 | tail -6
  timeout 300 solbench run --specs scripts/tune/specs --ops decode_prefetch --budget 0.3 --timeout 200 \
    --json "$OUT/decode_prefetch.json" --out $RUNS
}
stage_sdepth() {  # sgemm_decode's thread tiles, two CTAs per SM and one (scripts/tune/specs/sdecode_depth.yaml), their GPU tests first
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_gemm.py \
    -k "sgemm_decode or prefetch or fp32_decode or cannot_read" \
    --junitxml "$OUT/sdepth_tests.xml" -o junit_family=xunit1 -rfE 2>&1 | tail -6
  timeout 300 solbench run --specs scripts/tune/specs --ops sdecode_depth --budget 0.3 --timeout 200 \
    --json "$OUT/sdecode_depth.json" --out $RUNS
  timeout 100 solbench run --ops gemm --shape M=16,N=8192,K=8192 --dtypes float32 --impls eager,auto \
    --budget 0.3 --timeout 80 --json "$OUT/gemm_fp32_decode_case.json" --out $RUNS
  python3 scripts/h200/gemm_summary.py "$OUT/gemm_fp32_decode_case.json"
}
stage_tf3() {  # sgemm_decode's tf32x3 beside rows4 and cuBLAS: their GPU tests, a short sweep, the flush probe
  timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -n 3 tests/gpu/test_gemm.py \
    -k "sgemm_decode and (tf32x3 or accuracy)" --junitxml "$OUT/tf3_tests.xml" -o junit_family=xunit1 -rfE 2>&1 | tail -6
  timeout 120 solbench run --specs scripts/tune/specs --ops sdecode_depth --impls eager,rows4,tf32x3 \
    --budget 0.2 --timeout 100 --json "$OUT/sdecode_tf3.json" --out $RUNS
  timeout 60 python3 scripts/tune/flush_probe.py --only "sgemm_decode" --json "$OUT/tf3_flush.json" | tee "$OUT/tf3_flush.txt"
}
stage_dncu() {  # the decode GEMM (fp32 and bf16, ours and cuBLAS) under ncu (full set, real clocks), and the summary table
  timeout 200 ncu --profile-from-start off --clock-control none --set full -o "$OUT/decode_ncu" python3 scripts/tune/compute_ncu.py \
    --only "${DNCU_ONLY:-sdecode_rows4_m16,sdecode_rows4_d3_m16,sdecode_tf32x3_m16,cublas_fp32_m16,sdecode_rows4_m1,decode_mma_m16,cublas_bf16_m16}" || return 1
  ncu --import "$OUT/decode_ncu.ncu-rep" --page raw --csv > "$OUT/decode_ncu_raw.csv"
  python3 scripts/tune/compute_ncu.py --summarize "$OUT/decode_ncu_raw.csv" | tee "$OUT/decode_ncu_summary.txt"
}
stage_dtimeline() { timeout 200 python3 scripts/tune/decode_timeline.py --json "$OUT/decode_timeline.json" | tee "$OUT/decode_timeline.txt"; }
stage_dprobe() {  # the decode GEMM's CTA shapes, cuBLAS and a plain read of W (scripts/tune/decode_probe.cu)
  local src="scripts/tune/decode_probe.cu kernels_ext/csrc/gemv/gemv.cu kernels_ext/csrc/gemv/gemv_mma.cu" flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr"
  nvcc $flags -lcublas -o /tmp/decode_probe $src || nvcc $flags -o /tmp/decode_probe $src || return 1
  timeout 200 /tmp/decode_probe "$OUT/decode_probe.jsonl"
}
stage_dtests() {  # the GPU tests of the decode GEMM, the gemv family and embedding
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 tests/gpu/test_gemm.py tests/gpu/test_families.py \
    -k "decode or gemv or embedding" --junitxml "$OUT/dtests.xml" -o junit_family=xunit1 -rfE 2>&1 | tail -8
}
stage_gemmprobe() { timeout 200 python3 scripts/tune/gemm_timing_probe.py --json "$OUT/gemm_timing_probe.json"; }
stage_audit() { bash scripts/h200/audit.sh; }

for s in "$@"; do
  declare -F "stage_$s" > /dev/null || { note "unknown stage $s"; continue; }
  stage "$s"
done
note "done"
cat "$OUT/session.txt"
