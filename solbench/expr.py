"""A small, safe formula language for FLOP and byte counts in op specs.

Formulas are parsed with Python's own parser (`ast`) and then walked by a whitelist evaluator:
numbers, parameter names, + - * / // % **, unary minus, parentheses and a handful of functions.
Nothing is ever passed to `eval`, so a spec cannot run code.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import Callable, Mapping

from solbench.dtypes import element_size

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "ceil": math.ceil,
    "floor": math.floor,
    "bytes": element_size,  # bytes('bfloat16') == 2: element size of a dtype name
}

# Exponents beyond this are a typo, not a tensor size; refusing them keeps `10**10**10` from hanging.
_MAX_EXPONENT = 64


class FormulaError(ValueError):
    """A formula that does not parse or names something it may not."""


@dataclass(frozen=True)
class Formula:
    """A parsed formula: the source text and the names it reads."""

    source: str
    tree: ast.Expression
    names: frozenset[str]

    def evaluate(self, env: Mapping[str, float | int | str]) -> float:
        return _eval(self.tree.body, env, self.source)


def parse(source: str | int | float) -> Formula:
    """Parse a formula; raise FormulaError naming the offending token."""
    text = str(source).strip()
    if not text:
        raise FormulaError("empty formula")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"cannot parse '{text}': {exc.msg}") from None
    names: set[str] = set()
    # A called function's own name (min, max, ...) is not a parameter the formula reads.
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        _check_node(node, text, names, id(node) in callees)
    return Formula(text, tree, frozenset(names))


def _check_node(node: ast.AST, text: str, names: set[str], callee: bool = False) -> None:
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Constant, ast.Name,
               ast.Call, ast.Load, *_BINARY)
    if not isinstance(node, allowed):
        raise FormulaError(f"'{_token(node, text)}' is not allowed in a formula")
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
        raise FormulaError(f"constant {node.value!r} is not allowed")
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        raise FormulaError(f"constant {node.value!r} is not allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise FormulaError(f"unknown function '{_token(node.func, text)}' "
                               f"(allowed: {', '.join(sorted(_FUNCTIONS))})")
        if node.keywords:
            raise FormulaError(f"keyword arguments are not allowed in '{_token(node, text)}'")
    elif isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise FormulaError(f"name '{node.id}' is not allowed")
        if not callee:
            names.add(node.id)


def _token(node: ast.AST, text: str) -> str:
    segment = ast.get_source_segment(text, node)
    return segment if segment else type(node).__name__


def _eval(node: ast.AST, env: Mapping[str, float | int | str], text: str) -> float:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise FormulaError(f"unknown name '{node.id}' (known: {', '.join(sorted(map(str, env)))})")
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env, text), _eval(node.right, env, text)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise FormulaError(f"exponent {right} too large in '{_token(node, text)}'")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise FormulaError(f"division by zero in '{_token(node, text)}'") from None
        except TypeError:
            raise FormulaError(f"'{_token(node, text)}' mixes text and numbers") from None
    if isinstance(node, ast.Call):
        args = [_eval(arg, env, text) for arg in node.args]
        try:
            return _FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError, KeyError) as exc:
            raise FormulaError(f"bad call '{_token(node, text)}': {exc}") from None
    raise FormulaError(f"'{_token(node, text)}' is not allowed in a formula")
