"""--resume FILE: what an earlier (or killed) run already measured is not measured again.

A record of FILE is reused when this run would make the same one: the same key (op, case, dtype,
impl), the same spec text (`spec_sha256`) and the same kind of device (`device_fingerprint`).
`error` records are measured again: a lost worker, node or timeout says nothing about the kernel.
Records of FILE that this run does not plan (other ops, other dtypes) are kept as they are, so
resuming a part of a sweep never drops the rest of it. A run writes its results file after every
record (pipeline.execute), which is what makes a killed run resumable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from solbench.errors import UserError
from solbench.job import WorkUnit
from solbench.plan import OpPlan
from solbench.results import Record, Run, load_run

Key = tuple[str, str, str, str]     # (op, case, dtype, impl)
NOT_REUSED = frozenset({"error"})
# Flags whose change makes an old record measure something else than a new one would.
_SAME_METHOD = (("timer", "--timer"), ("peaks", "--peaks"))


@dataclass(frozen=True)
class Resumed:
    prior: Run                       # FILE's run: its id and creation time carry over to the output
    reused: tuple[Record, ...]       # planned records not measured again
    kept: tuple[Record, ...]         # records of FILE this run does not plan

    def describe(self) -> str:
        return f"{len(self.reused)} records reused" + (f", {len(self.kept)} other records kept" if self.kept else "")


def load(path: Path, config: dict[str, Any]) -> Run:
    """FILE as a Run, refused when it was measured with another timer or other peaks than `config`'s."""
    try:
        prior = load_run(path)
    except UserError as exc:
        raise UserError(exc.detail, file=path, field="--resume") from None
    for key, flag in _SAME_METHOD:
        # A results file's `peaks` is the source used; what was asked for is `peaks_requested` when they differ.
        before, now = prior.config.get(f"{key}_requested", prior.config.get(key)), config.get(key)
        if before is not None and before != now:
            raise UserError(f"{path} was measured with {flag} {before} and this run asks for {flag} {now}: its "
                            f"records would not be comparable with the new ones (rerun with {flag} {before}, or "
                            f"without --resume)", field="--resume")
    return prior


def planned_keys(plans: Iterable[OpPlan]) -> list[Key]:
    """Every record the plans will produce, in order."""
    return [(p.spec.op, u.case.label, u.case.dtype, impl) for p in plans for u in p.units for impl in u.calls]


def split(plans: list[OpPlan], prior: Run, fingerprints: set[str]) -> tuple[list[OpPlan], Resumed]:
    """The plans minus what `prior` already has for these specs and devices, and what it has."""
    hashes = {p.spec.op: p.spec.sha256 for p in plans}
    usable = {r.key: r for r in prior.records
              if r.status not in NOT_REUSED and r.spec_sha256 is not None and r.spec_sha256 == hashes.get(r.op)
              and r.device_fingerprint in fingerprints}
    keys = planned_keys(plans)
    planned = set(keys)
    reused = tuple(usable[k] for k in keys if k in usable)
    kept = tuple(r for r in prior.records if r.key not in planned)
    return [_trim(p, usable) for p in plans], Resumed(prior, reused, kept)


def _trim(p: OpPlan, done: dict[Key, Record]) -> OpPlan:
    units = []
    for u in p.units:
        calls = tuple(c for c in u.calls if (p.spec.op, u.case.label, u.case.dtype, c) not in done)
        if calls:
            units.append(WorkUnit(u.case, calls))
    return OpPlan(p.spec, tuple(units))
