"""The executor seam, and the supervision every executor shares: a lost worker costs one record.

A worker announces each call (`CallStarted`) before running it. When the worker is lost (a signal, an
exit, a timeout), the announced call is the culprit: it gets an `error` record saying what happened,
and the calls that remain run in a fresh worker. A worker lost before it announced anything cannot
name a culprit: everything left gets the reason, and the run goes on with the next job.

Every record that passes through here is stamped with the device its job ran on (a run over several
GPUs or a cluster mixes devices, and --resume matches records by device fingerprint).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Protocol, Sequence

from solbench.calibration import fingerprint
from solbench.hardware import DeviceInfo
from solbench.job import (CallStarted, Event, JobDone, JobFailed, Probe, ProbeJob, RecordReady, WorkerJob,
                          WorkerLost)
from solbench.peaks import Peaks
from solbench.results import Record

Launch = Callable[[WorkerJob], Iterator[Event]]
Key = tuple[str, str, str]          # (case label, dtype, impl)
Tagged = tuple[int, Event]          # (position of the event's job in the batch, event)


class Executor(Protocol):
    """Runs jobs somewhere. An executor that spreads a batch over devices (local GPUs, a Ray cluster)
    also has `run_all(jobs) -> Iterator[Tagged]`, yielding events as they complete; `run_all` below
    runs the others one job after another."""

    def run(self, job: WorkerJob) -> Iterator[Event]:
        """Every event of the job, a record for every planned call among them."""
        ...

    def probe(self, job: ProbeJob) -> Probe:
        ...


def run_all(executor: Executor, jobs: Sequence[WorkerJob]) -> Iterator[Tagged]:
    """Every event of every job, tagged with its job's position in `jobs`."""
    batch = getattr(executor, "run_all", None)
    return batch(jobs) if batch is not None else run_sequentially(executor, jobs)


def run_sequentially(executor: Executor, jobs: Sequence[WorkerJob]) -> Iterator[Tagged]:
    for i, job in enumerate(jobs):
        for event in executor.run(job):
            yield i, event


def device_infos(executor: Executor, probe: Probe) -> tuple[DeviceInfo, ...]:
    """The devices an executor measures on: all of its GPUs for one that has several, else the probed one."""
    return tuple(getattr(executor, "devices", ()) or (probe.info,))


def device_fingerprint(info: DeviceInfo) -> str:
    """One kind of device: name, SMs and memory for a GPU; name and threads for a CPU (threads set its speed)."""
    return fingerprint(info.name, info.sm_count, info.memory_bytes, info.cpu_threads if info.kind == "cpu" else None)


def stamp(record: Record, info: DeviceInfo) -> Record:
    """Name the device on a record that does not name one yet."""
    if record.device is None:
        record.device, record.device_index, record.host = info.name, info.index, info.host
        record.device_fingerprint = device_fingerprint(info)
    return record


def retarget(job: WorkerJob, probe: Probe, peaks: Peaks) -> WorkerJob:
    """The same work on another device, scored against that device's peaks."""
    return dataclasses.replace(job, device=probe.device, info=probe.info, peaks=peaks)


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
        yield RecordReady(error_record(job, culprit, f"{reason} while this ran; a fresh worker ran the "
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
            r = stamp(event.record, job.info)
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
                yield RecordReady(error_record(job, key, message))


def error_record(job: WorkerJob, key: Key, message: str) -> Record:
    label, dtype, impl = key
    params = next((dict(u.case.params) for u in job.units if u.case.label == label), {})
    kind = _kind(job, impl)
    return stamp(Record(op=job.op, case=label, params=params, dtype=dtype, impl=impl, kind=kind, status="error",
                        message=message, spec_sha256=job.spec.sha256), job.info)


def _kind(job: WorkerJob, impl: str) -> str:
    spec = job.spec.load()
    return next((kind for c, kind in spec.calls if c.name == impl), "impl")
