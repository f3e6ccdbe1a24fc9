"""The op table's records (an entry of csrc/<family>/ops.yaml as an OpDef) and the
vocabulary the loader, the checks and the generator share. Pure Python."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels_ext import expr as ex

CSRC = Path(__file__).resolve().parents[1] / "csrc"
TABLE_GLOB = "*/ops.yaml"
NAMESPACE = "solbench_kernels"

# The dtypes a table may name (torch's names), and the named sets.
DTYPES = ("float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2",
          "int64", "int32", "int16", "int8", "uint8", "bool")
DTYPE_SETS = {"float": ("float32", "bfloat16", "float16"), "half": ("bfloat16", "float16")}
# What the map and rows templates can hand a launcher (sk::DType in common/dtype.h).
KERNEL_DTYPES = DTYPE_SETS["float"]
SCALAR_TYPES = ("float", "int", "bool", "str", "ScalarType")
IMPLS = ("map", "rows", "custom")
# The longest row the rows template launches (kernels index a row with int).
MAX_ROW_LENGTH = 2**31 - 1

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUALIFIED_NAME = re.compile(r"^[A-Za-z_]\w*(::[A-Za-z_]\w*)+$")
DEFAULT_CUSTOM_NAMESPACE = "sk::impl"
OP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
CPP_KEYWORDS = frozenset(
    "alignas alignof and asm auto bitand bitor bool break case catch char class compl const "
    "constexpr continue decltype default delete do double else enum explicit export extern "
    "false float for friend goto if inline int long mutable namespace new noexcept not "
    "nullptr operator or private protected public register return short signed sizeof "
    "static struct switch template this throw true try typedef typeid typename union "
    "unsigned using virtual void volatile while xor".split())
# Names the generated C++ uses for itself.
RESERVED_NAMES = frozenset({"kOp", "guard", "stream", "io", "m", "at", "c10", "sk", "std", "torch"})


class OpTableError(ValueError):
    """The table is malformed; the message names the file, the op, the field and the value."""


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class Dim:
    """One entry of a shape pattern."""

    kind: str                   # "name" (bind or match), "expr" (match), "variadic", "any",
                                # "dynamic" (an output length the op learns as it runs: "?")
    text: str
    expr: ex.Expr | None = None  # kind "expr"; kind "name" also has one (the bare name)

    @property
    def name(self) -> str:
        return self.text.lstrip("*")


@dataclass(frozen=True)
class Shape:
    """A symbolic shape such as [*B, N], [..., N], [M, K], [N // 2, 4] or []."""

    text: str
    dims: tuple[Dim, ...]

    @property
    def variadic_index(self) -> int | None:
        for i, d in enumerate(self.dims):
            if d.kind in ("variadic", "any"):
                return i
        return None

    @property
    def fixed_rank(self) -> int:
        """Dims other than the one variadic entry."""
        return len(self.dims) - (self.variadic_index is not None)

    def position(self, i: int) -> int:
        """Tensor dim of pattern entry i: from the front before the variadic entry, from
        the back (negative) after it."""
        v = self.variadic_index
        if v is None or i < v:
            return i
        return i - len(self.dims)


@dataclass(frozen=True)
class TensorArg:
    name: str
    optional: bool
    shape: Shape
    dtypes: tuple[str, ...] | None   # allowed dtypes, or None when dtype_of is set
    dtype_of: str | None             # must have the dtype of this (earlier) tensor
    contiguous: bool
    mutable: bool
    doc: str

    @property
    def schema_type(self) -> str:
        return "Tensor?" if self.optional else "Tensor"


@dataclass(frozen=True)
class ScalarArg:
    name: str
    type: str                        # float int bool str ScalarType
    optional: bool
    default: Any                     # NO_DEFAULT, None (optional) or a value
    choices: tuple[str, ...] | None  # str: its values; ScalarType: dtype names
    doc: str

    @property
    def schema_type(self) -> str:
        return self.type + ("?" if self.optional else "")


Arg = TensorArg | ScalarArg


@dataclass(frozen=True)
class Output:
    name: str
    like: str | None         # same shape and dtype as this tensor argument
    shape: Shape | None      # else this shape (names bound by the inputs) ...
    dtype: str | None        # ... and this dtype: a dtype name or a tensor argument's name


@dataclass(frozen=True)
class Requirement:
    expr: ex.Expr
    error: str               # message; {name} placeholders are dims or scalar arguments


@dataclass(frozen=True)
class OpDef:
    name: str
    family: str
    doc: str
    impl: str                # map rows custom
    args: tuple[Arg, ...]
    outputs: tuple[Output, ...]
    requires: tuple[Requirement, ...]
    source: Path
    function: str = ""       # custom: the qualified C++ function the wrapper calls

    @property
    def tensors(self) -> tuple[TensorArg, ...]:
        return tuple(a for a in self.args if isinstance(a, TensorArg))

    @property
    def scalars(self) -> tuple[ScalarArg, ...]:
        return tuple(a for a in self.args if isinstance(a, ScalarArg))

    @property
    def reference(self) -> TensorArg:
        """The first required tensor: the device (and rows) every other tensor follows."""
        return next(t for t in self.tensors if not t.optional)

    def arg(self, name: str) -> Arg:
        return next(a for a in self.args if a.name == name)

    def schema(self) -> str:
        """The TORCH_LIBRARY schema, e.g. rmsnorm(Tensor x, Tensor weight, float eps=1e-06)
        -> Tensor."""
        parts = []
        alias = iter("abcdefghijklmnopqrstuvwxyz")
        for a in self.args:
            typ = a.schema_type
            if isinstance(a, TensorArg) and a.mutable:
                typ = f"Tensor({next(alias)}!)"
            text = f"{typ} {a.name}"
            if isinstance(a, ScalarArg) and a.default is not NO_DEFAULT:
                text += "=" + schema_literal(a.default)
            elif isinstance(a, TensorArg) and a.optional:
                text += "=None"
            parts.append(text)
        n = len(self.outputs)
        ret = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
        return f"{self.name}({', '.join(parts)}) -> {ret}"


def schema_literal(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return "'" + value + "'"
    return repr(value)


def rel(path: Path) -> str:
    """A path as the errors show it: relative to the repository when inside it."""
    try:
        return str(path.relative_to(CSRC.parent.parent))
    except ValueError:
        return str(path)


class Where:
    """Builds the errors of one entry: they name the file, the op and the field."""

    def __init__(self, path: Path, op: str) -> None:
        self.path = path
        self.op = op

    def error(self, field: str, message: str) -> OpTableError:
        return OpTableError(f"{rel(self.path)}: {self.op}.{field}: {message}")


def bound_symbols(op: OpDef) -> dict[str, tuple[str, int]]:
    """Dims (and variadic dims) the required tensors bind: name -> (tensor, entry index),
    the first occurrence in argument order."""
    bound: dict[str, tuple[str, int]] = {}
    for t in op.tensors:
        if t.optional:
            continue
        for i, d in enumerate(t.shape.dims):
            if d.kind in ("name", "variadic") and d.name not in bound:
                bound[d.name] = (t.name, i)
    return bound


def message_fields(text: str) -> list[str]:
    return re.findall(r"\{(\w+)\}", text)
