"""What a run will measure: ops x cases x dtypes x implementations, decided before anything runs.

Pure functions of the specs, the request and the probed device, so a bad flag is a clear error before
a single worker starts, and every executor (inline, process, GPUs, Ray) gets the same work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from solbench.dtypes import precision, supported_on
from solbench.errors import UserError
from solbench.hardware import DeviceInfo
from solbench.job import Case, WorkUnit
from solbench.results import Record
from solbench.spec import OpSpec, empty_tensor


@dataclass(frozen=True)
class Selection:
    """The part of a run request that chooses work (the flags of `solbench run` that do so)."""

    ops: tuple[str, ...] = ("all",)
    dtypes: tuple[str, ...] | None = None
    shape: dict[str, int] | None = None
    impls: tuple[str, ...] | None = None
    baseline: str | None = None
    quick: bool = False


@dataclass(frozen=True)
class OpPlan:
    spec: OpSpec
    units: tuple[WorkUnit, ...]

    @property
    def size(self) -> int:
        """How many records the plan will produce."""
        return sum(len(u.calls) for u in self.units)


def select_ops(specs: dict[str, OpSpec], names: Iterable[str]) -> list[OpSpec]:
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise UserError("no op named (give op names, or 'all')", field="--ops")
    if names == ["all"]:
        return list(specs.values())
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise UserError(f"unknown op '{unknown[0]}' (known: {', '.join(sorted(specs))})", field="--ops")
    return [specs[n] for n in dict.fromkeys(names)]


def expand_cases(spec: OpSpec, sel: Selection, info: DeviceInfo) -> list[Case]:
    cases = list(spec.cpu_cases if info.kind == "cpu" else spec.cases)
    if sel.shape:
        overrides = {k: v for k, v in sel.shape.items() if k in spec.params}
        cases = [{**cases[0], **overrides}]
    elif sel.quick:
        cases = cases[:1]
    runnable = [d for d in _wanted_dtypes(spec, sel) if supported_on(precision(d), info.kind,
                                                                      info.compute_capability) is None]
    return [Case(spec.op, dict(c), d) for c in cases for d in runnable]


def _wanted_dtypes(spec: OpSpec, sel: Selection) -> list[str]:
    return [d for d in spec.dtypes if sel.dtypes is None or d in sel.dtypes]


def unsupported_dtypes(spec: OpSpec, sel: Selection, info: DeviceInfo) -> list[tuple[str, str]]:
    reasons = [(d, supported_on(precision(d), info.kind, info.compute_capability)) for d in _wanted_dtypes(spec, sel)]
    return [(d, r) for d, r in reasons if r]


def check_flags(specs: list[OpSpec], sel: Selection, info: DeviceInfo) -> None:
    """Flags that name things no selected op has are user errors, caught before anything runs."""
    if sel.dtypes:
        for d in sel.dtypes:
            reason = supported_on(precision(d), info.kind, info.compute_capability)
            if reason:
                raise UserError(f"dtype '{d}' cannot run on {info.name}: {reason}", field="--dtypes")
        if not any(d in s.dtypes for s in specs for d in sel.dtypes):
            raise UserError(f"no selected op has dtypes {list(sel.dtypes)}", field="--dtypes")
    if sel.shape:
        known = {p for s in specs for p in s.params}
        unknown = sorted(set(sel.shape) - known)
        if unknown:
            raise UserError(f"no selected op has parameter '{unknown[0]}' (have: {', '.join(sorted(known))})",
                            field="--shape")
        for s in specs:
            for case in expand_cases(s, sel, info)[:1]:
                problem = empty_tensor(s, case.params)
                if problem:
                    raise UserError(f"op '{s.op}': {problem}", field="--shape")
    names = {c.name for s in specs for c, _ in s.calls}
    for flag, wanted in (("--impls", sel.impls or ()), ("--baseline", (sel.baseline,) if sel.baseline else ())):
        for w in wanted:
            if w not in names:
                raise UserError(f"no selected op has an implementation named '{w}' (have: {', '.join(sorted(names))})",
                                field=flag)


def call_names(spec: OpSpec, sel: Selection, dtype: str) -> tuple[str, ...]:
    """The calls that run for one dtype of an op, baselines first, in spec order."""
    names = [c.name for c, _ in spec.calls if c.runs_for(dtype)]
    if sel.impls:
        # The reference baseline always runs: without it there is no speedup to report.
        keep = set(sel.impls) | {sel.baseline or spec.baselines[0].name}
        names = [n for n in names if n in keep]
    return tuple(names)


def plan_ops(specs: list[OpSpec], sel: Selection, info: DeviceInfo) -> list[OpPlan]:
    plans = []
    for spec in specs:
        units = tuple(WorkUnit(case, call_names(spec, sel, case.dtype)) for case in expand_cases(spec, sel, info))
        plans.append(OpPlan(spec, tuple(u for u in units if u.calls)))
    return plans


def skipped_records(plans: list[OpPlan], sel: Selection, info: DeviceInfo) -> list[Record]:
    """Records for dtypes this device cannot run, so the results file says what was left out."""
    out = []
    for p in plans:
        for dtype, reason in unsupported_dtypes(p.spec, sel, info):
            for c, kind in p.spec.calls:
                if c.name in call_names(p.spec, sel, dtype):
                    out.append(Record(op=p.spec.op, case="*", params={}, dtype=dtype, impl=c.name, kind=kind,
                                      status="skipped", message=reason))
    return out
