"""The executor seam, and the supervision every executor shares: a lost worker costs one record.

A worker announces each call (`CallStarted`) before running it. When the worker is lost (a signal, an
exit, a timeout), the announced call is the culprit: it gets an `error` record saying what happened,
and the calls that remain run in a fresh worker. A worker lost before it announced anything cannot
name a culprit: everything left gets the reason, and the run goes on with the next job.
"""

from __future__ import annotations

from typing import Callable, Iterator, Protocol

from solbench.job import (CallStarted, Event, JobDone, JobFailed, Probe, ProbeJob, RecordReady, WorkerJob,
                          WorkerLost)
from solbench.results import Record

Launch = Callable[[WorkerJob], Iterator[Event]]
Key = tuple[str, str, str]          # (case label, dtype, impl)


class Executor(Protocol):
    def run(self, job: WorkerJob) -> Iterator[Event]:
        """Every event of the job, a record for every planned call among them."""
        ...

    def probe(self, job: ProbeJob) -> Probe:
        ...


def supervise(job: WorkerJob, launch: Launch) -> Iterator[Event]:
    """Run `job` through `launch` (one worker per call of it), relaunching after a lost worker."""
    done: set[Key] = set()
    remaining = job
    while remaining.units:
        outcome = yield from _one_worker(remaining, launch, done)
        if outcome is None:
            return
        culprit, reason = outcome
        if culprit is None:
            yield from _fail_remaining(remaining, done, f"worker stopped before this ran: {reason}")
            return
        yield RecordReady(_error_record(job, culprit, f"{reason} while this ran; a fresh worker ran the "
                                                      f"calls after it"))
        done.add(culprit)
        remaining = job.without(done)


def _one_worker(job: WorkerJob, launch: Launch, done: set[Key]) -> Iterator[Event]:
    """Relay one worker's records; returns None when it finished, else (culprit or None, reason)."""
    current: Key | None = None
    for event in launch(job):
        if isinstance(event, CallStarted):
            current = (event.case, event.dtype, event.impl)
            yield event
        elif isinstance(event, RecordReady):
            r = event.record
            done.add((r.case, r.dtype, r.impl))
            current = None
            yield event
        elif isinstance(event, WorkerLost):
            return current, event.reason
        elif isinstance(event, JobFailed):
            yield from _fail_remaining(job, done, f"worker failed: {event.message}")
            return None
        elif isinstance(event, JobDone):
            yield from _fail_remaining(job, done, "worker finished without running this")
            return None
    return current, "the worker's event stream ended early"


def _fail_remaining(job: WorkerJob, done: set[Key], message: str) -> Iterator[Event]:
    for unit in job.units:
        for impl in unit.calls:
            key = (unit.case.label, unit.case.dtype, impl)
            if key not in done:
                done.add(key)
                yield RecordReady(_error_record(job, key, message))


def _error_record(job: WorkerJob, key: Key, message: str) -> Record:
    label, dtype, impl = key
    params = next((dict(u.case.params) for u in job.units if u.case.label == label), {})
    kind = _kind(job, impl)
    return Record(op=job.op, case=label, params=params, dtype=dtype, impl=impl, kind=kind, status="error",
                  message=message, spec_sha256=job.spec.sha256)


def _kind(job: WorkerJob, impl: str) -> str:
    spec = job.spec.load()
    return next((kind for c, kind in spec.calls if c.name == impl), "impl")
