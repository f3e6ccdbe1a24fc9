"""What crosses from the planner to a worker and back: cases, jobs and the typed events a worker emits.

A job carries the spec's *content* and its hash, never a path, so it can run in another process or
on another host, and a record can say exactly which spec it measured. Everything here is plain data
that pickles.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from solbench.dtypes import precision
from solbench.hardware import DeviceInfo
from solbench.measure import TimingConfig
from solbench.peaks import Peaks
from solbench.results import Record
from solbench.spec import OpSpec, parse_text


@dataclass(frozen=True)
class Case:
    """One point of an op's sweep: its parameters and the dtype it runs in."""

    op: str
    params: dict[str, Any]
    dtype: str

    @property
    def label(self) -> str:
        return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in self.params.items())

    def env(self) -> dict[str, Any]:
        """The names a spec's formulas may use: the parameters plus `elem` (bytes per element)."""
        return {**self.params, "elem": precision(self.dtype).size}


@dataclass(frozen=True)
class SpecSource:
    """A spec as text: parsed again wherever the job runs, with the file name kept for messages."""

    text: str
    name: str                    # the file it came from, as errors should name it
    sha256: str

    @classmethod
    def of(cls, spec: OpSpec) -> "SpecSource":
        return cls(spec.source_text, str(spec.path), spec.sha256)

    def load(self) -> OpSpec:
        return parse_text(self.text, Path(self.name))


def spec_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class WorkUnit:
    """One case and the implementations to run on it, in order."""

    case: Case
    calls: tuple[str, ...]


@dataclass(frozen=True)
class WorkerJob:
    spec: SpecSource
    units: tuple[WorkUnit, ...]
    device: str                     # "cpu" or "cuda:N"
    info: DeviceInfo
    peaks: Peaks
    timing: TimingConfig
    seed: int = 0

    @property
    def op(self) -> str:
        return self.units[0].case.op if self.units else ""

    def without(self, done: set[tuple[str, str, str]]) -> "WorkerJob":
        """The same job minus the (case label, dtype, impl) triples already accounted for."""
        units = []
        for u in self.units:
            calls = tuple(c for c in u.calls if (u.case.label, u.case.dtype, c) not in done)
            if calls:
                units.append(WorkUnit(u.case, calls))
        return WorkerJob(self.spec, tuple(units), self.device, self.info, self.peaks, self.timing, self.seed)


@dataclass(frozen=True)
class ProbeJob:
    """Find out which device `device` (auto | cpu | cuda | cuda:N) is, and measure CPU ceilings there;
    then check `specs` against it (solbench/preflight.py: callables import, tolerances reject zeros)."""

    device: str
    cache_dir: Path
    specs: tuple[SpecSource, ...] = ()
    seed: int = 0
    dtypes: tuple[str, ...] | None = None      # only these dtypes' tolerances (--dtypes)


@dataclass(frozen=True)
class Probe:
    info: DeviceInfo
    device: str                          # resolved: cpu or cuda:N
    cpu_peaks: Peaks | None = None


# ---------------------------------------------------------------- events, worker -> caller

@dataclass(frozen=True)
class CallStarted:
    """A call is about to run: if the worker dies now, this is the culprit."""

    case: str
    dtype: str
    impl: str


@dataclass(frozen=True)
class RecordReady:
    record: Record


@dataclass(frozen=True)
class ProbeDone:
    probe: Probe


@dataclass(frozen=True)
class JobDone:
    pass


@dataclass(frozen=True)
class JobFailed:
    """The worker raised outside any call (a bug or a broken environment): nothing more will come."""

    message: str
    user_error: bool = False       # a UserError: the caller reports it as bad input (exit 2)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerLost:
    """The worker process died (signal, exit) or was killed for running past its timeout."""

    reason: str
    timed_out: bool = False


Event = Union[CallStarted, RecordReady, ProbeDone, JobDone, JobFailed, WorkerLost]
