"""The input checks of one op, derived from its table entry: one plan, run by the Python
wrapper and written out as C++ for the compiled op (codegen.py), so a caller of
kernels_ext.<op> and a caller of torch.ops.solbench_kernels.<op> (say, the AOT .so in
another runtime) get the same checks and the same messages.

A plan is a list of steps in a fixed order: argument types (Python only: the dispatcher
already enforces them for C++ callers), string choices, dtypes, shapes (binding the
symbolic dims of the entry's shape patterns: first occurrence binds, later ones must
match), requirements, contiguity, device. Device comes last so that the other checks also
work on CPU tensors, before any build. Each step carries its Python test and its C++
condition side by side, and one message whose parts are rendered by both.

Over 400 lines on purpose: each kind of step keeps its Python test, its C++ condition and
its message in one function, so the two sides cannot drift apart; split by side they would.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernels_ext import expr as ex
from kernels_ext.optable import (
    MAX_ROW_LENGTH,
    NAMESPACE,
    OpDef,
    Requirement,
    ScalarArg,
    TensorArg,
    bound_symbols,
    message_fields,
)

# torch name -> (torch.dtype, C++ at::ScalarType)
DTYPE_INFO: dict[str, tuple[torch.dtype, str]] = {
    "float64": (torch.float64, "at::kDouble"),
    "float32": (torch.float32, "at::kFloat"),
    "bfloat16": (torch.bfloat16, "at::kBFloat16"),
    "float16": (torch.float16, "at::kHalf"),
    "float8_e4m3fn": (torch.float8_e4m3fn, "at::kFloat8_e4m3fn"),
    "float8_e5m2": (torch.float8_e5m2, "at::kFloat8_e5m2"),
    "int64": (torch.int64, "at::kLong"),
    "int32": (torch.int32, "at::kInt"),
    "int16": (torch.int16, "at::kShort"),
    "int8": (torch.int8, "at::kChar"),
    "uint8": (torch.uint8, "at::kByte"),
    "bool": (torch.bool, "at::kBool"),
}


class Ctx:
    """One call being checked: the arguments by name, and the values expressions see: the
    scalar arguments and the dims bound so far."""

    __slots__ = ("args", "values")

    def __init__(self, args: dict[str, Any], scalars: tuple[str, ...] = ()) -> None:
        self.args = args
        self.values: dict[str, Any] = {n: args[n] for n in scalars}


@dataclass(frozen=True)
class Val:
    """A value inside a message: how Python formats it, and the C++ expression whose
    operator<< prints the same text."""

    py: Callable[[Ctx], str]
    cpp: str


Part = str | Val


@dataclass(frozen=True)
class Check:
    kind: str
    error: type[Exception]            # TypeError or ValueError (TORCH_CHECK_TYPE / _VALUE)
    ok: Callable[[Ctx], bool]
    cpp: str | None                   # the C++ condition; None: Python only
    message: tuple[Part, ...]
    when: str | None = None           # an optional tensor: checked only when present

    def text(self, ctx: Ctx) -> str:
        return "".join(p if isinstance(p, str) else p.py(ctx) for p in self.message)


@dataclass(frozen=True)
class Bind:
    """Records a dim (int) or a variadic dim (tuple) of a tensor already checked for rank."""

    name: str
    value: Callable[[Ctx], Any]
    cpp: str                          # the C++ declaration


Step = Check | Bind


# --------------------------------------------------------------------------- spelling
def cpp_dim(name: str) -> str:
    return f"dim_{name}"


def cpp_dims(name: str) -> str:
    return f"dims_{name}"


def cpp_tensor(t: TensorArg) -> str:
    """The at::Tensor a check reads (inside `if (t.has_value())` for an optional one)."""
    return f"(*{t.name})" if t.optional else t.name


def fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def fmt_dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fmt_scalar(v: Any) -> str:
    # "g" matches C++'s default ostream formatting of a double (6 significant digits).
    if isinstance(v, torch.dtype):
        return fmt_dtype(v)
    return format(v, "g") if isinstance(v, float) else str(v)


def cpp_names(op: OpDef) -> ex.CppNames:
    """How the generated C++ spells the dims, scalars and tensors an expression names."""
    tensors = {t.name: t for t in op.tensors}
    dims = set(bound_symbols(op))
    return ex.CppNames(
        value=lambda n: cpp_dim(n) if n in dims else n,
        variadic=cpp_dims,
        tensor=lambda n: cpp_tensor(tensors[n]),
        optional=lambda n: n,
    )


# --------------------------------------------------------------------------- the plan
def plan(op: OpDef) -> tuple[Step, ...]:
    return (*_type_checks(op), *_choice_checks(op), *_dtype_checks(op), *_shape_steps(op),
            *_requirement_checks(op), *_layout_checks(op), *_device_checks(op))


def _type_checks(op: OpDef) -> list[Check]:
    out = []
    for a in op.args:
        ok = _is_tensor if isinstance(a, TensorArg) else _SCALAR_TESTS[a.type]
        kind = "a torch.Tensor" if isinstance(a, TensorArg) else _SCALAR_NOUNS[a.type]
        if a.optional:
            ok = _or_none(ok)
            kind += " or None"
        name = a.name
        out.append(Check("type", TypeError, (lambda ctx, ok=ok, name=name: ok(ctx.args[name])),
                         None, (f"{name} must be {kind}, got ",
                                Val(lambda ctx, name=name: type(ctx.args[name]).__name__, ""))))
    return out


def _is_tensor(v: Any) -> bool:
    return isinstance(v, torch.Tensor)


def _or_none(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or test(v)


# The exact-type tests first: the ABC isinstance costs ~0.3 us on every call.
_SCALAR_TESTS: dict[str, Callable[[Any], bool]] = {
    "float": lambda v: type(v) is float or type(v) is int or (
        isinstance(v, (numbers.Real, torch.SymFloat, torch.SymInt)) and not isinstance(v, bool)),
    "int": lambda v: type(v) is int or (
        isinstance(v, (numbers.Integral, torch.SymInt)) and not isinstance(v, bool)),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "ScalarType": lambda v: isinstance(v, torch.dtype),
}
_SCALAR_NOUNS = {"float": "a float", "int": "an int", "bool": "a bool", "str": "a str",
                 "ScalarType": "a torch.dtype"}


def _choice_checks(op: OpDef) -> list[Check]:
    out = []
    for s in op.scalars:
        if not s.choices:
            continue
        if s.type == "ScalarType":
            out.append(_dtype_choice_check(s))
            continue
        name, choices = s.name, s.choices
        listed = ", ".join(f"'{c}'" for c in choices)
        value = f"*{name}" if s.optional else name
        listed_cpp = ", ".join(_cpp_str(c) for c in choices)
        cond = f"sk::bind::choice_index({value}, {{{listed_cpp}}}) >= 0"
        if s.optional:
            cond = f"!{name}.has_value() || {cond}"
        out.append(Check(
            "choice", ValueError,
            lambda ctx, name=name, choices=choices: ctx.args[name] is None
            or ctx.args[name] in choices,
            cond,
            (f"{name} must be one of {listed}; got '",
             Val(lambda ctx, name=name: str(ctx.args[name]), f"std::string({value})"), "'")))
    return out


def _dtype_choice_check(s: ScalarArg) -> Check:
    name, choices = s.name, s.choices or ()
    allowed = frozenset(DTYPE_INFO[d][0] for d in choices)
    value = f"*{name}" if s.optional else name
    cond = " || ".join(f"{value} == {DTYPE_INFO[d][1]}" for d in choices)
    if s.optional:
        cond = f"!{name}.has_value() || {cond}"
    return Check("choice", ValueError,
                 lambda ctx: ctx.args[name] is None or ctx.args[name] in allowed, cond,
                 (f"{name} must be one of {', '.join(choices)}; got ",
                  Val(lambda ctx: fmt_dtype(ctx.args[name]), f"sk::bind::dtype_name({value})")))


def _dtype_checks(op: OpDef) -> list[Check]:
    out = []
    for t in op.tensors:
        name, ct = t.name, cpp_tensor(t)
        when = name if t.optional else None
        dtype_val = Val(lambda ctx, name=name: fmt_dtype(ctx.args[name].dtype),
                        f"sk::bind::dtype_name({ct})")
        if t.dtypes is not None:
            allowed = frozenset(DTYPE_INFO[d][0] for d in t.dtypes)
            cond = " || ".join(f"{ct}.scalar_type() == {DTYPE_INFO[d][1]}" for d in t.dtypes)
            out.append(Check("dtype", TypeError,
                             lambda ctx, name=name, allowed=allowed:
                             ctx.args[name].dtype in allowed,
                             cond, (f"{name} has dtype ", dtype_val,
                                    f"; supported: {', '.join(t.dtypes)}"), when))
        else:
            ref = op.arg(t.dtype_of)  # a required tensor (the loader checks)
            out.append(Check(
                "dtype", TypeError,
                lambda ctx, name=name, ref=ref.name: ctx.args[name].dtype == ctx.args[ref].dtype,
                f"{ct}.scalar_type() == {ref.name}.scalar_type()",
                (f"{name} has dtype ", dtype_val, f" but {ref.name} has ",
                 Val(lambda ctx, ref=ref.name: fmt_dtype(ctx.args[ref].dtype),
                     f"sk::bind::dtype_name({ref.name})")), when))
    return out


def _shape_steps(op: OpDef) -> list[Step]:
    """Required tensors first (rank, then the dims they bind), then every match, then the
    optional tensors: a dim may be bound by an argument after the one that uses it."""
    bound = bound_symbols(op)
    names = cpp_names(op)
    required = [t for t in op.tensors if not t.optional]
    optional = [t for t in op.tensors if t.optional]
    steps: list[Step] = []
    for t in required:
        steps += _rank_check(t)
        steps += [_bind(t, i) for i, d in enumerate(t.shape.dims)
                  if d.kind in ("name", "variadic") and bound[d.name] == (t.name, i)]
    for t in required:
        steps += [_match(op, t, i, bound, names) for i, d in enumerate(t.shape.dims)
                  if _is_match(t, i, d, bound)]
    for t in optional:
        steps += _rank_check(t)
        steps += [_match(op, t, i, bound, names) for i, d in enumerate(t.shape.dims)
                  if _is_match(t, i, d, bound)]
    return steps


def _is_match(t: TensorArg, i: int, d: Any, bound: dict[str, tuple[str, int]]) -> bool:
    if d.kind == "any":
        return False
    if d.kind == "expr":
        return True
    return bound.get(d.name) != (t.name, i)


def _shape_val(t: TensorArg) -> Val:
    return Val(lambda ctx, name=t.name: fmt_shape(ctx.args[name].shape), f"{cpp_tensor(t)}.sizes()")


def _rank_check(t: TensorArg) -> list[Check]:
    shape, ct, name = t.shape, cpp_tensor(t), t.name
    n = shape.fixed_rank
    when = name if t.optional else None
    if shape.variadic_index is None:
        plural = "dimension" if n == 1 else "dimensions"
        return [Check("rank", ValueError, lambda ctx, name=name, n=n: ctx.args[name].dim() == n,
                      f"{ct}.dim() == {n}",
                      (f"{name} must have shape {shape.text} ({n} {plural}), got ", _shape_val(t)),
                      when)]
    if n == 0:
        return []  # [...] or [*S]: any rank
    plural = "dimension" if n == 1 else "dimensions"
    return [Check("rank", ValueError, lambda ctx, name=name, n=n: ctx.args[name].dim() >= n,
                  f"{ct}.dim() >= {n}",
                  (f"{name} must have shape {shape.text} (at least {n} {plural}), got ",
                   _shape_val(t)), when)]


def _variadic_span(t: TensorArg, i: int) -> tuple[Callable[[Any], tuple], str]:
    """(Python slice of a tensor's shape, C++ slice) for variadic entry i."""
    fixed = t.shape.fixed_rank
    after = fixed - i  # fixed entries after the variadic one
    if i == 0:
        py = (lambda x: x.shape) if after == 0 else (lambda x: x.shape[:-after])
    else:
        py = (lambda x: x.shape[i:]) if after == 0 else (lambda x: x.shape[i:-after])
    return py, f"{cpp_tensor(t)}.sizes().slice({i}, {cpp_tensor(t)}.dim() - {fixed})"


def _bind(t: TensorArg, i: int) -> Bind:
    d = t.shape.dims[i]
    name = t.name
    if d.kind == "variadic":
        py, cpp = _variadic_span(t, i)
        return Bind(d.name, lambda ctx, py=py, name=name: py(ctx.args[name]),
                    f"[[maybe_unused]] const c10::IntArrayRef {cpp_dims(d.name)} = {cpp};")
    pos = t.shape.position(i)
    return Bind(d.name, lambda ctx, name=name, pos=pos: ctx.args[name].shape[pos],
                f"[[maybe_unused]] const int64_t {cpp_dim(d.name)} = {cpp_tensor(t)}.size({pos});")


def _match(op: OpDef, t: TensorArg, i: int, bound: dict[str, tuple[str, int]],
           names: ex.CppNames) -> Check:
    d = t.shape.dims[i]
    name, ct = t.name, cpp_tensor(t)
    when = name if t.optional else None
    head = f"{name} must have shape {t.shape.text}"
    if d.kind == "variadic":
        py, cpp = _variadic_span(t, i)
        src = bound[d.name][0]
        return Check("shape", ValueError,
                     lambda ctx, py=py, name=name, s=d.name: py(ctx.args[name]) == ctx.values[s],
                     f"{cpp} == {cpp_dims(d.name)}",
                     (f"{head} with *{d.name} = ",
                      Val(lambda ctx, s=d.name: fmt_shape(ctx.values[s]), cpp_dims(d.name)),
                      f" (from {src}), got ", _shape_val(t)), when)
    pos = t.shape.position(i)
    e = d.expr
    assert e is not None
    want_cpp = ex.to_cpp(e, names)

    def want(ctx: Ctx, e: ex.Expr = e) -> Any:
        return e.fn(ctx.values, ctx.args)

    def ok(ctx: Ctx, name: str = name, pos: int = pos) -> bool:
        return ctx.args[name].shape[pos] == want(ctx)

    cond = f"{ct}.size({pos}) == {want_cpp}"
    if d.kind == "expr" and not e.names:  # a literal
        return Check("shape", ValueError, ok, cond, (f"{head}, got ", _shape_val(t)), when)
    origin = f" (from {bound[d.name][0]})" if d.kind == "name" else ""
    return Check("shape", ValueError, ok, cond,
                 (f"{head} with {d.text} = ", Val(lambda ctx, want=want: str(int(want(ctx))),
                                                  want_cpp),
                  f"{origin}, got ", _shape_val(t)), when)


def implied_requirements(op: OpDef) -> tuple[Requirement, ...]:
    """What a generic binding needs on top of the entry's own requirements."""
    if op.impl != "rows":
        return ()
    n = op.reference.shape.dims[1].name
    return (Requirement(ex.parse(f"{n} <= {MAX_ROW_LENGTH}"),
                        f"rows of {{{n}}} elements are longer than the supported "
                        f"{MAX_ROW_LENGTH}"),)


def _requirement_checks(op: OpDef) -> list[Check]:
    names = cpp_names(op)
    dims = set(bound_symbols(op))
    scalars = {s.name: s for s in op.scalars}
    out = []
    for r in (*op.requires, *implied_requirements(op)):
        parts: list[Part] = []
        rest = r.error
        for field in message_fields(r.error):
            before, rest = rest.split("{" + field + "}", 1)
            parts.append(before)
            if field in dims:
                cpp = cpp_dim(field)
            elif scalars[field].type == "str":
                cpp = f"std::string({field})"
            elif scalars[field].type == "ScalarType":
                cpp = f"sk::bind::dtype_name({field})"
            else:
                cpp = field
            parts.append(Val(lambda ctx, f=field: fmt_scalar(ctx.values[f]), cpp))
        parts.append(rest)
        out.append(Check("requirement", ValueError,
                         lambda ctx, e=r.expr: bool(e.fn(ctx.values, ctx.args)),
                         ex.to_cpp(r.expr, names), tuple(p for p in parts if p != "")))
    return out


def _layout_checks(op: OpDef) -> list[Check]:
    return [Check("layout", ValueError, lambda ctx, name=t.name: ctx.args[name].is_contiguous(),
                  f"{cpp_tensor(t)}.is_contiguous()",
                  (f"{t.name} must be contiguous (call .contiguous() first)",),
                  t.name if t.optional else None)
            for t in op.tensors if t.contiguous]


def _device_checks(op: OpDef) -> list[Check]:
    ref = op.reference
    out = []
    for t in op.tensors:
        name, ct = t.name, cpp_tensor(t)
        when = name if t.optional else None
        device = Val(lambda ctx, name=name: str(ctx.args[name].device), f"{ct}.device()")
        out.append(Check("device", ValueError,
                         lambda ctx, name=name: ctx.args[name].is_cuda,
                         f"{ct}.is_cuda()",
                         (f"{name} is on ", device, "; a CUDA tensor is required"), when))
    for t in op.tensors:
        if t is ref:
            continue
        name, ct = t.name, cpp_tensor(t)
        out.append(Check(
            "device", ValueError,
            # Both are CUDA tensors by now: the device indices decide.
            lambda ctx, name=name, r=ref.name: ctx.args[name].get_device()
            == ctx.args[r].get_device(),
            f"{ct}.device() == {ref.name}.device()",
            (f"{name} is on ", Val(lambda ctx, name=name: str(ctx.args[name].device),
                                   f"{ct}.device()"),
             f" but {ref.name} is on ", Val(lambda ctx, r=ref.name: str(ctx.args[r].device),
                                            f"{ref.name}.device()")),
            name if t.optional else None))
    return out


def _cpp_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------- Python side
def python_validator(op: OpDef) -> Callable[[tuple[Any, ...]], Ctx]:
    """A function that checks one call's arguments (in table order) and returns the
    context (with its bound dims); raises TypeError / ValueError naming kernels_ext.<op>."""
    names = tuple(a.name for a in op.args)
    scalars = tuple(s.name for s in op.scalars)
    prefix = f"kernels_ext.{op.name}: "
    # (bind?, optional tensor or None, function, step): a flat loop, run on every call.
    # Dims no Python check reads (a *B only the C++ output shape uses) are not bound.
    full = plan(op)
    used = _names_read(op)
    steps = [(True, None, s.value, s) if isinstance(s, Bind) else (False, s.when, s.ok, s)
             for s in full if not isinstance(s, Bind) or s.name in used]

    def validate(args: tuple[Any, ...]) -> Ctx:
        ctx = Ctx(dict(zip(names, args, strict=True)), scalars)
        for is_bind, when, fn, step in steps:
            if is_bind:
                ctx.values[step.name] = fn(ctx)
            elif (when is None or ctx.args[when] is not None) and not fn(ctx):
                raise step.error(prefix + step.text(ctx))
        return ctx

    return validate


def _names_read(op: OpDef) -> set[str]:
    """Dims that a Python check reads: later occurrences in shapes, expression dims,
    requirements and their messages."""
    bound = bound_symbols(op)
    used: set[str] = set()
    for t in op.tensors:
        for i, d in enumerate(t.shape.dims):
            if d.kind in ("name", "variadic") and bound.get(d.name) != (t.name, i):
                used.add(d.name)
            if d.kind == "expr" and d.expr is not None:
                used |= d.expr.names | d.expr.variadics
    for r in (*op.requires, *implied_requirements(op)):
        used |= r.expr.names | r.expr.variadics | set(message_fields(r.error))
    return used


def bind_dims(op: OpDef, args: dict[str, Any]) -> Ctx:
    """The dims a call binds, without checking anything (fake impls use it)."""
    ctx = Ctx(args, tuple(s.name for s in op.scalars))
    for step in plan(op):
        if isinstance(step, Bind):
            ctx.values[step.name] = step.value(ctx)
    return ctx


def output_shape(op: OpDef, out_index: int, ctx: Ctx,
                 dynamic: Callable[[], Any] | None = None) -> list[Any]:
    """An output's shape from the dims a call bound and its int arguments (entries of an
    output with `shape`); a '?' length is what `dynamic()` returns (a fake's unbacked size)."""
    o = op.outputs[out_index]
    assert o.shape is not None
    shape: list[Any] = []
    for d in o.shape.dims:
        if d.kind == "variadic":
            shape += list(ctx.values[d.name])
        elif d.kind == "dynamic":
            if dynamic is None:
                raise ValueError(f"{op.name}: output {o.name} has a length only the op "
                                 "learns ('?'): no static shape")
            shape.append(dynamic())
        else:
            assert d.expr is not None
            shape.append(d.expr.fn(ctx.values, ctx.args))
    return shape


# --------------------------------------------------------------------------- C++ side
def cpp_check(step: Step) -> str:
    """One step as a C++ statement of the generated binding."""
    if isinstance(step, Bind):
        return step.cpp
    assert step.cpp is not None
    macro = "SK_CHECK_TYPE" if step.error is TypeError else "SK_CHECK_VALUE"
    parts = ", ".join(_cpp_str(p) if isinstance(p, str) else p.cpp for p in step.message)
    stmt = f"{macro}({step.cpp}, \"{NAMESPACE}::\", kOp, \": \", {parts});"
    if step.when is not None:
        stmt = f"if ({step.when}.has_value()) {{\n  {stmt}\n}}"
    return stmt


def cpp_checks(op: OpDef) -> list[str]:
    return [cpp_check(s) for s in plan(op) if isinstance(s, Bind) or s.cpp is not None]

