"""`python -m kernels_ext.bench`: a quick SOL check of the kernels against torch eager
on the GPU present (triton.testing.do_bench, L2 flushed between calls).

Not the harness (solbench run does the real measurement); this only answers "is the
kernel near the copy ceiling?" while developing. Bytes = inputs read once + outputs
written once; SOL = bytes / time / copy bandwidth measured here with a 2 GiB copy.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import kernels_ext


@dataclass(frozen=True)
class Case:
    name: str
    ours: Callable[[], object]
    eager: Callable[[], object]
    bytes_moved: int


def _time_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))


def copy_bandwidth() -> float:
    src = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda")  # 2 GiB
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 2 / (ms * 1e-3)


def cases(m: int, n: int, dtype: torch.dtype) -> list[Case]:
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    y = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    e = x.element_size() * x.numel()
    return [
        Case("add", lambda: kernels_ext.add(x, y), lambda: x + y, 3 * e),
        Case("gelu", lambda: kernels_ext.gelu(x), lambda: F.gelu(x), 2 * e),
        Case("swiglu", lambda: kernels_ext.swiglu(x, y), lambda: F.silu(x) * y, 3 * e),
        Case("row_sum", lambda: kernels_ext.row_sum(x), lambda: x.sum(-1), e),
        Case("softmax", lambda: kernels_ext.softmax(x), lambda: torch.softmax(x, -1), 2 * e),
        Case("rmsnorm", lambda: kernels_ext.rmsnorm(x, w),
             lambda: F.rms_norm(x, (n,), w, 1e-6), 2 * e),
        Case("add_rmsnorm", lambda: kernels_ext.add_rmsnorm(x, y, w),
             lambda: F.rms_norm(x + y, (n,), w, 1e-6), 4 * e),
        Case("layernorm", lambda: kernels_ext.layernorm(x, w, b),
             lambda: F.layer_norm(x, (n,), w, b), 2 * e),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels_ext.bench")
    parser.add_argument("--shapes", default="32768x8192,131072x1024,1024x262144",
                        help="comma-separated MxN")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    args = parser.parse_args(argv)
    kernels_ext.build(progress=print)
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    print(f"{'op':<12} {'dtype':<9} {'shape':<14} {'ours us':>9} {'SOL':>6} {'eager us':>9} "
          f"{'SOL':>6} {'speedup':>8}")
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for shape in args.shapes.split(","):
            m, n = (int(v) for v in shape.lower().split("x"))
            for c in cases(m, n, dtype):
                ours, eager = _time_ms(c.ours), _time_ms(c.eager)
                sol_ours = c.bytes_moved / (ours * 1e-3) / bw
                sol_eager = c.bytes_moved / (eager * 1e-3) / bw
                print(f"{c.name:<12} {dtype_name:<9} {shape:<14} {ours * 1e3:9.1f} "
                      f"{sol_ours:6.2f} {eager * 1e3:9.1f} {sol_eager:6.2f} {eager / ours:7.2f}x")
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
