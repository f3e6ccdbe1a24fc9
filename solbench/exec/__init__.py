"""Executors: where a job's work runs. `run(job)` yields the worker's events, `probe(job)` finds the device.

- `inline`: in this process (fast start, no isolation; tests and debugging);
- `process` (default): one spawned worker process per op; a call that crashes or hangs gets an `error`
  record naming what happened, and a fresh worker runs the calls that remain;
- `gpus` (--gpus): the work units spread over this machine's GPUs, one pinned worker per GPU at a time;
- `ray_cluster` (--executor ray): each work unit a Ray task on a cluster.
Every executor goes through `supervise`, so the records a run produces do not depend on where it ran.
A batch of jobs goes through `run_all`: the scale-out executors yield events as units complete.
"""

from __future__ import annotations

from solbench.exec.base import Executor, device_infos, run_all, supervise
from solbench.exec.inline import InlineExecutor
from solbench.exec.placement import Placement
from solbench.exec.process import ProcessExecutor

__all__ = ["Executor", "InlineExecutor", "Placement", "ProcessExecutor", "device_infos", "make_executor", "run_all",
           "supervise"]


def make_executor(isolate: bool, call_timeout_s: float, placement: Placement | None = None,
                  peaks_mode: str = "datasheet") -> Executor:
    """The executor a (checked) placement asks for; without one, process or inline as --no-isolate says."""
    placement = placement or Placement()
    if placement.executor == "ray":
        from solbench.exec.ray_cluster import RayExecutor

        return RayExecutor(placement, call_timeout_s, peaks_mode)
    if placement.gpus is not None:
        from solbench.exec.gpus import GpuExecutor

        return GpuExecutor(placement.gpus, call_timeout_s, peaks_mode)
    return ProcessExecutor(call_timeout_s) if isolate else InlineExecutor()
