"""solbench's hand-written CUDA kernels, as PyTorch custom ops.

    import kernels_ext
    y = kernels_ext.softmax(x)              # builds on first use (cached), then runs
    torch.ops.solbench_kernels.softmax(x)   # the same op, once the library is loaded

Importing this package is cheap: it reads the op table (csrc/<family>/ops.yaml, which
declares every op once) and imports neither torch nor CUDA. The library is compiled on
the first op call (or by kernels_ext.build()) into a cache directory keyed by the
sources, the table, flags, GPU architecture and torch version. See README.md.
"""

from __future__ import annotations

from typing import Any

from kernels_ext._build import KernelBuildError, build, ensure_loaded
from kernels_ext.optable import OpTableError, op_names

# Every op of the table (csrc/<family>/ops.yaml), in table order.
OPS: tuple[str, ...] = op_names()

__all__ = ["KernelBuildError", "OpTableError", "build", "ensure_loaded", *OPS]


def __getattr__(name: str) -> Any:
    # The op wrappers import torch; load them only when one is asked for.
    if name in OPS:
        from kernels_ext import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'kernels_ext' has no attribute {name!r}")
