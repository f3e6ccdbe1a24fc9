"""Fake (meta) implementations made from the op table's output rules: outputs with the
declared shapes and dtypes, no data, no checks (the wrapper and the compiled op run those).
_fake.py registers one per op."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from kernels_ext import checks
from kernels_ext.optable import NO_DEFAULT, OpDef, TensorArg


def _signature(op: OpDef) -> inspect.Signature:
    params = []
    for a in op.args:
        default = None if isinstance(a, TensorArg) and a.optional else getattr(
            a, "default", NO_DEFAULT)
        params.append(inspect.Parameter(
            a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty if default is NO_DEFAULT else default))
    return inspect.Signature(params)


def _unbacked_size() -> Any:
    """A '?' output length: a size the compiler may not assume anything about (NMS's count
    of kept boxes), from the fake context torch.compile and opcheck run fakes in."""
    return torch.library.get_ctx().new_dynamic_size()


def make_fake(op: OpDef) -> Callable[..., Any]:
    """Outputs with the shapes and dtypes the entry declares; no checks (the wrapper and
    the compiled op run those), no data."""
    signature = _signature(op)
    ref = op.reference.name

    def fake(*args: Any, **kwargs: Any) -> Any:
        # The dispatcher drops trailing arguments equal to their schema default.
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        ctx = checks.bind_dims(op, dict(bound.arguments))
        outs = []
        for i, o in enumerate(op.outputs):
            if o.like is not None:
                like = ctx.args[o.like]
                outs.append(torch.empty_like(like, memory_format=torch.contiguous_format))
                continue
            assert o.dtype is not None
            if o.dtype in ctx.args:  # a tensor's dtype, or a ScalarType argument
                value = ctx.args[o.dtype]
                dtype = value if isinstance(value, torch.dtype) else value.dtype
            else:
                dtype = checks.DTYPE_INFO[o.dtype][0]
            shape = checks.output_shape(op, i, ctx, _unbacked_size)
            outs.append(ctx.args[ref].new_empty(shape, dtype=dtype))
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    fake.__name__ = f"{op.name}_fake"
    fake.__qualname__ = fake.__name__
    return fake
