"""Reads one ops.yaml into OpDef records: every field checked, every error naming the
file, the op, the field and the value (OpTableError). Cross-field rules are in rules.py."""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Any

import yaml

from kernels_ext import expr as ex
from kernels_ext.optable.model import (
    CPP_KEYWORDS,
    DEFAULT_CUSTOM_NAMESPACE,
    DTYPE_SETS,
    DTYPES,
    IDENTIFIER,
    IMPLS,
    NO_DEFAULT,
    OP_NAME,
    QUALIFIED_NAME,
    RESERVED_NAMES,
    SCALAR_TYPES,
    Arg,
    Dim,
    OpDef,
    OpTableError,
    Output,
    Requirement,
    ScalarArg,
    Shape,
    TensorArg,
    Where,
    rel,
)
from kernels_ext.optable.rules import check_symbols, check_template


def load_file(path: Path) -> list[OpDef]:
    try:
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as err:
        raise OpTableError(f"{rel(path)}: not valid YAML: {err}") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise OpTableError(f"{rel(path)}: expected a mapping of op name -> entry, got "
                           f"{type(data).__name__}")
    return [parse_op(str(name), entry, path) for name, entry in data.items()]


_OP_KEYS = {"doc", "impl", "args", "returns", "requires"}
_TENSOR_KEYS = {"type", "shape", "dtypes", "dtype", "contiguous", "mutable", "doc"}
_SCALAR_KEYS = {"type", "default", "choices", "doc"}
_OUTPUT_KEYS = {"like", "shape", "dtype"}
_REQUIRE_KEYS = {"check", "error"}


def _mapping(where: Where, field: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.error(field, f"expected a mapping, got {value!r}")
    unknown = sorted(set(map(str, value)) - allowed)
    if unknown:
        raise where.error(f"{field}.{unknown[0]}",
                          f"unknown field (allowed: {', '.join(sorted(allowed))})")
    return value


def parse_op(name: str, entry: Any, path: Path) -> OpDef:
    where = Where(path, name)
    if not OP_NAME.match(name) or keyword.iskeyword(name) or name in CPP_KEYWORDS \
            or name in RESERVED_NAMES:
        raise OpTableError(f"{rel(path)}: op name {name!r} must be lower_snake_case and no "
                           "Python or C++ keyword")
    entry = _mapping(where, "entry", entry, _OP_KEYS)
    for key in ("doc", "impl", "args", "returns"):
        if key not in entry:
            raise where.error(key, "missing")
    doc = entry["doc"]
    if not isinstance(doc, str) or not doc.strip():
        raise where.error("doc", "must be a non-empty string")
    impl, function = _parse_impl(where, name, entry["impl"])
    args = _parse_args(where, entry["args"])
    outputs = _parse_outputs(where, entry["returns"], args)
    requires = _parse_requires(where, entry.get("requires", []))
    op = OpDef(name, path.parent.name, doc.strip(), impl, args, outputs, requires, path,
               function)
    check_symbols(where, op)
    check_template(where, op)
    return op


def _parse_impl(where: Where, name: str, raw: Any) -> tuple[str, str]:
    """map | rows | custom (sk::impl::<op>) | {custom: qualified::function}."""
    if isinstance(raw, dict) and set(raw) == {"custom"}:
        function = str(raw["custom"])
        if not QUALIFIED_NAME.match(function):
            raise where.error("impl.custom", f"expected a qualified C++ function name such as "
                                             f"sk::impl::{name}, got {function!r}")
        return "custom", function
    if raw not in IMPLS:
        raise where.error("impl", f"must be one of {', '.join(IMPLS)} or {{custom: "
                                  f"qualified::function}}, got {raw!r}")
    return raw, f"{DEFAULT_CUSTOM_NAMESPACE}::{name}" if raw == "custom" else ""


def _parse_args(where: Where, raw: Any) -> tuple[Arg, ...]:
    if not isinstance(raw, dict) or not raw:
        raise where.error("args", "must be a non-empty mapping of argument name -> spec")
    args: list[Arg] = []
    for name, spec in raw.items():
        name = str(name)
        field = f"args.{name}"
        if not IDENTIFIER.match(name) or keyword.iskeyword(name) or name in CPP_KEYWORDS \
                or name in RESERVED_NAMES or name in DTYPES \
                or name.startswith(("dim_", "dims_", "out_", "shape_")):
            raise where.error(field, "not a usable argument name (an identifier that is no "
                                     "Python/C++ keyword and not reserved by the generator)")
        if not isinstance(spec, dict) or "type" not in spec:
            raise where.error(field, "expected a mapping with a 'type'")
        typ = str(spec["type"])
        optional = typ.endswith("?")
        base = typ.rstrip("?")
        if base == "Tensor":
            args.append(_parse_tensor(where, field, name, optional, spec, args))
        elif base in SCALAR_TYPES:
            args.append(_parse_scalar(where, field, name, base, optional, spec))
        else:
            kinds = ", ".join(SCALAR_TYPES)
            raise where.error(f"{field}.type",
                              f"must be Tensor, Tensor?, {kinds} (or with ?), got {typ!r}")
    defaults = [isinstance(a, ScalarArg) and a.default is not NO_DEFAULT
                or isinstance(a, TensorArg) and a.optional for a in args]
    for i in range(1, len(args)):
        if defaults[i - 1] and not defaults[i]:
            raise where.error(f"args.{args[i].name}", "an argument without a default follows "
                                                      "one with a default")
    if not any(isinstance(a, TensorArg) and not a.optional for a in args):
        raise where.error("args", "needs at least one required Tensor argument")
    return tuple(args)


def _dtype_list(where: Where, field: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        if value in DTYPE_SETS:
            return DTYPE_SETS[value]
        value = [value]
    if not isinstance(value, list) or not value:
        raise where.error(field, f"expected a dtype, a list of dtypes or one of "
                                 f"{', '.join(DTYPE_SETS)}, got {value!r}")
    for d in value:
        if d not in DTYPES:
            raise where.error(field, f"unknown dtype {d!r} (known: {', '.join(DTYPES)})")
    return tuple(value)


def _parse_tensor(where: Where, field: str, name: str, optional: bool, spec: dict,
                  earlier: list[Arg]) -> TensorArg:
    _mapping(where, field, spec, _TENSOR_KEYS)
    if "shape" not in spec:
        raise where.error(f"{field}.shape", "missing (use \"[...]\" for any shape)")
    shape = parse_shape(where, f"{field}.shape", spec["shape"], output=False)
    dtypes = dtype_of = None
    if ("dtypes" in spec) == ("dtype" in spec):
        raise where.error(field, "give exactly one of 'dtypes' (allowed dtypes) and 'dtype' "
                                 "(the name of an earlier tensor argument it must match)")
    if "dtypes" in spec:
        dtypes = _dtype_list(where, f"{field}.dtypes", spec["dtypes"])
    else:
        dtype_of = str(spec["dtype"])
        ref = next((a for a in earlier if a.name == dtype_of), None)
        if not isinstance(ref, TensorArg) or ref.optional:
            raise where.error(f"{field}.dtype", f"{dtype_of!r} is not an earlier required "
                                                "tensor argument")
    contiguous = spec.get("contiguous", True)
    mutable = spec.get("mutable", False)
    if not isinstance(contiguous, bool) or not isinstance(mutable, bool):
        raise where.error(field, "contiguous and mutable must be true or false")
    return TensorArg(name, optional, shape, dtypes, dtype_of, contiguous, mutable,
                     str(spec.get("doc", "")))


def _parse_scalar(where: Where, field: str, name: str, typ: str, optional: bool,
                  spec: dict) -> ScalarArg:
    _mapping(where, field, spec, _SCALAR_KEYS)
    choices = None
    if "choices" in spec and typ == "ScalarType":
        choices = _dtype_list(where, f"{field}.choices", spec["choices"])
    elif "choices" in spec:
        if typ != "str" or not isinstance(spec["choices"], list) or not spec["choices"] \
                or not all(isinstance(c, str) and re.match(r"^[\w.-]+$", c)
                           for c in spec["choices"]):
            raise where.error(f"{field}.choices", "only a str or ScalarType argument has "
                                                  "choices: a list of plain words")
        choices = tuple(spec["choices"])
    elif typ == "str":
        raise where.error(field, "a str argument needs 'choices' (the values it accepts)")
    if typ == "ScalarType" and spec.get("default") is not None:
        raise where.error(f"{field}.default", "a ScalarType argument has no default (make it "
                                              "ScalarType? to default to None)")
    default = spec.get("default", None if optional else NO_DEFAULT)
    if default is not NO_DEFAULT and default is not None:
        ok = {"float": isinstance(default, (int, float)) and not isinstance(default, bool),
              "int": isinstance(default, int) and not isinstance(default, bool),
              "bool": isinstance(default, bool),
              "str": isinstance(default, str) and default in (choices or ()),
              "ScalarType": False}[typ]
        if not ok:
            raise where.error(f"{field}.default", f"{default!r} is not a valid {typ}"
                                                  + (f" (one of {list(choices)})" if choices
                                                     else ""))
        if typ == "float":
            default = float(default)
    elif default is None and not optional:
        raise where.error(f"{field}.default", f"None needs an optional type ({typ}?)")
    return ScalarArg(name, typ, optional, default, choices, str(spec.get("doc", "")))


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def parse_shape(where: Where, field: str, text: Any, output: bool) -> Shape:
    if not isinstance(text, str) or not (text.strip().startswith("[") and
                                         text.strip().endswith("]")):
        raise where.error(field, f"expected a quoted shape like \"[*B, N]\", got {text!r}")
    inner = text.strip()[1:-1].strip()
    dims: list[Dim] = []
    for part in _split_top_level(inner) if inner else []:
        if not part:
            raise where.error(field, f"empty entry in {text!r}")
        if part == "...":
            dims.append(Dim("any", part))
        elif part == "?":
            # A length only the op itself learns (how many boxes NMS keeps): the impl
            # allocates such an output, and the fake asks for an unbacked size.
            if not output:
                raise where.error(field, "'?' (a length known only after the op has run) is "
                                         "for output shapes")
            dims.append(Dim("dynamic", part))
        elif part.startswith("*"):
            if not IDENTIFIER.match(part[1:]):
                raise where.error(field, f"{part!r}: a variadic entry is *Name")
            dims.append(Dim("variadic", part))
        else:
            try:
                e = ex.parse(part)
            except ex.ExprError as err:
                raise where.error(field, str(err)) from None
            kind = "name" if IDENTIFIER.match(part) else "expr"
            if e.tensors:
                raise where.error(field, f"{part!r}: a dim cannot call tensor functions")
            dims.append(Dim(kind, part, e))
    shape = Shape("[" + ", ".join(d.text for d in dims) + "]", tuple(dims))
    variadic = [d for d in dims if d.kind in ("variadic", "any")]
    if len(variadic) > 1:
        raise where.error(field, f"{text!r} has more than one variadic entry")
    if output and any(d.kind == "any" for d in dims):
        raise where.error(field, "an output shape cannot contain '...' (name it: *B)")
    return shape


def _parse_outputs(where: Where, raw: Any, args: tuple[Arg, ...]) -> tuple[Output, ...]:
    if raw is None or raw == {}:
        return ()
    if not isinstance(raw, dict):
        raise where.error("returns", "expected a mapping of output name -> {like: x} or "
                                     "{shape: ..., dtype: ...}")
    tensors = {a.name: a for a in args if isinstance(a, TensorArg)}
    outs = []
    for name, spec in raw.items():
        name = str(name)
        field = f"returns.{name}"
        if not IDENTIFIER.match(name) or name in {a.name for a in args}:
            raise where.error(field, "an output name must be an identifier that is no "
                                     "argument's name")
        _mapping(where, field, spec, _OUTPUT_KEYS)
        if "like" in spec:
            if set(spec) != {"like"}:
                raise where.error(field, "'like' stands alone (same shape and dtype)")
            like = str(spec["like"])
            if like not in tensors or tensors[like].optional:
                raise where.error(f"{field}.like", f"{like!r} is not a required tensor argument")
            outs.append(Output(name, like, None, None))
            continue
        if "shape" not in spec or "dtype" not in spec:
            raise where.error(field, "give {like: <tensor>} or both shape and dtype")
        shape = parse_shape(where, f"{field}.shape", spec["shape"], output=True)
        dtype = str(spec["dtype"])
        dtype_args = {a.name for a in args if isinstance(a, ScalarArg)
                      and a.type == "ScalarType" and not a.optional}
        if dtype not in DTYPES and dtype not in dtype_args and (
                dtype not in tensors or tensors[dtype].optional):
            raise where.error(f"{field}.dtype", f"{dtype!r} is neither a dtype, a required "
                                                "tensor argument nor a ScalarType argument")
        outs.append(Output(name, None, shape, dtype))
    return tuple(outs)


def _parse_requires(where: Where, raw: Any) -> tuple[Requirement, ...]:
    if not isinstance(raw, list):
        raise where.error("requires", "expected a list of {check: ..., error: ...}")
    reqs = []
    for i, item in enumerate(raw):
        field = f"requires[{i}]"
        _mapping(where, field, item, _REQUIRE_KEYS)
        if "check" not in item or not isinstance(item.get("error"), str):
            raise where.error(field, "needs 'check' (an expression) and 'error' (a message)")
        try:
            e = ex.parse(str(item["check"]))
        except ex.ExprError as err:
            raise where.error(f"{field}.check", str(err)) from None
        reqs.append(Requirement(e, item["error"]))
    return tuple(reqs)
