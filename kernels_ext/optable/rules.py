"""The rules an entry must follow beyond its fields' syntax: every dim it uses is bound
by a required tensor, requirements and messages name what exists, and map / rows entries
fit what the generic bindings assume."""

from __future__ import annotations

from dataclasses import dataclass

from kernels_ext import expr as ex
from kernels_ext.optable.model import KERNEL_DTYPES, OpDef, Where, bound_symbols, message_fields


@dataclass(frozen=True)
class _Names:
    """What an entry's expressions may name."""

    kinds: dict[str, str]        # every dim name used by a shape -> "name" / "variadic"
    dims: frozenset[str]         # dims bound by a required tensor
    variadics: frozenset[str]    # variadic dims bound by a required tensor
    numeric: frozenset[str]      # required int / float / bool arguments
    ints: frozenset[str]         # required int arguments (an output length may use them)
    tensors: frozenset[str]

    def check(self, where: Where, field: str, e: ex.Expr, scalars: frozenset[str]) -> None:
        """Every name of e is a bound dim or one of `scalars`."""
        for n in sorted(e.names - self.dims - scalars):
            raise where.error(field, f"{e.text!r}: {n!r} {self._why(n, scalars)}")
        for n in sorted(e.variadics - self.variadics):
            raise where.error(field, f"{e.text!r}: prod({n}) needs a variadic dim *{n} bound "
                                     "by a required tensor")
        for n in sorted(e.tensors - self.tensors):
            raise where.error(field, f"{e.text!r}: {n!r} is not a tensor argument")

    def _why(self, n: str, scalars: frozenset[str]) -> str:
        if n in self.variadics:
            return f"is a variadic dim: use prod({n})"
        if n in self.kinds:
            return "is bound only by an optional tensor"
        if scalars is self.numeric:
            return "is not a dim bound by a required tensor or an int/float/bool argument"
        if scalars is self.ints:
            return "is not a dim bound by a required tensor or a required int argument"
        return "is not a dim bound by a required tensor"


def _names(where: Where, op: OpDef) -> _Names:
    kinds: dict[str, str] = {}
    for t in op.tensors:
        for d in t.shape.dims:
            if d.kind in ("name", "variadic") and kinds.setdefault(d.name, d.kind) != d.kind:
                raise where.error(f"args.{t.name}.shape",
                                  f"{d.name!r} is used both as a dim and as a variadic *dim")
    clash = sorted(set(kinds) & {a.name for a in op.args})
    if clash:
        raise where.error("args", f"{clash[0]!r} names both an argument and a dim")
    bound = bound_symbols(op)
    return _Names(
        kinds=kinds,
        dims=frozenset(n for n, k in kinds.items() if k == "name" and n in bound),
        variadics=frozenset(n for n, k in kinds.items() if k == "variadic" and n in bound),
        numeric=frozenset(s.name for s in op.scalars
                          if s.type in ("int", "float", "bool") and not s.optional),
        ints=frozenset(s.name for s in op.scalars if s.type == "int" and not s.optional),
        tensors=frozenset(t.name for t in op.tensors))


def check_symbols(where: Where, op: OpDef) -> None:
    """Every name a shape, an output or a requirement uses exists where it is used."""
    names = _names(where, op)
    bound = bound_symbols(op)
    for t in op.tensors:
        for d in t.shape.dims:
            if d.kind == "expr":
                names.check(where, f"args.{t.name}.shape", d.expr, frozenset())
            if t.optional and d.kind in ("name", "variadic") and d.name not in bound:
                raise where.error(f"args.{t.name}.shape",
                                  f"{d.text!r}: an optional tensor can only use dims that a "
                                  "required tensor binds")
    for o in op.outputs:
        for d in o.shape.dims if o.shape is not None else ():
            if d.kind == "variadic" and d.name not in names.variadics:
                raise where.error(f"returns.{o.name}.shape", f"{d.text!r} is not a variadic dim "
                                                             "bound by a required tensor")
            if d.kind in ("name", "expr"):
                # An output's length may be an int argument's value (histogram: [bins]).
                names.check(where, f"returns.{o.name}.shape", d.expr, names.ints)
    scalars = {s.name: s for s in op.scalars}
    for i, r in enumerate(op.requires):
        names.check(where, f"requires[{i}].check", r.expr, names.numeric)
        for n in message_fields(r.error):
            if n not in names.dims and (n not in scalars or scalars[n].optional):
                raise where.error(f"requires[{i}].error", f"{{{n}}} is neither a bound dim nor "
                                                          "a required scalar argument")


def check_template(where: Where, op: OpDef) -> None:
    """What the generic bindings (map, rows) assume about an entry."""
    if op.impl == "custom":
        return
    _check_generic_args(where, op)
    if op.impl == "map":
        _check_map(where, op)
    else:
        _check_rows(where, op)


def _check_generic_args(where: Where, op: OpDef) -> None:
    for t in op.tensors:
        if t.mutable or not t.contiguous:
            raise where.error(f"args.{t.name}", f"impl {op.impl} needs contiguous, non-mutable "
                                                "tensors (use impl: custom)")
        allowed = t.dtypes or op.arg(t.dtype_of).dtypes  # type: ignore[union-attr]
        if allowed is None or not set(allowed) <= set(KERNEL_DTYPES):
            raise where.error(f"args.{t.name}", f"impl {op.impl} passes only "
                                                f"{', '.join(KERNEL_DTYPES)} to kernels")
    for s in op.scalars:
        if s.optional or s.type == "ScalarType":
            raise where.error(f"args.{s.name}", f"impl {op.impl} cannot pass an optional or "
                                                "ScalarType argument (use impl: custom)")


def _check_map(where: Where, op: OpDef) -> None:
    first = op.tensors[0]
    dims = first.shape.dims
    if first is not op.reference or len(dims) != 1 or dims[0].kind != "variadic":
        raise where.error(f"args.{first.name}.shape", "impl map: the first tensor's shape must "
                                                      "be one variadic dim, e.g. \"[*S]\"")
    for t in op.tensors[1:]:
        if t.optional or t.shape.text != first.shape.text or t.dtype_of != first.name:
            raise where.error(f"args.{t.name}", f"impl map: every tensor is required, of shape "
                                                f"{first.shape.text} and dtype {first.name}")
    if len(op.outputs) != 1 or op.outputs[0].like != first.name:
        raise where.error("returns", f"impl map: one output, like {first.name}")


def _check_rows(where: Where, op: OpDef) -> None:
    ref = op.reference
    dims = ref.shape.dims
    if ref is not op.tensors[0] or len(dims) != 2 or dims[0].kind not in ("variadic", "any") \
            or dims[1].kind != "name":
        raise where.error(f"args.{ref.name}.shape", "impl rows: the first tensor's shape must "
                                                    "be \"[*B, N]\" (rows x N)")
    if not op.outputs:
        raise where.error("returns", "impl rows: at least one output")
    for o in op.outputs:
        if o.shape is not None and any(d.kind == "dynamic" for d in o.shape.dims):
            raise where.error(f"returns.{o.name}.shape", "impl rows allocates its outputs "
                                                         "before the launch: a '?' length "
                                                         "needs impl: custom")
        dtype = o.dtype if o.like is None else o.like
        if dtype not in KERNEL_DTYPES and dtype not in {t.name for t in op.tensors}:
            raise where.error(f"returns.{o.name}.dtype", f"impl rows writes "
                                                         f"{', '.join(KERNEL_DTYPES)} only")
