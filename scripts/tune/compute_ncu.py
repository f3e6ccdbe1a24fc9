"""The compute-bound kernels that miss their targets, beside the library each is compared with,
under Nsight Compute and under a clock probe. On a CUDA machine, from the repo root:

    ncu --profile-from-start off --clock-control none --set full -o out \\
        python scripts/tune/compute_ncu.py
    python scripts/tune/compute_ncu.py --clocks --out clocks.json

Profiled (each warmed up and checked, then launched once between cudaProfilerStart/Stop):
sgemm (bk32) and cuBLAS fp32 at 4096^3; gemm_mma (bk64, bk64_pipe) at 4096^3 bf16; flash_attention_mma,
flash_attention_wgmma_persistent and cuDNN at B=4, H=32, S=4096, D=128, non-causal; the decode GEMM
at M = 16, N = K = 8192 (sgemm_decode rows4 / rows4_d3 and cuBLAS fp32, gemm_decode_mma and cuBLAS
bf16; sgemm_decode at M = 1), whose table rows dram% / L2% / L1% say which memory level binds.

--summarize RAW.csv prints a table from `ncu --import REP --page raw --csv`: per kernel the
duration, SM clock, issue-slot use, tensor / FMA / MUFU pipe use and the stall reasons per issued
instruction (no GPU needed).

--clocks instead runs each kernel back to back for about two seconds while NVML samples the SM
clock and the board power every 20 ms, and writes what it saw with the achieved TFLOP/s:
whether a kernel is held back by the clock (power) or by its instruction stream.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kernels_ext
from solbench.telemetry import ClockMonitor, Sample


@dataclass
class Case:
    name: str
    flops: float
    fn: Callable[[], torch.Tensor]
    want: torch.Tensor
    rtol: float


def gemm_cases(g: torch.Generator) -> list[Case]:
    n = 4096
    a32 = torch.randn(n, n, generator=g, device="cuda")
    w32 = torch.randn(n, n, generator=g, device="cuda")
    a16, w16 = a32.bfloat16(), w32.bfloat16()
    torch.backends.cuda.matmul.allow_tf32 = False
    want32 = a32 @ w32.T
    want16 = (a16.float() @ w16.float().T)
    flops = 2.0 * n**3
    return [
        Case("sgemm_bk32", flops, lambda: kernels_ext.sgemm(a32, w32, config="bk32"), want32, 1e-4),
        Case("cublas_fp32", flops, lambda: a32 @ w32.T, want32, 1e-4),
        Case("gemm_mma_bk64", flops, lambda: kernels_ext.gemm_mma(a16, w16, config="bk64"), want16, 2e-2),
        Case("gemm_mma_bk64_pipe", flops, lambda: kernels_ext.gemm_mma(a16, w16, config="bk64_pipe"),
             want16, 2e-2),
        Case("cublas_bf16", flops, lambda: a16 @ w16.T, want16, 2e-2),
    ]


def attention_cases(g: torch.Generator) -> list[Case]:
    b, h, s, d = 4, 32, 4096, 128
    q, k, v = (torch.randn(b, h, s, d, generator=g, device="cuda").bfloat16() for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        want = F.scaled_dot_product_attention(q, k, v)

    def cudnn() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    flops = 4.0 * b * h * s * s * d
    return [
        Case("flash_mma", flops, lambda: kernels_ext.flash_attention_mma(q, k, v), want, 2e-2),
        Case("flash_wgmma_persistent", flops,
             lambda: kernels_ext.flash_attention_wgmma_persistent(q, k, v), want, 2e-2),
        Case("cudnn", flops, cudnn, want, 2e-2),
    ]


def decode_cases(g: torch.Generator) -> list[Case]:
    """The decode GEMM at M = 16 (and 1), N = K = 8192: memory-bound, so `flops` is unused."""
    n = k = 8192
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS fp32 is the fp32 baseline, not TF32
    w32 = torch.randn(n, k, generator=g, device="cuda")
    x16, x1 = (torch.randn(m, k, generator=g, device="cuda") for m in (16, 1))
    w16, xb = w32.bfloat16(), x16.bfloat16()
    want16, want1 = x16 @ w32.T, x1 @ w32.T
    wantb = xb.float() @ w16.float().T
    flops = 2.0 * 16 * n * k
    return [
        Case("sdecode_rows4_m16", flops, lambda: kernels_ext.sgemm_decode(x16, w32, "rows4"), want16, 1e-5),
        Case("sdecode_rows4_d3_m16", flops, lambda: kernels_ext.sgemm_decode(x16, w32, "rows4_d3"), want16, 1e-5),
        Case("sdecode_tf32x3_m16", flops, lambda: kernels_ext.sgemm_decode(x16, w32, "tf32x3"), want16, 1e-5),
        Case("cublas_fp32_m16", flops, lambda: x16 @ w32.T, want16, 1e-5),
        Case("sdecode_rows4_m1", flops / 16, lambda: kernels_ext.sgemm_decode(x1, w32, "rows4"), want1, 1e-5),
        Case("decode_mma_m16", flops, lambda: kernels_ext.gemm_decode_mma(xb, w16), wantb, 1e-2),
        Case("cublas_bf16_m16", flops, lambda: xb @ w16.T, wantb, 1e-2),
    ]


def check(case: Case) -> None:
    got = case.fn().float()
    err = ((got - case.want.float()).norm() / case.want.float().norm()).item()
    if err > case.rtol:
        raise SystemExit(f"{case.name}: normwise error {err:.3g} above {case.rtol}")


def profile_once(cases: list[Case]) -> None:
    for case in cases:
        for _ in range(3):
            case.fn()
        torch.cuda.synchronize()
        print(f"profiling {case.name}", flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        case.fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


@dataclass
class ClockRecord:
    name: str
    calls: int
    tflops: float
    sm_clock_mhz_median: float
    sm_clock_mhz_min: float
    power_w_median: float
    throttle_reasons: list[str]


def sample_clocks(monitor: ClockMonitor, stop: threading.Event, out: list[Sample]) -> None:
    while not stop.is_set():
        s = monitor.sample()
        if s is not None:
            out.append(s)
        time.sleep(0.02)


def clock_probe(case: Case, monitor: ClockMonitor, seconds: float = 2.0) -> ClockRecord:
    for _ in range(3):
        case.fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    case.fn()
    end.record()
    end.synchronize()
    calls = max(10, int(seconds * 1000.0 / max(start.elapsed_time(end), 1e-3)))
    samples: list[Sample] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_clocks, args=(monitor, stop, samples))
    sampler.start()
    time.sleep(0.05)
    start.record()
    for _ in range(calls):
        case.fn()
    end.record()
    end.synchronize()
    stop.set()
    sampler.join()
    if not samples:
        raise SystemExit(f"{case.name}: no NVML samples ({monitor.off_reason or 'none read'})")
    ms = start.elapsed_time(end) / calls
    clocks = [x.sm_mhz for x in samples]
    return ClockRecord(case.name, calls, case.flops / (ms * 1e-3) / 1e12,
                       statistics.median(clocks), min(clocks),
                       statistics.median(x.power_w or 0.0 for x in samples),
                       sorted({r for x in samples for r in x.throttle_reasons()}))


SUMMARY_METRICS = (
    ("us", "gpu__time_duration.sum", 1.0),   # scaled from the unit ncu chose (TIME_UNITS_US)
    ("SM GHz", "sm__cycles_elapsed.avg.per_second", 1.0),
    ("issue%", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1.0),
    ("tensor%", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", 1.0),
    ("fma%", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", 1.0),
    ("mufu%", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", 1.0),
    ("cyc/inst", "smsp__average_warp_latency_per_inst_issued.ratio", 1.0),
    ("dram%", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 1.0),
    ("L2%", "lts__throughput.avg.pct_of_peak_sustained_elapsed", 1.0),
    ("L1%", "l1tex__throughput.avg.pct_of_peak_sustained_active", 1.0),
    ("warps/SM", "sm__warps_active.avg.per_cycle_active", 1.0),
)
TIME_UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
                 "s": 1e6, "second": 1e6}
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"


def short_name(kernel: str) -> str:
    """`void ns::<unnamed>::f<ns::<unnamed>::A<64>, ...>(...)` -> `f<A<64>`, at most 28 characters."""
    k = kernel.removeprefix("void ").replace("<unnamed>::", "").split("(")[0]
    head, _, args = k.partition("<")
    first = args.split(",")[0].split("::")[-1]
    return (head.split("::")[-1] + ("<" + first if first else ""))[:28]


def summarize(path: str) -> str:
    rows = list(csv.reader(open(path)))
    hdr, data = rows[0], rows[2:]   # row 1 holds the units

    def num(row: list[str], col: str) -> float:
        v = row[hdr.index(col)].replace(",", "") if col in hdr else ""
        if not v:
            return float("nan")
        unit = rows[1][hdr.index(col)]
        return float(v) * (TIME_UNITS_US.get(unit, float("nan")) if col == "gpu__time_duration.sum" else 1.0)

    names = [short_name(r[hdr.index("Kernel Name")]) for r in data]
    out = [f"{'':18}" + "".join(f"{n:>30}" for n in names)]
    for label, col, k in SUMMARY_METRICS:
        out.append(f"{label:18}" + "".join(f"{num(r, col) * k:30.2f}" for r in data))
    stalls = [h for h in hdr if h.startswith(STALL_PREFIX) and h.endswith(STALL_SUFFIX)]
    table = [(h[len(STALL_PREFIX):-len(STALL_SUFFIX)], [num(r, h) for r in data]) for h in stalls]
    out.append("stalls per issued instruction:")
    for name, vals in sorted(table, key=lambda t: -max(t[1])):
        if max(vals) >= 0.1:
            out.append(f"  {name:16}" + "".join(f"{v:30.2f}" for v in vals))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clocks", action="store_true", help="clock and power probe instead of one launch each")
    ap.add_argument("--out", default="compute_clocks.json", help="where --clocks writes its records")
    ap.add_argument("--summarize", metavar="RAW_CSV", help="print the table of an ncu raw CSV and exit")
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
        return
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = gemm_cases(g) + attention_cases(g) + decode_cases(g)
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c.name in keep]
    for case in cases:
        check(case)
    if not args.clocks:
        profile_once(cases)
        return
    monitor = ClockMonitor.open("cuda", torch.cuda.current_device())
    if not monitor.enabled:
        raise SystemExit(monitor.off_reason)
    try:
        records = [clock_probe(c, monitor) for c in cases]
    finally:
        monitor.close()
    with open(args.out, "w") as f:
        json.dump([asdict(r) for r in records], f, indent=1)
    print(f"{'kernel':26} {'TFLOP/s':>8} {'SM MHz':>7} {'min':>6} {'W':>6}  reasons")
    for r in records:
        print(f"{r.name:26} {r.tflops:8.1f} {r.sm_clock_mhz_median:7.0f} {r.sm_clock_mhz_min:6.0f} "
              f"{r.power_w_median:6.0f}  {r.throttle_reasons}")


if __name__ == "__main__":
    main()
