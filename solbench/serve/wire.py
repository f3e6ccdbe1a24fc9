"""The tensor wire formats of POST /v1/ops/{op}, and the checks of a request against its op's spec.

Two request forms: a safetensors body (inputs named as in the spec) or a small JSON document of nested
lists, for trying an op with curl. Both are checked here, in the server process, before anything is
queued: every input present and named, its rank, its dtype, each dimension against the spec's shape
formulas (which binds the op's parameters, e.g. M and N of softmax), element counts, and what the
outputs will take. A bad request is a WireError naming the field and the value (HTTP 422).

Nothing here imports torch: the halves that make tensors of the bytes, and bytes of the outputs, are
solbench/serve/tensors.py, and run in the worker process.
"""

from __future__ import annotations

import ast
import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

from solbench import expr
from solbench.dtypes import PRECISIONS, precision, supported_on
from solbench.spec import OpSpec, TensorSpec

# safetensors dtype tags <-> solbench precision names (storage types only)
ST_DTYPES = {"F64": "float64", "F32": "float32", "BF16": "bfloat16", "F16": "float16", "F8_E4M3": "float8_e4m3fn",
             "I64": "int64", "I32": "int32", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
ST_TAGS = {v: k for k, v in ST_DTYPES.items()}
MAX_HEADER = 1 << 20          # a header of a few tensors is a few hundred bytes
JSON_MAX_ELEMENTS = 1 << 16   # the JSON form is for trying things; safetensors carries real tensors
INT_DTYPES = ("int64", "int32", "int8", "uint8", "bool")


class WireError(Exception):
    """A request that does not fit its op: 422 with the field and the value."""

    def __init__(self, field_: str, message: str):
        self.field = field_
        self.message = message
        super().__init__(f"{field_}: {message}")


@dataclass(frozen=True)
class TensorMeta:
    """One input as the request gives it: dtype (None: the op's, for the JSON form) and shape."""

    dtype: str | None
    shape: tuple[int, ...]
    offset: int = 0        # where its bytes start in a safetensors body
    nbytes: int = 0


@dataclass(frozen=True)
class Decoded:
    """A request's inputs and options, parsed but not yet checked against the op."""

    form: str                                  # safetensors | json
    tensors: dict[str, TensorMeta]
    kwargs: dict[str, Any]
    dtype: str | None = None                   # asked for explicitly (kwargs or the JSON form's "dtype")
    values: dict[str, list[Any]] = field(default_factory=dict)   # JSON form: flat values per input


@dataclass(frozen=True)
class Bound:
    """A request checked against its op: the case it is, and what it will move and allocate."""

    dtype: str
    params: dict[str, Any]
    inputs: dict[str, tuple[str, tuple[int, ...]]]      # name -> (dtype, shape), spec order
    outputs: dict[str, tuple[str, tuple[int, ...]]]
    ranges: dict[str, tuple[int, int]]                  # integer inputs whose values must lie in [low, high)

    @property
    def env(self) -> dict[str, Any]:
        return {**self.params, "elem": precision(self.dtype).size}

    @property
    def input_bytes(self) -> int:
        return sum(_nbytes(d, s) for d, s in self.inputs.values())

    @property
    def output_bytes(self) -> int:
        return sum(_nbytes(d, s) for d, s in self.outputs.values())

    @property
    def device_bytes(self) -> int:
        """Inputs and outputs on the device, plus as much again as the larger of them for an
        implementation's intermediates: the estimate the memory check uses."""
        return self.input_bytes + self.output_bytes + max(self.input_bytes, self.output_bytes)


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * precision(dtype).size


# ---------------------------------------------------------------- decoding (server side, no torch)

def parse_kwargs(text: str | None, where: str) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise WireError(where, f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise WireError(where, f"expected a JSON object of parameter values, got {type(value).__name__}")
    return value


def decode_safetensors(body: bytes, kwargs: dict[str, Any]) -> Decoded:
    """The inputs a safetensors body declares, checked for consistency, without touching their bytes."""
    if len(body) < 8:
        raise WireError("body", f"not a safetensors file: {len(body)} bytes, shorter than its 8-byte header length")
    (hlen,) = struct.unpack("<Q", body[:8])
    if hlen > min(MAX_HEADER, len(body) - 8):
        raise WireError("body", f"not a safetensors file: header length {hlen} does not fit the {len(body)}-byte body")
    try:
        header = json.loads(body[8:8 + hlen])
    except ValueError as exc:
        raise WireError("body", f"safetensors header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("body", "safetensors header is not a JSON object")
    base, size = 8 + hlen, len(body) - 8 - hlen
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _st_entry(name, entry, base, size)
    return Decoded("safetensors", tensors, kwargs, _dtype_option(kwargs))


def _st_entry(name: str, entry: Any, base: int, size: int) -> TensorMeta:
    where = f"inputs.{name}"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        raise WireError(where, "safetensors entry needs dtype, shape and data_offsets")
    tag = entry["dtype"]
    if tag not in ST_DTYPES:
        raise WireError(f"{where}.dtype", f"unsupported safetensors dtype {tag!r} (supported: {', '.join(ST_DTYPES)})")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise WireError(f"{where}.shape", f"expected a list of non-negative integers, got {shape!r}")
    offsets = entry["data_offsets"]
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= size):
        raise WireError(f"{where}.data_offsets", f"{offsets!r} is not a range inside the {size}-byte data section")
    dtype = ST_DTYPES[tag]
    need = math.prod(shape) * precision(dtype).size
    if offsets[1] - offsets[0] != need:
        raise WireError(f"{where}.data_offsets", f"{offsets[1] - offsets[0]} bytes for a {tag} tensor of shape "
                                                 f"{shape}, which needs {need}")
    return TensorMeta(dtype, tuple(shape), base + offsets[0], need)


def decode_json(body: bytes, kwargs: dict[str, Any], max_elements: int = JSON_MAX_ELEMENTS) -> Decoded:
    """{"inputs": {"x": [[...], ...]}, "dtype": "float32", "kwargs": {...}}: nested lists, at most
    `max_elements` numbers in all."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise WireError("body", f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WireError("body", "expected a JSON object with 'inputs'")
    unknown = sorted(set(doc) - {"inputs", "dtype", "kwargs"})
    if unknown:
        raise WireError(unknown[0], "unknown field (allowed: inputs, dtype, kwargs)")
    inputs = doc.get("inputs")
    if not isinstance(inputs, dict) or not inputs:
        raise WireError("inputs", "expected an object of input name -> nested list of numbers")
    body_kwargs = doc.get("kwargs", {})
    if not isinstance(body_kwargs, dict):
        raise WireError("kwargs", f"expected an object, got {type(body_kwargs).__name__}")
    merged = {**kwargs, **body_kwargs}
    if "dtype" in doc:
        merged["dtype"] = doc["dtype"]
    tensors, values, count = {}, {}, 0
    for name, nested in inputs.items():
        shape, flat = _nested(nested, f"inputs.{name}")
        count += len(flat)
        if count > max_elements:
            raise WireError("inputs", f"more than {max_elements} numbers in a JSON request: send safetensors")
        tensors[name], values[name] = TensorMeta(None, shape), flat
    return Decoded("json", tensors, merged, _dtype_option(merged), values)


def _nested(value: Any, where: str) -> tuple[tuple[int, ...], list[Any]]:
    """The shape and the flat values of a rectangular nested list of numbers."""
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
        shape.append(len(probe))
        probe = probe[0] if probe else None
    flat: list[Any] = []

    def walk(v: Any, depth: int) -> None:
        if depth == len(shape):
            if isinstance(v, list) or not isinstance(v, (int, float, bool)):
                raise WireError(where, f"expected a number at depth {depth}, got {json.dumps(v)[:40]}")
            flat.append(v)
            return
        if not isinstance(v, list) or len(v) != shape[depth]:
            raise WireError(where, f"not rectangular: expected a list of {shape[depth]} at depth {depth}")
        for item in v:
            walk(item, depth + 1)
        if len(flat) > JSON_MAX_ELEMENTS:
            raise WireError("inputs", f"more than {JSON_MAX_ELEMENTS} numbers in a JSON request: send safetensors")

    walk(value, 0)
    return tuple(shape), flat


def _dtype_option(kwargs: Mapping[str, Any]) -> str | None:
    if "dtype" not in kwargs:
        return None
    name = kwargs["dtype"]
    if not isinstance(name, str) or name not in PRECISIONS and name not in ("fp32", "tf32", "bf16", "fp16", "fp8"):
        raise WireError("kwargs.dtype", f"unknown dtype {name!r} (known: {', '.join(PRECISIONS)})")
    return precision(name).name


# ---------------------------------------------------------------- checking against the spec

def bind(spec: OpSpec, req: Decoded, device_kind: str, capability: tuple[int, int] | None = None) -> Bound:
    """Check a decoded request against `spec`; the case it is. Raises WireError naming the field."""
    names = [t.name for t in spec.inputs]
    for name in req.tensors:
        if name not in names:
            raise WireError(f"inputs.{name}", f"op '{spec.op}' has no input '{name}' (inputs: {', '.join(names)})")
    missing = [n for n in names if n not in req.tensors]
    if missing:
        raise WireError(f"inputs.{missing[0]}", f"missing (op '{spec.op}' takes {', '.join(names)})")
    dtype = _case_dtype(spec, req)
    reason = supported_on(precision(dtype), device_kind, capability)
    if reason:
        raise WireError("dtype", f"{dtype} cannot run on this server's device: {reason}")
    params = _bind_params(spec, req)
    env = {**params, "elem": precision(dtype).size}
    inputs = {}
    for t in spec.inputs:
        got = req.tensors[t.name].shape
        want = _shape(t, env, f"inputs.{t.name}.shape")
        if got != want:
            raise WireError(f"inputs.{t.name}.shape", f"expected {list(want)} ([{_dims(t)}] with "
                                                      f"{_show(params)}), got {list(got)}")
        inputs[t.name] = (t.dtype_for(dtype), got)
    outputs = {t.name: (t.dtype_for(dtype), _shape(t, env, f"outputs.{t.name}.shape")) for t in spec.outputs}
    return Bound(dtype, params, inputs, outputs, _ranges(spec, dtype, env))


def _case_dtype(spec: OpSpec, req: Decoded) -> str:
    """The op dtype the request is: asked for, or read off the inputs' dtypes (the JSON form, which has
    none, defaults to float32 where the op has it)."""
    given = {t.name: req.tensors[t.name].dtype for t in spec.inputs}

    def mismatch(d: str) -> tuple[str, str, str] | None:
        for t in spec.inputs:
            want = precision(t.dtype_for(d)).storage
            if given[t.name] is not None and given[t.name] != want:
                return t.name, want, str(given[t.name])
        return None

    if req.dtype is not None:
        if req.dtype not in spec.dtypes:
            raise WireError("dtype", f"{req.dtype} is not one of op '{spec.op}''s dtypes ({', '.join(spec.dtypes)})")
        bad = mismatch(req.dtype)
        if bad:
            raise WireError(f"inputs.{bad[0]}.dtype", f"expected {bad[1]} for a {req.dtype} request, got {bad[2]}")
        return req.dtype
    candidates = [d for d in spec.dtypes if mismatch(d) is None]
    if not candidates:
        follower = next((t for t in spec.inputs if t.dtype is None), spec.inputs[0])
        near = [d for d in spec.dtypes if precision(follower.dtype_for(d)).storage == given[follower.name]]
        if not near:
            raise WireError(f"inputs.{follower.name}.dtype", f"{given[follower.name]} is not one of op "
                                                             f"'{spec.op}''s dtypes ({', '.join(spec.dtypes)})")
        bad = mismatch(near[0])
        assert bad is not None
        raise WireError(f"inputs.{bad[0]}.dtype", f"expected {bad[1]} for a {near[0]} request "
                                                  f"(as inputs.{follower.name} is), got {bad[2]}")
    named = [d for d in candidates if d in given.values()] or [d for d in candidates if d == "float32"]
    return (named or candidates)[0]


def _bind_params(spec: OpSpec, req: Decoded) -> dict[str, Any]:
    first = spec.cases[0]
    params: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key, value in req.kwargs.items():
        if key == "dtype":
            continue
        if key not in first:
            raise WireError(f"kwargs.{key}", f"op '{spec.op}' has no parameter '{key}' "
                                             f"(parameters: {', '.join(first) or 'none'}; and dtype)")
        params[key] = _param_value(key, value, first[key])
        source[key] = f"kwargs.{key}"
    for t in spec.inputs:
        shape = req.tensors[t.name].shape
        if len(shape) != len(t.shape):
            raise WireError(f"inputs.{t.name}.shape", f"expected rank {len(t.shape)} ([{_dims(t)}]), got {list(shape)}")
        for i, (f, n) in enumerate(zip(t.shape, shape)):
            name = _bare_name(f)
            if name is None or name not in first:
                continue
            where = f"inputs.{t.name}.shape[{i}]"
            if name in params and params[name] != n:
                raise WireError(where, f"{name} = {n} here, but {source[name]} says {name} = {params[name]}")
            params.setdefault(name, n)
            source.setdefault(name, where)
    for name, example in first.items():
        if name in params:
            continue
        if isinstance(example, bool):
            params[name] = example      # a switch (causal, neox): the first case's setting unless asked
        else:
            raise WireError(f"kwargs.{name}", f"op '{spec.op}''s parameter {name} is not fixed by the input "
                                              f"shapes: give it in the kwargs")
    return {name: params[name] for name in first}


def _param_value(key: str, value: Any, example: Any) -> Any:
    if isinstance(example, bool):
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise WireError(f"kwargs.{key}", f"expected true or false, got {json.dumps(value)}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WireError(f"kwargs.{key}", f"expected a non-negative integer, got {json.dumps(value)}")
    return value


def _bare_name(f: expr.Formula) -> str | None:
    body = f.tree.body
    return body.id if isinstance(body, ast.Name) else None


def _shape(t: TensorSpec, env: Mapping[str, Any], where: str) -> tuple[int, ...]:
    try:
        dims = tuple(f.evaluate(env) for f in t.shape)
    except expr.FormulaError as exc:
        raise WireError(where, str(exc)) from None
    if any(d < 0 or d != int(d) for d in dims):
        raise WireError(where, f"[{_dims(t)}] gives {list(dims)} for {_show(env)}: not a shape")
    return tuple(int(d) for d in dims)


def _ranges(spec: OpSpec, dtype: str, env: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Integer inputs drawn from randint(low, high) in the spec are indices: values outside the range
    would make a kernel read out of bounds, so the worker checks them."""
    out = {}
    for t in spec.inputs:
        if t.init == "randint" and t.dtype_for(dtype) in INT_DTYPES:
            out[t.name] = (int(t.low.evaluate(env)), int(t.high.evaluate(env)))
    return out


def _dims(t: TensorSpec) -> str:
    return ", ".join(f.source for f in t.shape)


def _show(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != "elem") or "no parameters"


def describe_rules(spec: OpSpec) -> dict[str, Any]:
    """An op's inputs, outputs and parameters as GET /v1/ops lists them."""
    def tensor(t: TensorSpec) -> dict[str, Any]:
        dtype: Any = t.dtype if t.dtype is not None else "the op's dtype"
        return {"name": t.name, "shape": [f.source for f in t.shape], "dtype": dtype}

    bound = {_bare_name(f) for t in spec.inputs for f in t.shape} - {None}
    params = {k: {"type": "bool" if isinstance(v, bool) else "int", "from": _param_source(k, v, bound)}
              for k, v in spec.cases[0].items()}
    return {"dtypes": list(spec.dtypes), "params": params, "inputs": [tensor(t) for t in spec.inputs],
            "outputs": [tensor(t) for t in spec.outputs]}


def _param_source(name: str, example: Any, bound: set[str | None]) -> str:
    if name in bound:
        return "the input shapes"
    return f"kwargs (default {json.dumps(example)})" if isinstance(example, bool) else "kwargs (required)"
