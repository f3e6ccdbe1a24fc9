"""The `cupti` timer: device-side durations of every GPU activity, from torch.profiler (CUPTI).

Every kernel, copy and memset on every stream is seen with its device timestamps; overlapping work
(several streams) is merged so it counts once; the flush kernels are recognised by name and excluded;
each flush starts an iteration, so there is one sample per iteration. The events timer's tare and the
cross-check use the same windows.

torch.profiler (2.11) warns "Profiler clears events at the end of each cycle" the first time a
profiler starts in a process, so every worker printed it into the user's terminal. A timer opens
profiler windows on purpose and the notice says nothing about the measurement, so an "ignore" filter
for exactly that message is put first in the process's warning filters when a window opens. Not
`warnings.catch_warnings()` around each window: entering it resets Python's once-per-location
memory of shown warnings, so a warning from the timed call itself would be printed again after
every window.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

from solbench.measure.config import Call, Measurement
from solbench.measure.l2flush import L2Flush
from solbench.measure.sampler import Sampler
from solbench.measure.timers.base import TimerContext, batch_size
from solbench.telemetry import ClockMonitor

CUPTI_BATCH = 50
# torch.profiler's notice when a profiler starts; re-profiling is what a timer does, so it is noise.
PROFILER_CYCLE_WARNING = r".*Profiler clears events at the end of each cycle"


def silence_profiler_notice() -> None:
    """Make sure the first warning filter ignores torch.profiler's start-up notice (a no-op when it does).

    Checking first keeps the filter list unchanged on every later window (each change would reset
    the shown-once memory of every warning, see the module docstring).
    """
    first = warnings.filters[0] if warnings.filters else None
    if (first is not None and first[0] == "ignore" and first[2] is UserWarning and first[1] is not None
            and first[1].pattern == PROFILER_CYCLE_WARNING):
        return
    warnings.filterwarnings("ignore", message=PROFILER_CYCLE_WARNING, category=UserWarning)


@contextlib.contextmanager
def profiler_window() -> Iterator[Any]:
    """A torch.profiler recording CUDA activity, without its start-up notice in the user's terminal."""
    from torch.profiler import ProfilerActivity, profile

    silence_profiler_notice()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        yield prof


def measure_cupti(ctx: TimerContext) -> Measurement:
    per_iter_s = ctx.warm_up()
    flush_names = flush_kernel_names(ctx.flush)
    sampler = Sampler(ctx.config, ctx.monitor, device_kind="cuda")
    i = 0
    while True:
        batch = batch_size(per_iter_s, len(sampler.samples), ctx.config, cap=CUPTI_BATCH)
        samples, note, throttle = cupti_window(ctx.call, ctx.flush, flush_names, batch, i, ctx.monitor)
        i += batch
        if note and note not in sampler.notes:
            sampler.notes.append(note)
        if sampler.add(samples, throttle):
            return sampler.result("cupti", ctx.flush.nbytes)


def flush_kernel_names(flush: L2Flush) -> frozenset[str]:
    """Names of the kernels the flush launches (seen in a short profile of flushes alone)."""
    import torch

    if flush.buf is None:
        return frozenset()
    torch.cuda.synchronize()
    with profiler_window() as prof:
        for _ in range(3):
            flush()
        torch.cuda.synchronize()
    return frozenset(name for _, _, name in gpu_intervals(prof))


def cupti_window(call: Call, flush: L2Flush, flush_names: frozenset[str], batch: int, i0: int,
                 monitor: ClockMonitor | None) -> tuple[list[float], str | None, str | None]:
    """Per-iteration device time of `batch` calls: (samples, note, throttle reason)."""
    import torch

    torch.cuda.synchronize()
    throttle = None
    with profiler_window() as prof:
        for k in range(batch):
            flush()
            call(i0 + k)
        if monitor is not None:
            throttle = monitor.during()
        torch.cuda.synchronize()
    samples, note = split_iterations(gpu_intervals(prof), flush_names, batch, flush.kernels_per_flush)
    return samples, note, throttle


def gpu_intervals(prof: Any) -> list[tuple[int, int, str]]:
    """(start_ns, end_ns, name) of every GPU activity (kernels, copies, memsets) the profiler saw."""
    import torch

    cuda = torch.autograd.DeviceType.CUDA
    out = []
    try:
        for e in prof.profiler.kineto_results.events():
            # GPU-side user annotations (e.g. a torch.compile region) span kernels and gaps: not work.
            if e.device_type() == cuda and "annotation" not in str(getattr(e, "activity_type", lambda: "")()):
                out.append((int(e.start_ns()), int(e.end_ns()), e.name()))
    except AttributeError:  # older torch: FunctionEvents in microseconds
        for e in prof.events():
            if e.device_type == cuda:
                out.append((int(e.time_range.start * 1e3), int(e.time_range.end * 1e3), e.name))
    return sorted(out)


def merged_length(intervals: list[tuple[int, int]]) -> int:
    """Total time covered by possibly overlapping intervals (work on several streams counts once)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def split_iterations(events: list[tuple[int, int, str]], flush_names: frozenset[str],
                     batch: int, per_flush: int = 1) -> tuple[list[float], str | None]:
    """Per-iteration device seconds: each flush (`per_flush` kernels) starts an iteration; the rest is
    merged work.

    When the flushes cannot be told apart (no flush, or the implementation launches the same kernel),
    the window's merged work is spread evenly over the iterations and a note says so.
    """
    flushes = [s for s, _, name in events if name in flush_names]
    work = [(s, e) for s, e, name in events if name not in flush_names]
    if len(flushes) != batch * per_flush:
        per = merged_length(work) / 1e9 / max(batch, 1)
        note = (f"CUPTI: found {len(flushes)} flush kernels for {batch} iterations of {per_flush}; per-iteration "
                f"times are the window's average") if flush_names else None
        return [per] * batch, note
    flushes = flushes[::per_flush]      # each flush's first kernel: they are launched back to back
    buckets: list[list[tuple[int, int]]] = [[] for _ in range(batch)]
    for s, e in work:
        j = sum(1 for f in flushes if f <= s) - 1
        buckets[max(j, 0)].append((s, e))
    return [merged_length(b) / 1e9 for b in buckets], None
