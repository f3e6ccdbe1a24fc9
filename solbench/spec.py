"""Op specs: `specs/ops/*.yaml` -> validated OpSpec records.

Validation is strict and happens before anything runs: an unknown key, a missing field, a formula
naming an unknown parameter or a tolerance for an undeclared dtype is a UserError naming the file
and the field. See `specs/ops/softmax.yaml` for a commented example.

This module is over 400 lines because the format and its validator belong together: each field's rule
sits next to the record it fills, so every error can name the field the user wrote.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from solbench import expr
from solbench.dtypes import PRECISIONS, precision
from solbench.errors import UserError
from solbench.paths import specs_root

SPECS_ENV = "SOLBENCH_SPECS"  # extra spec folders, separated like PATH

_TOP_KEYS = {"op", "summary", "cases", "sweep", "cpu_cases", "dtypes", "inputs", "outputs", "flops",
             "bytes", "compute", "reference", "baselines", "impls", "tolerance", "inplace", "notes", "audit"}
# `audit`: why a formula differs from what Nsight Compute counts at the large case, by design (a
# compulsory-traffic byte count of a compute-bound op, a scratch buffer left out on purpose).
_AUDIT_KEYS = {"bytes", "flops"}
_REQUIRED = ("op", "summary", "dtypes", "inputs", "outputs", "flops", "bytes", "compute",
             "reference", "baselines", "tolerance")
_INPUT_KEYS = {"shape", "init", "dtype", "low", "high", "scale"}
_OUTPUT_KEYS = {"shape", "dtype"}
_CALL_KEYS = {"fn", "kwargs", "compile", "device", "dtype", "dtypes", "note", "audit"}
_TOL_KEYS = {"atol", "rtol", "norm"}
_COMPILE_KEYS = {"mode", "dynamic", "fullgraph", "backend", "options"}
INITS = ("randn", "uniform", "randint")   # or "module:function", a generator of the input
UNITS = ("simt", "tensor")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[expr.Formula, ...]
    dtype: str | dict[str, str] | None   # None: the case's dtype; a dict maps case dtype -> dtype
    init: str = "randn"
    low: expr.Formula = expr.parse(-1.0)    # uniform/randint bounds: formulas, e.g. high: V
    high: expr.Formula = expr.parse(1.0)
    scale: float = 1.0

    def dtype_for(self, case_dtype: str) -> str:
        if self.dtype is None:
            return case_dtype
        if isinstance(self.dtype, str):
            return self.dtype
        return self.dtype.get(case_dtype, self.dtype.get("default", case_dtype))

    def shape_for(self, env: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(int(f.evaluate(env)) for f in self.shape)

    @property
    def generator(self) -> str | None:
        """`module:function` when the input comes from a generator function instead of a distribution."""
        return self.init if ":" in self.init else None


@dataclass(frozen=True)
class CallSpec:
    """A callable to run: `module:attr` or a dotted path, with constant or formula kwargs."""

    name: str
    fn: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    compile: bool = False
    compile_options: dict[str, Any] = field(default_factory=dict)   # torch.compile(fn, **compile_options)
    device: str | None = None          # "cuda": needs a CUDA device (skipped on CPU)
    dtype: str | None = None           # reference only: compute in this dtype
    dtypes: tuple[str, ...] | None = None   # only these case dtypes run this call (None: all)
    note: str = ""
    audit: bool = True                 # false: `solbench audit` leaves it out unless --impls names it

    def runs_for(self, dtype: str) -> bool:
        return self.dtypes is None or dtype in self.dtypes

    def resolved_kwargs(self, env: Mapping[str, Any]) -> dict[str, Any]:
        return {k: (v.evaluate(env) if isinstance(v, expr.Formula) else v) for k, v in self.kwargs.items()}


@dataclass(frozen=True)
class Tolerance:
    atol: float | None = None
    rtol: float | None = None
    norm: float | None = None   # bound on ||out - ref|| / ||ref||


@dataclass(frozen=True)
class OpSpec:
    op: str
    summary: str
    path: Path
    cases: tuple[dict[str, Any], ...]
    cpu_cases: tuple[dict[str, Any], ...]
    dtypes: tuple[str, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    flops: expr.Formula
    bytes: expr.Formula | None          # None: count fused bytes from inputs and outputs
    compute: dict[str, str]             # case dtype (or "default") -> simt | tensor
    reference: CallSpec
    baselines: tuple[CallSpec, ...]
    impls: tuple[CallSpec, ...]
    tolerance: dict[str, Tolerance]
    inplace: bool = False
    notes: str = ""
    audit: dict[str, str] = field(default_factory=dict)   # formula (bytes | flops) -> why the counters differ
    source_text: str = ""               # the YAML as read: jobs carry it (never the path) to workers
    sha256: str = ""                    # of source_text: records say which spec they measured

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.cases[0])

    @property
    def calls(self) -> tuple[tuple[CallSpec, str], ...]:
        """Baselines then impls, each with its kind."""
        return tuple((c, "baseline") for c in self.baselines) + tuple((c, "impl") for c in self.impls)

    def fused_bytes(self, dtype: str, env: Mapping[str, Any]) -> float:
        """`bytes: auto`: each input read once and each output written once, at each tensor's own size."""
        return float(_tensor_bytes(self.inputs + self.outputs, dtype, env))

    def output_bytes(self, dtype: str, env: Mapping[str, Any]) -> int:
        """What the outputs take, each at its own size: what a call writes at the least."""
        return _tensor_bytes(self.outputs, dtype, env)

    def bytes_for(self, dtype: str, env: Mapping[str, Any]) -> float:
        return float(self.bytes.evaluate(env)) if self.bytes is not None else self.fused_bytes(dtype, env)

    def compute_unit(self, dtype: str) -> str:
        return self.compute.get(dtype, self.compute.get("default", "simt"))


def _tensor_bytes(tensors: Iterable[Any], dtype: str, env: Mapping[str, Any]) -> int:
    return sum(math.prod(t.shape_for(env)) * precision(t.dtype_for(dtype)).size for t in tensors)


# ---------------------------------------------------------------- loading

def spec_dirs(extra: Iterable[Path] = ()) -> list[Path]:
    """Built-in specs first, then $SOLBENCH_SPECS, then --specs folders (later ones win on a name clash)."""
    dirs = [specs_root() / "ops"]
    env = os.environ.get(SPECS_ENV, "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs += list(extra)
    return dirs


def load_all(extra_dirs: Iterable[Path] = (),
             on_replace: Callable[[str, Path, Path], None] | None = None) -> dict[str, OpSpec]:
    """Every spec by op name. A later folder's spec replaces an earlier one of the same op (a user's
    `softmax` over the built-in one) and `on_replace(op, old path, new path)` is told, so the caller
    can say so; two files of one folder naming the same op are an error."""
    specs: dict[str, OpSpec] = {}
    for folder in spec_dirs(extra_dirs):
        if not folder.is_dir():
            raise UserError("spec folder does not exist", file=folder)
        here: dict[str, Path] = {}
        for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
            spec = load_file(path)
            if spec.op in here:
                raise UserError(f"op '{spec.op}' is also defined by {here[spec.op]}", file=path, field="op")
            here[spec.op] = path
            if spec.op in specs and on_replace is not None:
                on_replace(spec.op, specs[spec.op].path, path)
            specs[spec.op] = spec
    return specs


def load_file(path: Path) -> OpSpec:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror}", file=path) from None
    return parse_text(text, path)


def parse_text(text: str, path: Path) -> OpSpec:
    """A spec from its YAML text; `path` is only what errors and records call it."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise UserError(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}", file=path) from None
    spec = parse_spec(raw, path)
    return dataclasses.replace(spec, source_text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def parse_spec(raw: Any, path: Path) -> OpSpec:
    p = _Parser(path)
    if not isinstance(raw, dict):
        raise UserError("a spec must be a mapping of fields", file=path)
    p.keys(raw, _TOP_KEYS, "")
    for key in _REQUIRED:
        if key not in raw:
            raise UserError("missing required field", file=path, field=key)
    if "cases" not in raw and "sweep" not in raw:
        raise UserError("missing required field (or 'sweep')", file=path, field="cases")
    cases = p.cases(raw)
    params = set(cases[0])
    cpu_cases = p.case_list(raw["cpu_cases"], "cpu_cases", params) if "cpu_cases" in raw else cases
    dtypes = p.dtypes(raw["dtypes"])
    names = params | {"elem"}
    inputs = p.tensors(raw["inputs"], "inputs", _INPUT_KEYS, names)
    outputs = p.tensors(raw["outputs"], "outputs", _OUTPUT_KEYS, names)
    bytes_formula = None if raw["bytes"] == "auto" else p.formula(raw["bytes"], "bytes", names)
    spec = OpSpec(
        op=p.string(raw["op"], "op"),
        summary=p.string(raw["summary"], "summary"),
        path=path,
        cases=cases,
        cpu_cases=cpu_cases,
        dtypes=dtypes,
        inputs=inputs,
        outputs=outputs,
        flops=p.formula(raw["flops"], "flops", names),
        bytes=bytes_formula,
        compute=p.compute(raw["compute"], dtypes),
        reference=p.call(raw["reference"], "reference", "reference", params),
        baselines=p.calls(raw["baselines"], "baselines", params),
        impls=p.calls(raw.get("impls") or {}, "impls", params),
        tolerance=p.tolerances(raw["tolerance"], dtypes),
        inplace=bool(raw.get("inplace", False)),
        notes=str(raw.get("notes", "")),
        audit=p.audit(raw.get("audit") or {}),
    )
    for field_, cases_ in (("cases" if "cases" in raw else "sweep", spec.cases), ("cpu_cases", spec.cpu_cases)):
        for i, case in enumerate(cases_):
            problem = empty_tensor(spec, case)
            if problem:
                raise UserError(problem, file=path, field=f"{field_}[{i}]")
    if not spec.baselines:
        raise UserError("at least one baseline is needed", file=path, field="baselines")
    clash = {c.name for c in spec.baselines} & {c.name for c in spec.impls}
    if clash:
        raise UserError(f"names used both as baseline and impl: {sorted(clash)}", file=path, field="impls")
    for c, kind in spec.calls:
        stray = [d for d in c.dtypes or () if d not in spec.dtypes]
        if stray:
            raise UserError(f"'{stray[0]}' is not one of this op's dtypes {list(spec.dtypes)}", file=path,
                            field=f"{kind}s.{c.name}.dtypes")
    return spec


def empty_tensor(spec: OpSpec, case: Mapping[str, Any]) -> str | None:
    """Why `case` cannot be run (a tensor with a dimension below 1, or a shape that does not evaluate), or None."""
    env = {**case, "elem": 4}
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for t in tensors:
            try:
                shape = [int(f.evaluate(env)) for f in t.shape]
            except (expr.FormulaError, ArithmeticError, TypeError, ValueError) as exc:
                return f"the shape of {kind} '{t.name}' cannot be evaluated for {_case_text(case)}: {exc}"
            if any(d < 1 for d in shape):
                return (f"{_case_text(case)} makes {kind} '{t.name}' empty (shape {shape}): every dimension "
                        f"must be at least 1")
    return None


def _case_text(case: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in case.items())


class _Parser:
    """Field validators that know which file they are reading, so every error names it."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, field_: str, message: str) -> UserError:
        return UserError(message, file=self.path, field=field_)

    def keys(self, mapping: Mapping, allowed: set[str], where: str) -> None:
        unknown = sorted(set(mapping) - allowed)
        if unknown:
            label = f"{where}.{unknown[0]}" if where else unknown[0]
            raise self.fail(label, f"unknown key '{unknown[0]}' (allowed: {', '.join(sorted(allowed))})")

    def audit(self, value: Any) -> dict[str, str]:
        if not isinstance(value, dict):
            raise self.fail("audit", f"expected a mapping of bytes/flops to a reason, got {value!r}")
        self.keys(value, _AUDIT_KEYS, "audit")
        return {k: self.string(v, f"audit.{k}") for k, v in value.items()}

    def string(self, value: Any, field_: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(field_, f"expected a non-empty string, got {value!r}")
        return value.strip()

    def formula(self, value: Any, field_: str, names: set[str]) -> expr.Formula:
        try:
            f = expr.parse(value)
        except expr.FormulaError as exc:
            raise self.fail(field_, str(exc)) from None
        unknown = sorted(f.names - names)
        if unknown:
            raise self.fail(field_, f"unknown parameter '{unknown[0]}' in '{f.source}' "
                                    f"(parameters: {', '.join(sorted(names))})")
        return f

    def case_list(self, value: Any, field_: str, params: set[str] | None) -> tuple[dict[str, Any], ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(field_, "expected a non-empty list of cases like {M: 1024, N: 1024}")
        cases = []
        for i, case in enumerate(value):
            if not isinstance(case, dict) or not case:
                raise self.fail(f"{field_}[{i}]", f"expected a mapping of parameter values, got {case!r}")
            for k, v in case.items():
                if not isinstance(v, (int, bool)) or (isinstance(v, int) and not isinstance(v, bool) and v < 0):
                    raise self.fail(f"{field_}[{i}].{k}", f"expected a non-negative integer or a boolean, got {v!r}")
            want = params if params is not None else set(cases[0]) if cases else set(case)
            if set(case) != want:
                raise self.fail(f"{field_}[{i}]", f"parameters {sorted(case)} differ from {sorted(want)}")
            cases.append(dict(case))
        return tuple(cases)

    def cases(self, raw: Mapping) -> tuple[dict[str, Any], ...]:
        if "cases" in raw and "sweep" in raw:
            raise self.fail("sweep", "give either 'cases' (a list) or 'sweep' (a product), not both")
        if "cases" in raw:
            return self.case_list(raw["cases"], "cases", None)
        sweep = raw["sweep"]
        if not isinstance(sweep, dict) or not sweep:
            raise self.fail("sweep", "expected a mapping of parameter -> list of values")
        lists = {k: v if isinstance(v, list) else [v] for k, v in sweep.items()}
        combos = [dict(zip(lists, values)) for values in itertools.product(*lists.values())]
        return self.case_list(combos, "sweep", None)

    def dtypes(self, value: Any, field_: str = "dtypes") -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(field_, f"expected a non-empty list of dtypes, got {value!r}")
        out = []
        for i, name in enumerate(value):
            try:
                out.append(precision(str(name)).name)
            except UserError as exc:
                raise self.fail(f"{field_}[{i}]", exc.detail) from None
        return tuple(out)

    def dtype_field(self, value: Any, field_: str) -> str | dict[str, str]:
        names = value.values() if isinstance(value, dict) else [value]
        for name in names:
            if str(name) not in PRECISIONS:
                raise self.fail(field_, f"unknown dtype '{name}' (known: {', '.join(PRECISIONS)})")
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else str(value)

    def tensors(self, value: Any, field_: str, allowed: set[str], names: set[str]) -> tuple[TensorSpec, ...]:
        if not isinstance(value, dict) or not value:
            raise self.fail(field_, "expected a mapping of tensor name -> {shape: [...]}")
        out = []
        for name, t in value.items():
            where = f"{field_}.{name}"
            if not isinstance(t, dict):
                raise self.fail(where, f"expected a mapping with 'shape', got {t!r}")
            self.keys(t, allowed, where)
            if "shape" not in t or not isinstance(t["shape"], list):
                raise self.fail(f"{where}.shape", "expected a list of dimension formulas, e.g. [M, N]")
            shape = tuple(self.formula(d, f"{where}.shape[{i}]", names) for i, d in enumerate(t["shape"]))
            init = t.get("init", "randn")
            if not isinstance(init, str) or (init not in INITS and ":" not in init):
                raise self.fail(f"{where}.init", f"unknown init {init!r} (allowed: {', '.join(INITS)}, "
                                                 f"or 'module:function' naming a generator)")
            dtype = self.dtype_field(t["dtype"], f"{where}.dtype") if "dtype" in t else None
            low = self.formula(t.get("low", -1.0), f"{where}.low", names)
            high = self.formula(t.get("high", 1.0), f"{where}.high", names)
            if not low.names and not high.names and not low.evaluate({}) < high.evaluate({}):
                raise self.fail(f"{where}.low", f"need low < high, got {low.source} and {high.source}")
            out.append(TensorSpec(str(name), shape, dtype, init, low, high, float(t.get("scale", 1.0))))
        return tuple(out)

    def call(self, value: Any, field_: str, name: str, params: set[str]) -> CallSpec:
        if isinstance(value, str):
            value = {"fn": value}
        if not isinstance(value, dict) or "fn" not in value:
            raise self.fail(field_, f"expected 'module:function' or a mapping with 'fn', got {value!r}")
        self.keys(value, _CALL_KEYS, field_)
        kwargs = value.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise self.fail(f"{field_}.kwargs", f"expected a mapping, got {kwargs!r}")
        # A kwarg written "=expr" is a formula over the case's parameters (e.g. is_causal: "=causal").
        parsed = {k: self.formula(v[1:], f"{field_}.kwargs.{k}", params)
                  if isinstance(v, str) and v.startswith("=") else v for k, v in kwargs.items()}
        device = value.get("device")
        if device not in (None, "cuda"):
            raise self.fail(f"{field_}.device", f"expected 'cuda' or nothing, got {device!r}")
        dtype = value.get("dtype")
        if dtype is not None and str(dtype) not in PRECISIONS:
            raise self.fail(f"{field_}.dtype", f"unknown dtype '{dtype}'")
        compile_, options = self.compile_field(value.get("compile", False), f"{field_}.compile")
        return CallSpec(name, self.string(value["fn"], f"{field_}.fn"), parsed, compile_, options,
                        device, dtype, self.call_dtypes(value.get("dtypes"), f"{field_}.dtypes"),
                        str(value.get("note", "")), self.flag(value.get("audit", True), f"{field_}.audit"))

    def flag(self, value: Any, field_: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(field_, f"expected true or false, got {value!r}")
        return value

    def compile_field(self, value: Any, field_: str) -> tuple[bool, dict[str, Any]]:
        """`compile: true`, or a mapping of torch.compile keyword arguments (mode, dynamic, fullgraph)."""
        if isinstance(value, bool):
            return value, {}
        if not isinstance(value, dict):
            raise self.fail(field_, f"expected true/false or a mapping of torch.compile options, got {value!r}")
        self.keys(value, _COMPILE_KEYS, field_)
        return True, dict(value)

    def call_dtypes(self, value: Any, field_: str) -> tuple[str, ...] | None:
        return None if value is None else self.dtypes(value, field_)

    def calls(self, value: Any, field_: str, params: set[str]) -> tuple[CallSpec, ...]:
        if not isinstance(value, dict):
            raise self.fail(field_, f"expected a mapping of name -> callable, got {value!r}")
        return tuple(self.call(v, f"{field_}.{k}", str(k), params) for k, v in value.items())

    def compute(self, value: Any, dtypes: tuple[str, ...]) -> dict[str, str]:
        mapping = {"default": value} if isinstance(value, str) else value
        if not isinstance(mapping, dict):
            raise self.fail("compute", f"expected simt, tensor or a mapping dtype -> unit, got {value!r}")
        out = {}
        for k, unit in mapping.items():
            if unit not in UNITS:
                raise self.fail(f"compute.{k}", f"unknown compute unit '{unit}' (allowed: simt, tensor)")
            if k != "default" and k not in dtypes:
                raise self.fail(f"compute.{k}", f"'{k}' is not one of this op's dtypes {list(dtypes)}")
            out[str(k)] = unit
        return out

    def tolerances(self, value: Any, dtypes: tuple[str, ...]) -> dict[str, Tolerance]:
        if not isinstance(value, dict):
            raise self.fail("tolerance", "expected a mapping dtype -> {atol, rtol} or {norm}")
        out = {}
        for k, tol in value.items():
            where = f"tolerance.{k}"
            try:
                key = precision(str(k)).name
            except UserError:
                key = str(k)
            if key not in dtypes:
                raise self.fail(where, f"'{k}' is not one of this op's dtypes {list(dtypes)}")
            if not isinstance(tol, dict) or not tol:
                raise self.fail(where, "expected {atol: ..., rtol: ...} or {norm: ...}")
            self.keys(tol, _TOL_KEYS, where)
            vals = {}
            for name, v in tol.items():
                try:
                    vals[name] = float(v)
                except (TypeError, ValueError):
                    raise self.fail(f"{where}.{name}", f"expected a number, got {v!r}") from None
                if vals[name] < 0:
                    raise self.fail(f"{where}.{name}", f"must not be negative, got {v!r}")
            if ("atol" in vals) != ("rtol" in vals):
                raise self.fail(where, "give atol and rtol together")
            out[key] = Tolerance(**vals)
        missing = [d for d in dtypes if d not in out]
        if missing:
            raise self.fail("tolerance", f"no tolerance for dtype '{missing[0]}'")
        return out
