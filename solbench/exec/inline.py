"""Run jobs in this process: no start-up cost and no isolation (a crash takes the caller down)."""

from __future__ import annotations

from typing import Iterator

from solbench.exec.base import supervise
from solbench.job import Event, JobDone, JobFailed, Probe, ProbeJob, WorkerJob


class InlineExecutor:
    def run(self, job: WorkerJob) -> Iterator[Event]:
        return supervise(job, _launch)

    def probe(self, job: ProbeJob) -> Probe:
        from solbench.worker import probe_here

        return probe_here(job)


def _launch(job: WorkerJob) -> Iterator[Event]:
    from solbench.worker import iter_job

    try:
        yield from iter_job(job)
    except Exception as exc:  # what a worker process would report as fatal
        yield JobFailed(f"{type(exc).__name__}: {exc}")
        return
    yield JobDone()
