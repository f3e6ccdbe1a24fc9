"""One spawned worker process per job, talking back through a pipe.

A pipe, not a multiprocessing Queue: Connection.send has written the event when it returns, while
Queue.put leaves it to a feeder thread that a crashing worker (SIGSEGV) kills first, losing records
measured before the crash. The parent never initialises CUDA. Each call gets `call_timeout_s` from
the moment the worker announces it; a call that outlives it is killed with its worker.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from typing import Any, Callable, Iterator

from solbench.errors import UserError
from solbench.exec.base import supervise
from solbench.job import CallStarted, Event, JobDone, JobFailed, Probe, ProbeDone, ProbeJob, WorkerJob, WorkerLost

_POLL_S = 0.2
_PROBE_TIMEOUT_S = 600.0     # probing may measure the CPU's ceilings the first time


class ProcessExecutor:
    def __init__(self, call_timeout_s: float = 900.0):
        self.call_timeout_s = call_timeout_s

    def run(self, job: WorkerJob) -> Iterator[Event]:
        return supervise(job, lambda j: spawn_events(j, self.call_timeout_s))

    def probe(self, job: ProbeJob) -> Probe:
        for event in spawn_events(job, _PROBE_TIMEOUT_S):
            if isinstance(event, ProbeDone):
                return event.probe
            if isinstance(event, JobFailed):
                if event.user_error:
                    raise UserError(event.message)
                raise UserError(f"probing the device failed: {event.message}")
            if isinstance(event, WorkerLost):
                raise UserError(f"probing the device failed: {event.reason}")
        raise UserError("probing the device failed: the worker died without an answer")


def worker_main(job: WorkerJob | ProbeJob, conn: Any, env: dict[str, str] | None = None) -> None:
    """Entry point of every worker process: run the job and send its events back.

    `env` is set before anything touches CUDA (a --gpus worker is pinned by CUDA_VISIBLE_DEVICES)."""
    os.environ.update(env or {})
    from solbench.worker import iter_job, probe_here

    try:
        if isinstance(job, ProbeJob):
            conn.send(ProbeDone(probe_here(job)))
        else:
            for event in iter_job(job):
                conn.send(event)
        conn.send(JobDone())
    except UserError as exc:
        conn.send(JobFailed(str(exc), user_error=True))
    except BaseException as exc:  # report, then die: the parent turns this into error records
        conn.send(JobFailed(f"{type(exc).__name__}: {exc}"))


def spawn_events(job: WorkerJob | ProbeJob, timeout_s: float, env: dict[str, str] | None = None,
            on_start: Callable[[Any], None] | None = None) -> Iterator[Event]:
    """Run `job` in a fresh worker process; `on_start(proc)` lets a caller kill it from another thread."""
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker_main, args=(job, writer, env), daemon=True)
    proc.start()
    writer.close()
    if on_start is not None:
        on_start(proc)
    try:
        yield from _relay(proc, reader, timeout_s)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=30)
        reader.close()


def _relay(proc: Any, reader: Any, timeout_s: float) -> Iterator[Event]:
    deadline = time.monotonic() + timeout_s
    while True:
        event = _receive(reader)
        if event is not None:
            if isinstance(event, CallStarted):
                deadline = time.monotonic() + timeout_s
            yield event
            if isinstance(event, (JobDone, JobFailed)):
                return
        elif not proc.is_alive():
            for late in _drain(reader):
                yield late
                if isinstance(late, (JobDone, JobFailed)):
                    return
            yield WorkerLost(f"crashed: {exit_reason(proc.exitcode)}")
            return
        elif time.monotonic() > deadline:
            proc.kill()
            yield WorkerLost(f"timed out after {timeout_s:.0f} s (--timeout), killed", timed_out=True)
            return


def _receive(reader: Any) -> Event | None:
    try:
        if reader.poll(_POLL_S):
            return reader.recv()
    except (EOFError, OSError):  # the worker is gone and everything it sent has been read
        time.sleep(0.05)
    return None


def _drain(reader: Any) -> Iterator[Event]:
    while True:
        try:
            if not reader.poll(0.5):
                return
            yield reader.recv()
        except (EOFError, OSError):
            return


def exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"worker process killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"worker process killed by signal {-code}"
    return f"worker process exited with code {code}"
