"""The ops a server offers: built once at start-up from the built-in specs (plus the operator's
--specs folders), never from anything a client sends.

Which implementation answers a request is decided here, per op and dtype: on CUDA the op's kernels_ext
implementation (the one named `auto` where the spec has it: kernels_ext's own choice by shape; else the
first that runs for the dtype), on a CPU the op's eager PyTorch baseline. A client names an op; the
callable behind it is the spec's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solbench.job import SpecSource
from solbench.serve import wire
from solbench.spec import CallSpec, OpSpec

KERNELS_PREFIX = "kernels_ext"


@dataclass(frozen=True)
class Choice:
    """The call that serves one (op, dtype) on this server's device."""

    call: CallSpec
    kind: str                  # impl | baseline
    note: str = ""             # why this one (e.g. the kernel library did not load)

    @property
    def label(self) -> str:
        return f"{self.call.name} ({self.kind}: {self.call.fn})"


@dataclass(frozen=True)
class ServedOp:
    spec: OpSpec
    test_only: bool = False

    @property
    def name(self) -> str:
        return self.spec.op

    def choose(self, dtype: str, device_kind: str, library_ok: bool = True) -> Choice | None:
        if device_kind == "cuda":
            impls = [c for c in self.spec.impls if c.runs_for(dtype)
                     and (library_ok or not c.fn.startswith(KERNELS_PREFIX))]
            if impls:
                best = next((c for c in impls if c.name == "auto"), impls[0])
                return Choice(best, "impl")
        baselines = [c for c in self.spec.baselines
                     if c.runs_for(dtype) and (device_kind == "cuda" or c.device is None)]
        eager = [c for c in baselines if not c.compile] or baselines
        if not eager:
            return None
        note = ""
        if device_kind == "cuda" and not library_ok and any(c.fn.startswith(KERNELS_PREFIX) for c in self.spec.impls):
            note = "the kernel library did not load: the eager baseline answers"
        elif device_kind == "cuda":
            note = "no CUDA implementation for this dtype: the eager baseline answers"
        return Choice(eager[0], "baseline", note)

    def describe(self, device_kind: str, library_ok: bool) -> dict[str, Any]:
        served = {}
        for d in self.spec.dtypes:
            c = self.choose(d, device_kind, library_ok)
            served[d] = c.label if c else None
        return {"name": self.name, "summary": self.spec.summary, **wire.describe_rules(self.spec),
                "implementation": served, "test_only": self.test_only}


@dataclass(frozen=True)
class OpLibrary:
    ops: dict[str, ServedOp]

    def get(self, name: str) -> ServedOp | None:
        return self.ops.get(name)

    def sources(self) -> tuple[tuple[SpecSource, bool], ...]:
        """The specs as text (with their test-only flag), for the worker process to rebuild this library."""
        return tuple((SpecSource.of(o.spec), o.test_only) for o in self.ops.values())

    @classmethod
    def from_sources(cls, sources: tuple[tuple[SpecSource, bool], ...]) -> "OpLibrary":
        ops = {}
        for src, test_only in sources:
            spec = src.load()
            ops[spec.op] = ServedOp(spec, test_only)
        return cls(ops)


def build_library(specs: dict[str, OpSpec], test_ops: bool = False) -> OpLibrary:
    """The server's ops: every spec, plus the fault-injection ops when the operator asked for them."""
    ops = {name: ServedOp(s) for name, s in specs.items()}
    if test_ops:
        from solbench.serve import faults

        for s in faults.fault_specs():
            ops[s.op] = ServedOp(s, test_only=True)
    return OpLibrary(ops)
