"""solbench's hand-written CUDA kernels, as PyTorch custom ops.

    import kernels_ext
    y = kernels_ext.softmax(x)              # builds on first use (cached), then runs
    torch.ops.solbench_kernels.softmax(x)   # the same op, once the library is loaded

Importing this package is cheap: it imports neither torch nor CUDA. The library is
compiled on the first op call (or by kernels_ext.build()) into a cache directory keyed
by the sources, flags, GPU architecture and torch version. See README.md.
"""

from __future__ import annotations

from typing import Any

from kernels_ext._build import KernelBuildError, build, ensure_loaded

OPS = (
    "add",
    "mul",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "swiglu",
    "row_sum",
    "row_max",
    "sum_all",
    "max_all",
    "softmax",
    "rmsnorm",
    "add_rmsnorm",
    "layernorm",
)

__all__ = ["KernelBuildError", "build", "ensure_loaded", *OPS]


def __getattr__(name: str) -> Any:
    # The op wrappers import torch; load them only when one is asked for.
    if name in OPS:
        from kernels_ext import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'kernels_ext' has no attribute {name!r}")
