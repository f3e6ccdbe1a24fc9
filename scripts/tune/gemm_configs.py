"""Time every wgmma tile configuration of hgemm_wgmma and gemm_fp8 three ways, in one process.

    python scripts/tune/gemm_configs.py [--json FILE]

The pickers in kernels_ext/csrc/gemm/{hgemm_wgmma,fp8_wgmma}.cu are chosen from what `solbench run`
measures, so each configuration is timed with solbench's own events timer (L2 flushed, queue held:
what a results file holds) and, beside it, with triton.testing.do_bench (L2 flushed, no held queue)
and back to back (no flush, CUDA events over 20 calls). A configuration that is fast one way and
slow another says the pick depends on how it is timed -- the pick follows the first column.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

import kernels_ext
from solbench.measure import bench

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 8192, 8192)]
HGEMM = ["auto", "128x256_s4_c2", "128x256_s3_c2", "128x256_s4_c1", "128x256_s3_c1", "128x128_s6_c2",
         "128x128_s6_c1"]
FP8 = ["auto", "128x256_s4_c2", "128x256_s4_c1", "128x128_s6_c2", "128x128_s6_c1"]


def back_to_back_s(fn, iters: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def do_bench_s(fn) -> float | None:
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    return do_bench(fn, warmup=25, rep=100) / 1e3


def tflops(flop: int, t: float | None) -> str:
    return f"{flop / t / 1e12:7.1f}" if t else "      -"


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
        yield (m, n, k), "bfloat16", "cublas", lambda a=a, w=w: a @ w.t()
        for c in HGEMM:
            yield (m, n, k), "bfloat16", c, lambda a=a, w=w, c=c: kernels_ext.gemm_wgmma(a, w, c)
        a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        yield (m, n, k), "float8_e4m3fn", "scaled_mm", lambda a=a8, w=w8, one=one: torch._scaled_mm(
            a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        for c in FP8:
            yield (m, n, k), "float8_e4m3fn", c, lambda a=a8, w=w8, c=c, one=one: kernels_ext.gemm_fp8(a, w, one, one, c)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=0.3)
    args = ap.parse_args(argv)
    rows = []
    print(f"{'shape':16} {'dtype':14} {'config':14} {'solbench':>10} {'do_bench':>10} {'b2b':>10}  TFLOP/s")
    for (m, n, k), dtype, config, fn in cases():
        flop = 2 * m * n * k
        sb = bench(fn, budget_s=args.budget).stats.median
        db = do_bench_s(fn)
        bb = back_to_back_s(fn)
        rows.append({"m": m, "n": n, "k": k, "dtype": dtype, "config": config, "solbench_s": sb,
                     "do_bench_s": db, "back_to_back_s": bb})
        print(f"{m}x{n}x{k:<6} {dtype:14} {config:14} {sb * 1e6:8.1f}us {(db or 0) * 1e6:8.1f}us "
              f"{bb * 1e6:8.1f}us  {tflops(flop, sb)} {tflops(flop, db)} {tflops(flop, bb)}", flush=True)
    if args.json:
        write_rows(args.json, rows)
    return 0


def write_rows(path: str, rows: list[dict]) -> None:
    """A tuning script's rows, with the torch version and device they were timed with."""
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
