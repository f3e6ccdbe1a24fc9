"""--gpus: a run's work spread over this machine's GPUs, one pinned worker process per GPU at a time.

Each GPU is a slot. A slot runs one shard (some work units of one op) at a time in a fresh worker
process that sees only its GPU (CUDA_VISIBLE_DEVICES), so each worker has its own L2 flush buffer,
clock monitor and CUDA context, and two units never share a GPU at the same time. Each slot was
probed on its own and keeps its own peaks, so GPUs of different models score against their own
ceilings, and a unit whose dtype a GPU cannot run goes only to the GPUs that can.

The pure part (which GPUs, which shards, which slots may take them) is separate from the threads
and processes, so it is tested without a GPU. A slot's shard goes through `supervise`, as with the
process executor: a crash costs one record and the rest of the shard runs in a fresh worker.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from typing import Any, Callable, Iterator, Sequence

from solbench import peaks as peaks_mod
from solbench.dtypes import precision, supported_on
from solbench.errors import UserError
from solbench.exec.base import Tagged, error_record, retarget, supervise
from solbench.exec.process import spawn_events
from solbench.hardware import DeviceInfo
from solbench.job import Event, JobFailed, Probe, ProbeJob, RecordReady, WorkerJob, WorkUnit
from solbench.peaks import Peaks

Spawn = Callable[..., Iterator[Event]]   # spawn_events(job, timeout_s, env=..., on_start=...)
_PROBE_TIMEOUT_S = 600.0
_STOP_WAIT_S = 30.0


# ---------------------------------------------------------------- which GPUs (pure)

@dataclass(frozen=True)
class GpuSlot:
    ordinal: int            # position in --gpus
    visible: str            # CUDA_VISIBLE_DEVICES of its workers
    index: int              # the GPU's index on this host: what its records and NVML name it by
    device: str = "cuda:0"  # the device its pinned worker sees ("cpu" for the CPU tests' stand-in GPUs)

    def env(self) -> dict[str, str]:
        # PCI order makes CUDA's numbering nvidia-smi's (and NVML's), which --gpus indices are.
        order = os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        return {"CUDA_VISIBLE_DEVICES": self.visible, "CUDA_DEVICE_ORDER": order}


def parse_gpu_list(text: str) -> tuple[int, ...] | None:
    """--gpus 'all' -> None; '0,2,3' -> (0, 2, 3); anything else is an error naming the flag."""
    text = text.strip()
    if text == "all":
        return None
    items = [t.strip() for t in text.split(",")]
    if not text or any(not t for t in items):
        raise UserError(f"expected 'all' or GPU indices like 0,2,3, got '{text}'", field="--gpus")
    out = []
    for t in items:
        if not t.isdigit():
            raise UserError(f"'{t}' is not a GPU index (expected 'all' or indices like 0,2,3)", field="--gpus")
        if int(t) in out:
            raise UserError(f"GPU {t} is listed twice", field="--gpus")
        out.append(int(t))
    return tuple(out)


def resolve_slots(text: str, visible_env: str | None, count: int) -> list[GpuSlot]:
    """The slots --gpus names, among the GPUs this process may use.

    `visible_env` is this process's CUDA_VISIBLE_DEVICES (None when unset), `count` how many GPUs
    CUDA sees. Indices in --gpus count the visible GPUs, as CUDA does.
    """
    wanted = parse_gpu_list(text)
    visible = _visible_list(visible_env, count)
    if not visible:
        raise UserError(f"'{text}' asked for GPUs, but no CUDA GPU is visible here"
                        + (" (CUDA_VISIBLE_DEVICES is empty)" if visible_env is not None else ""), field="--gpus")
    indices = range(len(visible)) if wanted is None else wanted
    slots = []
    for n, i in enumerate(indices):
        if i >= len(visible):
            raise UserError(f"GPU {i} does not exist ({len(visible)} visible: 0-{len(visible) - 1})", field="--gpus")
        slots.append(GpuSlot(n, visible[i], int(visible[i])))
    return slots


def _visible_list(visible_env: str | None, count: int) -> list[str]:
    if visible_env is None:
        return [str(i) for i in range(count)]
    entries = [e.strip() for e in visible_env.split(",") if e.strip()]
    for e in entries:
        if not e.isdigit():
            raise UserError(f"CUDA_VISIBLE_DEVICES names a device '{e}' by UUID or MIG instance; --gpus needs "
                            f"integer indices there (or unset it)", field="--gpus")
    return entries[:count] if count else entries


# ---------------------------------------------------------------- which shards go where (pure)

@dataclass(frozen=True)
class Shard:
    job_index: int                 # the job of the batch it is part of
    job: WorkerJob                 # some units of that job
    slots: tuple[int, ...]         # ordinals of the slots that can run its dtypes


def shard_jobs(jobs: Sequence[WorkerJob], infos: Sequence[DeviceInfo]) -> list[Shard]:
    """Each job's units split over the slots able to run them: round-robin, so every shard gets a mix
    of the sweep's sizes; with one slot, each job is one shard (what the process executor runs)."""
    shards = []
    for i, job in enumerate(jobs):
        groups: dict[tuple[int, ...], list[WorkUnit]] = {}
        for unit in job.units:
            groups.setdefault(_able(unit.case.dtype, infos), []).append(unit)
        for able, units in groups.items():
            parts = min(len(units), len(able))
            for p in range(parts):
                shards.append(Shard(i, replace(job, units=tuple(units[p::parts])), able))
    return shards


def _able(dtype: str, infos: Sequence[DeviceInfo]) -> tuple[int, ...]:
    able = tuple(n for n, info in enumerate(infos)
                 if supported_on(precision(dtype), info.kind, info.compute_capability) is None)
    # No GPU can: let every one try, so the records say why (the plan came from the first GPU).
    return able or tuple(range(len(infos)))


class ShardQueue:
    """Shards in plan order; a free slot takes the first one it can run."""

    def __init__(self, shards: Sequence[Shard]):
        self._shards = list(shards)
        self._lock = threading.Lock()

    def take(self, slot: int) -> Shard | None:
        with self._lock:
            for n, s in enumerate(self._shards):
                if slot in s.slots:
                    return self._shards.pop(n)
        return None


# ---------------------------------------------------------------- the executor

@dataclass(frozen=True)
class Target:
    """A probed slot: its GPU, the probe of that GPU, the peaks its records are scored against."""

    slot: GpuSlot
    probe: Probe
    peaks: Peaks


class GpuExecutor:
    """One worker process per GPU at a time; `probe` finds and probes the GPUs, `run_all` spreads the work."""

    def __init__(self, request: str, call_timeout_s: float, peaks_mode: str = "datasheet",
                 slots: Sequence[GpuSlot] | None = None, spawn: Spawn = spawn_events):
        self.request = request
        self.call_timeout_s = call_timeout_s
        self.peaks_mode = peaks_mode
        self._given = tuple(slots) if slots is not None else None
        self._spawn = spawn
        self.targets: tuple[Target, ...] = ()
        self.warnings: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[DeviceInfo, ...]:
        return tuple(t.probe.info for t in self.targets)

    def probe(self, job: ProbeJob) -> Probe:
        slots = list(self._given) if self._given is not None else resolve_slots(
            self.request, os.environ.get("CUDA_VISIBLE_DEVICES"), count_gpus())
        probes = probe_slots(slots, job)
        targets, warnings = [], []
        for slot, probe in zip(slots, probes):
            peaks, said = peaks_mod.resolve(probe.info, self.peaks_mode, job.cache_dir, probe.cpu_peaks)
            targets.append(Target(slot, probe, peaks))
            warnings += [f"GPU {slot.index}: {w}" for w in said if f"GPU {slot.index}: {w}" not in warnings]
        self.targets, self.warnings = tuple(targets), tuple(warnings)
        return probes[0]

    def run(self, job: WorkerJob) -> Iterator[Event]:
        return (event for _, event in self.run_all([job]))

    def run_all(self, jobs: Sequence[WorkerJob]) -> Iterator[Tagged]:
        if not self.targets:
            raise RuntimeError("GpuExecutor.run_all before probe: nothing knows which GPUs to use")
        work = ShardQueue(shard_jobs(jobs, self.devices))
        out: queue.Queue[Any] = queue.Queue()
        cancel = threading.Event()
        current: dict[int, Any] = {}
        threads = [threading.Thread(target=self._slot_loop, args=(t, work, out, cancel, current), daemon=True,
                                    name=f"solbench-gpu{t.slot.index}") for t in self.targets]
        for t in threads:
            t.start()
        try:
            running = len(threads)
            while running:
                item = out.get()
                if item is None:
                    running -= 1
                else:
                    yield item
        finally:
            # A caller that stops early (--fail-fast, an interrupt) must not leave a GPU busy under the next run.
            cancel.set()
            for proc in list(current.values()):
                if proc.is_alive():
                    proc.kill()
            for t in threads:
                t.join(timeout=_STOP_WAIT_S)

    def _slot_loop(self, target: Target, work: ShardQueue, out: queue.Queue, cancel: threading.Event,
                   current: dict[int, Any]) -> None:
        try:
            while not cancel.is_set():
                shard = work.take(target.slot.ordinal)
                if shard is None:
                    return
                job = retarget(shard.job, target.probe, target.peaks)
                for event in self._run_shard(job, target.slot, cancel, current):
                    out.put((shard.job_index, event))
        finally:
            out.put(None)

    def _run_shard(self, job: WorkerJob, slot: GpuSlot, cancel: threading.Event,
                   current: dict[int, Any]) -> Iterator[Event]:
        seen: set[tuple[str, str, str]] = set()

        def launch(j: WorkerJob) -> Iterator[Event]:
            if cancel.is_set():
                yield JobFailed("the run was stopped")
                return
            yield from self._spawn(j, self.call_timeout_s, env=slot.env(), on_start=started)

        def started(proc: Any) -> None:
            current[slot.ordinal] = proc
            if cancel.is_set():   # stopped between the check above and the start
                proc.kill()

        try:
            for event in supervise(job, launch):
                if isinstance(event, RecordReady):
                    seen.add((event.record.case, event.record.dtype, event.record.impl))
                yield event
        except Exception as exc:  # a bug here must cost this shard's records, not hang the run
            for unit in job.units:
                for impl in unit.calls:
                    key = (unit.case.label, unit.case.dtype, impl)
                    if key not in seen:
                        yield RecordReady(error_record(job, key, f"GPU {slot.index}: {type(exc).__name__}: {exc}"))


# ---------------------------------------------------------------- finding and probing the GPUs (subprocesses)

def count_gpus() -> int:
    """How many GPUs CUDA sees, asked in a subprocess: this process never initialises CUDA."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_gpu_count).result(timeout=_PROBE_TIMEOUT_S)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def probe_slots(slots: Sequence[GpuSlot], job: ProbeJob) -> list[Probe]:
    """Each slot probed in a process pinned to its GPU, all at once (`job.device` is the slot's)."""
    pools = [ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_pin, initargs=(s.env(),))
             for s in slots]
    try:
        futures = [pool.submit(probe_pinned, s, job) for pool, s in zip(pools, slots)]
        probes = [_answer(f, s) for f, s in zip(futures, slots)]
    except BaseException:
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        raise
    for pool in pools:
        pool.shutdown(wait=True)
    return probes


def _pin(env: dict[str, str]) -> None:
    """Runs first in a pinned process, before anything there touches CUDA."""
    os.environ.update(env)


def _answer(future: Any, slot: GpuSlot) -> Probe:
    try:
        return future.result(timeout=_PROBE_TIMEOUT_S)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"probing GPU {slot.index} failed: {type(exc).__name__}: {exc}", field="--gpus") from None


def probe_pinned(slot: GpuSlot, job: ProbeJob) -> Probe:
    """In the pinned process: the probe of the slot's GPU, named by its index on the host.

    The worker sees its GPU as cuda:0, but NVML (clocks, telemetry) numbers the host's GPUs, so the
    clocks are read again for the host index, which the worker's clock monitor will use too.
    """
    from solbench.nvml import device_facts
    from solbench.worker import probe_here

    probe = probe_here(replace(job, device=slot.device))
    info = replace(probe.info, index=slot.index)
    if info.kind == "cuda":
        facts = device_facts(slot.index)
        info = replace(info, driver=facts.pop("driver", None) or info.driver, clocks=facts or None)
    return Probe(info, probe.device, probe.cpu_peaks)
