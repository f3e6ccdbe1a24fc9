"""The small expression language of the op table: shape dims (`D // 2`) and requirements
(`N > 0 or prod(B) == 0`), evaluated in Python and written out as C++, so one declared
condition is enforced by the wrapper and by the compiled op alike.

Grammar (a subset of Python's, parsed with `ast`, never eval'd):
  names        dims bound by shapes (N), variadic dims (only inside prod: prod(B)), and
               the op's int / float / bool arguments
  literals     integers, floats, True, False
  operators    + - * // % (on dims, which are never negative, // and C++'s / agree),
               unary -, == != < <= > >= (not chained), and or not, parentheses
  functions    numel(t) dim(t) itemsize(t) (t a tensor argument), defined(t) (an optional
               tensor argument is not None), prod(B) (product of a variadic dim; 1 if empty)
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class ExprError(ValueError):
    """An expression outside the grammar; the message names the offending part."""


_BINOPS: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", lambda a, b: a + b),
    ast.Sub: ("-", lambda a, b: a - b),
    ast.Mult: ("*", lambda a, b: a * b),
    ast.FloorDiv: ("/", lambda a, b: a // b),
    ast.Mod: ("%", lambda a, b: a % b),
}
_COMPARE: dict[type, tuple[str, Callable[[Any, Any], bool]]] = {
    ast.Eq: ("==", lambda a, b: a == b),
    ast.NotEq: ("!=", lambda a, b: a != b),
    ast.Lt: ("<", lambda a, b: a < b),
    ast.LtE: ("<=", lambda a, b: a <= b),
    ast.Gt: (">", lambda a, b: a > b),
    ast.GtE: (">=", lambda a, b: a >= b),
}
TENSOR_FUNCTIONS = ("numel", "dim", "itemsize", "defined")
FUNCTIONS = (*TENSOR_FUNCTIONS, "prod")


@dataclass(frozen=True)
class Expr:
    text: str
    tree: ast.expr
    names: frozenset[str]           # plain names: dims and scalar arguments
    tensors: frozenset[str]         # arguments of numel / dim / itemsize / defined
    variadics: frozenset[str]       # arguments of prod
    fn: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]  # compiled: (values, tensors)


def parse(text: str) -> Expr:
    try:
        tree = ast.parse(str(text).strip(), mode="eval").body
    except SyntaxError as err:
        raise ExprError(f"cannot parse {text!r}: {err.msg}") from None
    names: set[str] = set()
    tensors: set[str] = set()
    variadics: set[str] = set()
    _validate(tree, text, names, tensors, variadics)
    return Expr(str(text).strip(), tree, frozenset(names), frozenset(tensors),
                frozenset(variadics), _compile(tree))


def _validate(node: ast.expr, text: str, names: set[str], tensors: set[str],
              variadics: set[str]) -> None:
    def bad(what: str) -> ExprError:
        return ExprError(f"{text!r}: {what} is not allowed (see kernels_ext/expr.py)")

    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (bool, int, float)):
            raise bad(f"the constant {node.value!r}")
    elif isinstance(node, ast.Name):
        names.add(node.id)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise bad(f"the operator {type(node.op).__name__}")
        _validate(node.left, text, names, tensors, variadics)
        _validate(node.right, text, names, tensors, variadics)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.Not)):
            raise bad(f"the operator {type(node.op).__name__}")
        _validate(node.operand, text, names, tensors, variadics)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _validate(v, text, names, tensors, variadics)
    elif isinstance(node, ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            raise bad("a chained or unknown comparison")
        _validate(node.left, text, names, tensors, variadics)
        _validate(node.comparators[0], text, names, tensors, variadics)
    elif isinstance(node, ast.Call):
        fn = node.func.id if isinstance(node.func, ast.Name) else None
        if fn not in FUNCTIONS or len(node.args) != 1 or node.keywords \
                or not isinstance(node.args[0], ast.Name):
            raise bad(f"the call {ast.unparse(node)!r} (functions: {', '.join(FUNCTIONS)}, "
                      "each of one argument name)")
        (variadics if fn == "prod" else tensors).add(node.args[0].id)
    else:
        raise bad(f"{ast.unparse(node)!r}")


def evaluate(expr: Expr, values: Mapping[str, Any], tensors: Mapping[str, Any]) -> Any:
    """The value of expr; `values` holds dims, variadic dims (tuples) and scalars,
    `tensors` the tensor arguments (None for an absent optional one)."""
    return expr.fn(values, tensors)


Compiled = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]


def _compile(node: ast.expr) -> Compiled:
    """A closure per node, built once: the wrappers evaluate requirements on every call."""
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda v, t: value
    if isinstance(node, ast.Name):
        name = node.id
        return lambda v, t: v[name]
    if isinstance(node, ast.BinOp):
        op, left, right = _BINOPS[type(node.op)][1], _compile(node.left), _compile(node.right)
        return lambda v, t: op(left(v, t), right(v, t))
    if isinstance(node, ast.UnaryOp):
        inner = _compile(node.operand)
        if isinstance(node.op, ast.USub):
            return lambda v, t: -inner(v, t)
        return lambda v, t: not inner(v, t)
    if isinstance(node, ast.BoolOp):
        parts = [_compile(p) for p in node.values]
        if isinstance(node.op, ast.And):
            return lambda v, t: all(p(v, t) for p in parts)
        return lambda v, t: any(p(v, t) for p in parts)
    if isinstance(node, ast.Compare):
        cmp = _COMPARE[type(node.ops[0])][1]
        left, right = _compile(node.left), _compile(node.comparators[0])
        return lambda v, t: cmp(left(v, t), right(v, t))
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    arg = node.args[0].id  # type: ignore[attr-defined]
    return {
        "prod": lambda v, t: math.prod(v[arg]),
        "defined": lambda v, t: t[arg] is not None,
        "numel": lambda v, t: t[arg].numel(),
        "dim": lambda v, t: t[arg].dim(),
        "itemsize": lambda v, t: t[arg].element_size(),
    }[node.func.id]


@dataclass(frozen=True)
class CppNames:
    """How the generated C++ spells what an expression names."""

    value: Callable[[str], str]          # a dim or scalar argument
    variadic: Callable[[str], str]       # a variadic dim (a c10::IntArrayRef)
    tensor: Callable[[str], str]         # a tensor argument (an at::Tensor expression)
    optional: Callable[[str], str]       # an optional tensor (a std::optional<at::Tensor>)


def to_cpp(expr: Expr, names: CppNames) -> str:
    return _cpp(expr.tree, names)


def _cpp(node: ast.expr, n: CppNames) -> str:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            return "true" if node.value else "false"
        if isinstance(node.value, int):
            return f"int64_t{{{node.value}}}"
        return repr(float(node.value))
    if isinstance(node, ast.Name):
        return n.value(node.id)
    if isinstance(node, ast.BinOp):
        return f"({_cpp(node.left, n)} {_BINOPS[type(node.op)][0]} {_cpp(node.right, n)})"
    if isinstance(node, ast.UnaryOp):
        op = "-" if isinstance(node.op, ast.USub) else "!"
        return f"({op}{_cpp(node.operand, n)})"
    if isinstance(node, ast.BoolOp):
        op = " && " if isinstance(node.op, ast.And) else " || "
        return "(" + op.join(_cpp(v, n) for v in node.values) + ")"
    if isinstance(node, ast.Compare):
        op = _COMPARE[type(node.ops[0])][0]
        return f"({_cpp(node.left, n)} {op} {_cpp(node.comparators[0], n)})"
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    arg = node.args[0].id  # type: ignore[attr-defined]
    fn = node.func.id
    if fn == "prod":
        return f"c10::multiply_integers({n.variadic(arg)})"
    if fn == "defined":
        return f"{n.optional(arg)}.has_value()"
    method = {"numel": "numel", "dim": "dim", "itemsize": "element_size"}[fn]
    return f"static_cast<int64_t>({n.tensor(arg)}.{method}())"
