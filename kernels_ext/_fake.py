"""Fake (meta) implementations of the solbench_kernels ops, for torch.compile and
torch.library.opcheck. The C++ library names this module (m.set_python_module), so
torch imports it on demand even when the .so was loaded on its own.

Import it only after the library is loaded: registering a fake needs the op to exist."""

from __future__ import annotations

import torch

_NS = "solbench_kernels::"


def _like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake(_NS + "add")
def _add(a, b):
    return _like(a)


@torch.library.register_fake(_NS + "mul")
def _mul(a, b):
    return _like(a)


@torch.library.register_fake(_NS + "swiglu")
def _swiglu(a, b):
    return _like(a)


@torch.library.register_fake(_NS + "relu")
def _relu(x):
    return _like(x)


@torch.library.register_fake(_NS + "gelu")
def _gelu(x, approximate="none"):
    return _like(x)


@torch.library.register_fake(_NS + "silu")
def _silu(x):
    return _like(x)


@torch.library.register_fake(_NS + "sigmoid")
def _sigmoid(x):
    return _like(x)


@torch.library.register_fake(_NS + "softmax")
def _softmax(x):
    return _like(x)


@torch.library.register_fake(_NS + "row_sum")
def _row_sum(x):
    return x.new_empty(x.shape[:-1])


@torch.library.register_fake(_NS + "row_max")
def _row_max(x):
    return x.new_empty(x.shape[:-1])


@torch.library.register_fake(_NS + "sum_all")
def _sum_all(x):
    return x.new_empty(())


@torch.library.register_fake(_NS + "max_all")
def _max_all(x):
    return x.new_empty(())


@torch.library.register_fake(_NS + "rmsnorm")
def _rmsnorm(x, weight, eps=1e-6):
    return _like(x)


@torch.library.register_fake(_NS + "add_rmsnorm")
def _add_rmsnorm(x, residual, weight, eps=1e-6):
    return _like(x), _like(x)


@torch.library.register_fake(_NS + "layernorm")
def _layernorm(x, weight, bias, eps=1e-5):
    return _like(x)
