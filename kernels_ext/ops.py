"""Python wrappers of the solbench_kernels ops, one per op table entry.

Each wrapper has the entry's signature and doc string, runs the entry's checks (type,
dtype, shape, layout, device: checks.py, the same plan the compiled op runs) so a mistake
is reported with the op's name before anything is built, then loads the library
(building it on first use) and calls torch.ops.solbench_kernels.<op>.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernels_ext import _build, checks
from kernels_ext.optable import NAMESPACE, NO_DEFAULT, OpDef, ScalarArg, TensorArg, load_table


class KernelArchError(RuntimeError):
    """The loaded library has no code for this GPU's architecture."""


# Dynamo must not trace the loader (it may run a compiler); it runs eagerly instead.
_ensure_loaded: Callable[[], None] = torch.compiler.disable(_build.ensure_loaded)


def _call(op: str, *args: Any) -> Any:
    if torch.compiler.is_compiling():
        return getattr(getattr(torch.ops, NAMESPACE), op)(*args)
    _ensure_loaded()
    try:
        return getattr(getattr(torch.ops, NAMESPACE), op)(*args)
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


def describe(op: OpDef) -> str:
    """The wrapper's doc string: the entry's doc, then its arguments and outputs."""
    lines = [op.doc, "", "Args:"]
    for a in op.args:
        if isinstance(a, TensorArg):
            what = f"Tensor{'?' if a.optional else ''} {a.shape.text}, "
            what += ("dtype of " + a.dtype_of) if a.dtype_of else " | ".join(a.dtypes or ())
            what += ", contiguous" if a.contiguous else ""
            what += ", written in place" if a.mutable else ""
        else:
            what = a.schema_type
            if a.choices and a.type == "ScalarType":
                what += " in {" + ", ".join(a.choices) + "}"
            elif a.choices:
                what += " in {" + ", ".join(repr(c) for c in a.choices) + "}"
            if a.default is not NO_DEFAULT:
                what += f", default {a.default!r}"
        lines.append(f"    {a.name}: {what}" + (f". {a.doc}" if a.doc else ""))
    lines += ["", "Returns:"]
    for o in op.outputs or ():
        rule = f"like {o.like}" if o.like else f"{o.shape.text if o.shape else ''}, {o.dtype}"
        lines.append(f"    {o.name}: Tensor {rule}")
    if not op.outputs:
        lines.append("    None (the tensors marked 'written in place' hold the result)")
    lines += ["", f"All tensors on one CUDA device. Also torch.ops.{NAMESPACE}.{op.name}."]
    return "\n".join(lines)


def _converter(a: ScalarArg | TensorArg) -> Callable[[Any], Any] | None:
    # The schema's float takes a Python float; an int passed for it is converted here.
    if isinstance(a, ScalarArg) and a.type == "float":
        return lambda v: v if v is None else float(v)
    return None


def make_wrapper(op: OpDef) -> Callable[..., Any]:
    validate = checks.python_validator(op)
    converters = [_converter(a) for a in op.args]
    needs_conversion = any(converters)
    name = op.name

    def run(args: tuple[Any, ...]) -> Any:
        validate(args)
        if needs_conversion:
            args = tuple(c(v) if c else v for c, v in zip(converters, args, strict=True))
        return _call(name, *args)

    # A real signature (help(), inspect, editors, positional calls at full speed): the
    # def line is generated from the entry; the body only forwards the arguments.
    params, defaults = [], {}
    for a in op.args:
        default = None if isinstance(a, TensorArg) and a.optional else getattr(
            a, "default", NO_DEFAULT)
        if default is NO_DEFAULT:
            params.append(a.name)
        else:
            defaults[f"_default_{a.name}"] = default
            params.append(f"{a.name}=_default_{a.name}")
    arg_tuple = ", ".join(a.name for a in op.args) + ","
    source = f"def {name}({', '.join(params)}):\n    return _run(({arg_tuple}))\n"
    namespace: dict[str, Any] = {"_run": run, **defaults}
    exec(compile(source, f"<kernels_ext wrapper {name}>", "exec"), namespace)
    fn = namespace[name]
    fn.__doc__ = describe(op)
    fn.__module__ = __name__
    fn.__qualname__ = name
    return fn


globals().update({op.name: make_wrapper(op) for op in load_table()})
__all__ = ["KernelArchError", "describe", "make_wrapper", *(op.name for op in load_table())]
