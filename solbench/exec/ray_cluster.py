"""--executor ray: each work unit (one case and dtype of one op) a Ray task, on whatever node Ray picks.

A task asks for one GPU (`num_gpus=1`; none on a CPU-only cluster, where CPU work units run) and,
with --accelerators, the GPU model (`accelerator_type`). Inside the task the unit runs as everywhere
else: in a fresh worker process, through `supervise`, so a crashing implementation costs its own
record and a hanging one is killed at --timeout. The task probes the GPU Ray gave it and resolves
that GPU's peaks, so every record names the device that measured it.

What Ray itself loses (a node that dies, a preempted or killed worker) Ray runs again, at most
--retries times; after that the unit's records are `error` records saying why, and the run goes on.
Records come back as each task finishes. Named so that it does not shadow the `ray` package.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from solbench import peaks as peaks_mod
from solbench.errors import UserError
from solbench.exec.base import Tagged, error_record, retarget, supervise
from solbench.exec.gpus import GpuSlot, probe_slots
from solbench.exec.placement import Placement
from solbench.exec.process import spawn_events
from solbench.job import Event, Probe, ProbeJob, RecordReady, WorkerJob
from solbench.peaks import Peaks
from solbench.results import Record

# No brackets (solbench[ray]): the CLI prints errors through rich, whose markup would swallow them.
INSTALL_HINT = "pip install ray (what solbench's optional 'ray' extra installs)"
ACCELERATOR_PREFIX = "accelerator_type:"   # the resource Ray gives a node of each GPU model


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(f"'ray' needs the Ray package, which is not installed here; install it with {INSTALL_HINT}",
                        field="--executor") from None
    return ray


class RayExecutor:
    """Units as Ray tasks. `probe` connects and probes one node of the kind asked for; `run_all` streams."""

    def __init__(self, placement: Placement, call_timeout_s: float, peaks_mode: str = "datasheet"):
        self.ray = import_ray()
        if len(placement.accelerators) > 1:
            raise ValueError("one RayExecutor per GPU model: fleet.py runs one per --accelerators entry")
        self.address = placement.ray_address
        self.accelerator = placement.accelerators[0] if placement.accelerators else None
        self.retries = placement.retries
        self.call_timeout_s = call_timeout_s
        self.peaks_mode = peaks_mode
        self.num_gpus = 0
        self.cache_dir = Path("results") / "cache"

    # ------------------------------------------------------------ connecting and probing

    def connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        # Ray's usage statistics are opt-out; a benchmark run has no business reporting home.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        _check_reachable(self.address if self.address != "auto" else os.environ.get("RAY_ADDRESS"))
        kwargs: dict[str, Any] = dict(logging_level=logging.WARNING, log_to_driver=False, ignore_reinit_error=True)
        if self.address is None:
            kwargs["include_dashboard"] = False
        try:
            ray.init(address=self.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"cannot connect to a Ray cluster at '{self.address}': {_first_line(exc)}",
                            field="--ray-address") from None

    def probe(self, job: ProbeJob) -> Probe:
        self.connect()
        # Absolute: a Ray worker does not run in this process's folder.
        self.cache_dir = Path(job.cache_dir).resolve()
        job = replace(job, cache_dir=self.cache_dir)
        self.num_gpus = _gpus_per_task(job.device, self.ray.cluster_resources(), self.address)
        self._check_accelerator(self.ray.cluster_resources())
        device = "cuda" if self.num_gpus else "cpu"
        task = self.ray.remote(_probe_task).options(**self._options(retries=self.retries))
        try:
            return self.ray.get(task.remote(replace(job, device=device)))
        except self.ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, UserError):
                raise UserError(str(cause)) from None
            raise UserError(f"probing a Ray node failed: {_first_line(exc)}", field="--executor") from None

    def _check_accelerator(self, resources: dict[str, float]) -> None:
        if self.accelerator and ACCELERATOR_PREFIX + self.accelerator not in resources:
            have = sorted(k[len(ACCELERATOR_PREFIX):] for k in resources if k.startswith(ACCELERATOR_PREFIX))
            raise UserError(f"no node of the Ray cluster has accelerator type '{self.accelerator}' (it has: "
                            f"{', '.join(have) or 'none'})", field="--accelerators")

    def _options(self, retries: int) -> dict[str, Any]:
        opts: dict[str, Any] = dict(num_cpus=1, num_gpus=self.num_gpus, max_retries=retries, retry_exceptions=False)
        if self.accelerator:
            opts["accelerator_type"] = self.accelerator
        return opts

    # ------------------------------------------------------------ running

    def run(self, job: WorkerJob) -> Iterator[Event]:
        return (event for _, event in self.run_all([job]))

    def run_all(self, jobs: Sequence[WorkerJob]) -> Iterator[Tagged]:
        ray = self.ray
        task = ray.remote(run_unit).options(**self._options(retries=self.retries))
        device = "cuda" if self.num_gpus else "cpu"
        units: dict[Any, tuple[int, WorkerJob]] = {}
        for i, job in enumerate(jobs):
            for unit in job.units:
                one = replace(job, units=(unit,))
                units[task.remote(one, self.call_timeout_s, self.peaks_mode, device, str(self.cache_dir))] = (i, one)
        pending = list(units)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    i, one = units[ref]
                    for record in self._records(ref, one):
                        yield i, RecordReady(record)
        finally:
            for ref in pending:   # stopped early (--fail-fast, an interrupt): free the cluster
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already finished or gone: nothing to free
                    pass

    def _records(self, ref: Any, job: WorkerJob) -> list[Record]:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # our code raised inside the task: not retried
            reason = f"the Ray task failed: {_first_line(getattr(exc, 'cause', None) or exc)}"
        except ray.exceptions.RayError as exc:      # worker or node lost, retried by Ray first
            reason = (f"the Ray task was lost {self.retries + 1} times (retried {self.retries}): "
                      f"{type(exc).__name__}: {_first_line(exc)}")
        out = []
        for unit in job.units:
            for impl in unit.calls:
                r = error_record(job, (unit.case.label, unit.case.dtype, impl), reason)
                # It ran nowhere we know of: the planning probe's device would be a guess.
                r.device = r.device_index = r.device_fingerprint = r.host = None
                out.append(r)
        return out


def _check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A head that does not answer: say so now (ray.init would retry for minutes before giving up)."""
    if not address or address == "auto" or address.startswith("ray://") or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise UserError(f"nothing answers at '{address}' ({exc.strerror or exc}): is the Ray head running there? "
                        f"(ray start --head --port={port})", field="--ray-address") from None


def _gpus_per_task(device: str, resources: dict[str, float], address: str | None) -> int:
    has_gpus = resources.get("GPU", 0) > 0
    if device == "cpu":
        return 0
    if device == "cuda" and not has_gpus:
        raise UserError(f"--device cuda asked for, but the Ray cluster at '{address}' has no GPU", field="--device")
    return 1 if has_gpus else 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


# ---------------------------------------------------------------- in the Ray worker

def run_unit(job: WorkerJob, call_timeout_s: float, peaks_mode: str, device: str, cache_dir: str) -> list[Record]:
    """A Ray task: the unit on the GPU (or CPU) Ray gave this worker, every record of it."""
    slot = _task_slot(device)
    probe, peaks = _target(slot, cache_dir, peaks_mode)
    job = retarget(job, probe, peaks)
    launch = lambda j: spawn_events(j, call_timeout_s, env=slot.env())  # noqa: E731
    return [e.record for e in supervise(job, launch) if isinstance(e, RecordReady)]


def _probe_task(job: ProbeJob) -> Probe:
    """A Ray task: the probe (and the spec checks) on a node of the kind the run will use."""
    return probe_slots([_task_slot(job.device)], job)[0]


def _task_slot(device: str) -> GpuSlot:
    """The GPU Ray assigned this task (it sets CUDA_VISIBLE_DEVICES), as a --gpus slot of one."""
    if device == "cpu":
        return GpuSlot(0, "", 0, device="cpu")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    return GpuSlot(0, visible, int(visible) if visible.isdigit() else 0)


@functools.lru_cache(maxsize=16)
def _target(slot: GpuSlot, cache_dir: str, peaks_mode: str) -> tuple[Probe, Peaks]:
    """Probe once per worker process and GPU: Ray reuses workers, and a probe costs a process start."""
    probe = probe_slots([slot], ProbeJob(slot.device, Path(cache_dir)))[0]
    peaks, _ = peaks_mod.resolve(probe.info, peaks_mode, Path(cache_dir), probe.cpu_peaks)
    return probe, peaks
