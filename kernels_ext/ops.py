"""Python wrappers of the solbench_kernels ops.

Each wrapper checks its inputs first (type, dtype, shape, layout, device), so a
mistake is reported with the op's name before anything is built, then loads the
library (building it on first use) and calls torch.ops.solbench_kernels.<op>.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernels_ext import _build

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_DTYPE_NAMES = "float32, bfloat16, float16"
_GELU_MODES = ("none", "tanh")


class KernelArchError(RuntimeError):
    """The loaded library has no code for this GPU's architecture."""


def _fail(exc: type[Exception], op: str, message: str) -> Exception:
    return exc(f"kernels_ext.{op}: {message}")


def _check(op: str, tensors: dict[str, object], *, same_shape: bool = True,
           row_params: dict[str, object] | None = None, min_dim: int = 0) -> None:
    """Validate inputs in the order type, dtype, shape, layout, device.

    The first tensor is the reference; `same_shape` makes the others match its shape;
    `row_params` (weight, bias) must be 1-D with the length of its last dimension.
    Device is checked last so the other checks also work on CPU tensors.
    """
    everything = {**tensors, **(row_params or {})}
    for name, t in everything.items():
        if not isinstance(t, torch.Tensor):
            raise _fail(TypeError, op, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    ref_name, ref = next(iter(tensors.items()))
    for name, t in everything.items():
        if t.dtype not in SUPPORTED_DTYPES:
            raise _fail(TypeError, op, f"{name} has dtype {t.dtype}; supported: {_DTYPE_NAMES}")
        if t.dtype != ref.dtype:
            raise _fail(TypeError, op,
                        f"{name} has dtype {t.dtype} but {ref_name} has {ref.dtype}")
    if ref.dim() < min_dim:
        raise _fail(ValueError, op,
                    f"{ref_name} must have at least {min_dim} dimension(s) (the last one is "
                    f"the row), got shape {tuple(ref.shape)}")
    if same_shape:
        for name, t in tensors.items():
            if t.shape != ref.shape:
                raise _fail(ValueError, op, f"{name} has shape {tuple(t.shape)} but "
                                            f"{ref_name} has shape {tuple(ref.shape)}")
    for name, p in (row_params or {}).items():
        if p.dim() != 1 or p.shape[0] != ref.shape[-1]:
            raise _fail(ValueError, op, f"{name} must have shape ({ref.shape[-1]},) (the last "
                                        f"dim of {ref_name}), got {tuple(p.shape)}")
    for name, t in everything.items():
        if not t.is_contiguous():
            raise _fail(ValueError, op, f"{name} must be contiguous (call .contiguous() first)")
    for name, t in everything.items():
        if t.device.type != "cuda":
            raise _fail(ValueError, op, f"{name} is on {t.device}; kernels_ext ops need CUDA "
                                        "tensors")
        if t.device != ref.device:
            raise _fail(ValueError, op, f"{name} is on {t.device} but {ref_name} is on "
                                        f"{ref.device}")


# Dynamo must not trace the loader (it may run a compiler); it runs eagerly instead.
_ensure_loaded: Callable[[], None] = torch.compiler.disable(_build.ensure_loaded)


def _call(op: str, *args):
    if torch.compiler.is_compiling():
        return getattr(torch.ops.solbench_kernels, op)(*args)
    _ensure_loaded()
    try:
        return getattr(torch.ops.solbench_kernels, op)(*args)
    except RuntimeError as err:
        if "no kernel image" not in str(err):
            raise
        major, minor = torch.cuda.get_device_capability()
        raise KernelArchError(
            f"kernels_ext.{op}: the loaded solbench_kernels library has no code for this "
            f"GPU (compute capability {major}.{minor}). It was built for other "
            "architectures: set TORCH_CUDA_ARCH_LIST (or unset it to build for the GPU "
            "present) and rebuild with kernels_ext.build() or python -m kernels_ext.build."
        ) from err


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + b (same shape and dtype), computed in fp32, rounded once."""
    _check("add", {"a": a, "b": b})
    return _call("add", a, b)


def mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a * b (same shape and dtype), computed in fp32, rounded once."""
    _check("mul", {"a": a, "b": b})
    return _call("mul", a, b)


def relu(x: torch.Tensor) -> torch.Tensor:
    _check("relu", {"x": x})
    return _call("relu", x)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, exact (erf) or approximate="tanh", like torch.nn.functional.gelu."""
    if approximate not in _GELU_MODES:
        raise _fail(ValueError, "gelu", f"approximate must be 'none' or 'tanh', got "
                                        f"{approximate!r}")
    _check("gelu", {"x": x})
    return _call("gelu", x, approximate)


def silu(x: torch.Tensor) -> torch.Tensor:
    _check("silu", {"x": x})
    return _call("silu", x)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    _check("sigmoid", {"x": x})
    return _call("sigmoid", x)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b."""
    _check("swiglu", {"a": a, "b": b})
    return _call("swiglu", a, b)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim -> shape x.shape[:-1], dtype of x, fp32 accumulation."""
    _check("row_sum", {"x": x}, min_dim=1)
    return _call("row_sum", x)


def row_max(x: torch.Tensor) -> torch.Tensor:
    """Max over the last dim -> shape x.shape[:-1]; NaN propagates."""
    _check("row_max", {"x": x}, min_dim=1)
    if x.shape[-1] == 0 and math.prod(x.shape[:-1]) > 0:
        raise _fail(ValueError, "row_max", "cannot take the max of empty rows")
    return _call("row_max", x)


def sum_all(x: torch.Tensor) -> torch.Tensor:
    """Sum of every element -> 0-dim tensor of x's dtype, fp32 accumulation."""
    _check("sum_all", {"x": x})
    return _call("sum_all", x)


def max_all(x: torch.Tensor) -> torch.Tensor:
    """Max of every element -> 0-dim tensor; NaN propagates."""
    _check("max_all", {"x": x})
    if x.numel() == 0:
        raise _fail(ValueError, "max_all", "cannot take the max of an empty tensor")
    return _call("max_all", x)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, fp32 math."""
    _check("softmax", {"x": x}, min_dim=1)
    return _call("softmax", x)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x * rsqrt(mean(x^2, -1) + eps) * weight."""
    _check("rmsnorm", {"x": x}, row_params={"weight": weight}, min_dim=1)
    return _call("rmsnorm", x, weight, float(eps))


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(rmsnorm(x + residual) * weight, x + residual) in one pass."""
    _check("add_rmsnorm", {"x": x, "residual": residual}, row_params={"weight": weight},
           min_dim=1)
    return _call("add_rmsnorm", x, residual, weight, float(eps))


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              eps: float = 1e-5) -> torch.Tensor:
    """(x - mean) * rsqrt(var + eps) * weight + bias over the last dim (biased var)."""
    _check("layernorm", {"x": x}, row_params={"weight": weight, "bias": bias}, min_dim=1)
    return _call("layernorm", x, weight, bias, float(eps))
