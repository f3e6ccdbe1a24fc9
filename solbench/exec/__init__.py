"""Executors: where a job's work runs. `run(job)` yields the worker's events, `probe(job)` finds the device.

- `inline`: in this process (fast start, no isolation; tests and debugging);
- `process` (default): one spawned worker process per op; a call that crashes or hangs gets an `error`
  record naming what happened, and a fresh worker runs the calls that remain.
Every executor goes through `supervise`, so the records a run produces do not depend on where it ran.
The scale-out executors (local GPUs, Ray) plug in here.
"""

from __future__ import annotations

from solbench.exec.base import Executor, supervise
from solbench.exec.inline import InlineExecutor
from solbench.exec.process import ProcessExecutor

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "make_executor", "supervise"]


def make_executor(isolate: bool, call_timeout_s: float) -> Executor:
    return ProcessExecutor(call_timeout_s) if isolate else InlineExecutor()
