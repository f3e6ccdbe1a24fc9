"""The `events` timer (the CUDA default): two CUDA events around each call, the queue held by a spin.

The L2 is flushed before each call, outside the events. A spin kernel holds the stream while the
host queues a whole batch, so the GPU runs the batch back to back and the events see kernels, not
Python's launch overhead. If the spin ran out before the host finished queueing (the GPU waited on
the host: launch gaps inside the events), the batch is thrown away and the spin lengthened. The
fixed per-call cost of the event pair is then subtracted (the tare, below).

The tare. Even with the launch queue held, the stream runs [flush][start event][kernel][end event]:
the start timestamp is written when the flush retires, then the front end launches the kernel, and
the end timestamp waits for the kernel's completion and a memory flush. On an H200 that adds a fixed
~3 us to every sample whatever the kernel's length (measured: 3.1 us on a 2.4 us add, 3.2 us on a
49 us add). A fixed offset of the instrument is removed the way a scale is tared: once per process
and flush size (TimerCache), `calibrate_events` times two probe kernels (a tiny add and a ~20 us
spin, of very different lengths) both with events (the same flush/event sequence, the same
queue-holding spin) and with CUPTI, and takes overhead = events median - CUPTI median, averaged over
the two probes. Every events sample then becomes max(sample - overhead, min(sample, floor)), floor =
the CUPTI device time of the tiny probe (no call that launches a kernel runs shorter), so a sample
never goes below zero nor is raised. The record says what was done: `time_s.overhead_s` and
`telemetry.timer_correction` (both probes' numbers). The overhead's standard error (and the probes'
disagreement, if the cost is not quite constant) enters the record's noise, because a wrong overhead
shifts every sample of the process alike. Without CUPTI the correction is skipped and a note says so.
Not chosen: recording the start event after a dependency-breaking no-op so the kernel's launch is
already resident; the event's own write and the end-of-kernel flush stay inside the window, and it
cannot be verified without the device, while the tare is measured on it.
A call that launches several kernels keeps its inter-kernel gaps (they are part of its cost): only the
once-per-pair cost is removed, so events >= CUPTI's merged kernel time is still expected there.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from solbench.measure.config import Call, Measurement, TimerCache
from solbench.measure.l2flush import L2Flush
from solbench.measure.sampler import Sampler
from solbench.measure.timers.base import TimerContext, batch_size, warm
from solbench.measure.timers.cupti import cupti_window, flush_kernel_names
from solbench.stats import median_rse
from solbench.telemetry import ClockMonitor

SPIN_MARGIN = 2.0           # queue-holding spin = host enqueue time of the batch x this
MIN_SPIN_S = 20e-6
MAX_SPIN_S = 0.2
MAX_STARVED = 3             # starved batches in a row before accepting them with a note
CAL_ITERS = 50              # iterations per events batch / CUPTI window of an overhead probe
CAL_BATCHES = 3
CAL_SPIN_PROBE_S = 20e-6    # the long probe: a spin of about this long
CAL_DISAGREE_S = 1e-6       # probes disagreeing by more: the overhead is not constant, say so


@dataclass(frozen=True)
class EventOverhead:
    """The events timer's fixed per-call cost on this device, measured against CUPTI (the tare)."""

    overhead_s: float            # subtracted from every events sample
    se_s: float                  # its standard error, incl. the probes' disagreement
    floor_s: float               # CUPTI time of the tiny probe: corrected samples stay at or above it
    flush_bytes: int
    probes: tuple[dict[str, Any], ...] = ()
    note: str | None = None      # calibration unavailable or doubtful

    def to_json(self) -> dict[str, Any]:
        return {"method": "events median - CUPTI median of probe kernels", "overhead_s": self.overhead_s,
                "se_s": self.se_s, "floor_s": self.floor_s, "flush_bytes": self.flush_bytes,
                "probes": list(self.probes), "note": self.note}


@dataclass
class EventBatch:
    samples: list[float]          # raw elapsed seconds per call, event pair included
    starved: bool                 # the spin ran out before the batch was queued: launch gaps inside
    enqueue_s: float              # host time to queue one iteration


def event_batch(call: Call, flush: L2Flush, batch: int, spin_s: float, cycles_per_s: float,
                i0: int, monitor: ClockMonitor | None = None) -> tuple[EventBatch, str | None]:
    """One spin-held batch of [flush][start][call][end]; (batch, throttle reason seen while it ran)."""
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
    spin_done = torch.cuda.Event()
    # torch.cuda._sleep counts SM cycles; at a lower real clock the spin only lasts longer, which is safe.
    torch.cuda._sleep(int(spin_s * cycles_per_s))
    spin_done.record()
    q0 = time.perf_counter()
    for k in range(batch):
        flush()
        starts[k].record()
        call(i0 + k)
        ends[k].record()
    enqueue_s = (time.perf_counter() - q0) / batch
    # If the spin already finished, the GPU caught up with the host somewhere in this batch and the
    # events may contain launch gaps.
    starved = spin_done.query()
    throttle = monitor.during() if monitor is not None else None
    torch.cuda.synchronize()
    return EventBatch([s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)], starved, enqueue_s), throttle


def spin_for(enqueue_s: float, batch: int) -> float:
    return min(MAX_SPIN_S, max(MIN_SPIN_S, enqueue_s * batch * SPIN_MARGIN))


def apply_overhead(samples: list[float], tare: EventOverhead | None) -> list[float]:
    """Subtract the tare; never below the tiny probe's device time, never raising a sample, never < 0."""
    if tare is None:
        return list(samples)
    return [max(x - tare.overhead_s, min(x, tare.floor_s), 0.0) for x in samples]


def measure_events(ctx: TimerContext) -> Measurement:
    config = ctx.config
    tare = tare_for(ctx.flush, ctx.cycles_per_s, ctx.cache) if config.event_correction else None
    per_iter_s = ctx.warm_up()
    enqueue_s = per_iter_s  # pessimistic until measured
    usable = tare if tare is not None and tare.overhead_s > 0 else None   # None: nothing to subtract
    sampler = Sampler(config, ctx.monitor, device_kind="cuda", overhead_se_s=usable.se_s if usable else 0.0)
    starved_in_row = 0
    at_floor = total = 0
    i = 0
    while True:
        batch = batch_size(per_iter_s, len(sampler.samples), config)
        # Keep the batch short enough for the longest spin to cover its enqueue time.
        batch = max(1, min(batch, int(MAX_SPIN_S / (SPIN_MARGIN * max(enqueue_s, 1e-7)))))
        b, throttle = event_batch(ctx.call, ctx.flush, batch, spin_for(enqueue_s, batch), ctx.cycles_per_s, i,
                                  ctx.monitor)
        i += batch
        enqueue_s = b.enqueue_s
        if b.starved and starved_in_row < MAX_STARVED:
            starved_in_row += 1      # drop the batch and spin longer next time
            continue
        if b.starved and not any("host" in n for n in sampler.notes):
            sampler.notes.append("the GPU waited on the host inside timed batches (the call synchronises or "
                                 "its host work outlasts the spin): events include launch gaps")
        starved_in_row = 0
        corrected = apply_overhead(b.samples, usable)
        if usable is not None:
            at_floor += sum(1 for raw in b.samples if raw - usable.overhead_s < usable.floor_s)
            total += len(b.samples)
        if sampler.add(corrected, throttle):
            m = sampler.result("events", ctx.flush.nbytes)
            record_tare(m, tare, usable, at_floor, total)
            return m


def record_tare(m: Measurement, tare: EventOverhead | None, usable: EventOverhead | None,
                at_floor: int, total: int) -> None:
    """Say on the measurement what was subtracted, how it was measured, and when the call was too short."""
    m.overhead_s = usable.overhead_s if usable else 0.0
    m.correction = tare.to_json() if tare else {"method": "none", "overhead_s": 0.0,
                                                 "note": "event overhead correction off"}
    if tare is not None and tare.note:
        m.notes.append(tare.note)
    if usable is not None and total and at_floor > total // 2:
        m.notes.append(f"events: {at_floor}/{total} samples hit the floor of the overhead correction "
                       f"({usable.floor_s * 1e6:.2f} us): the call is too short for this timer, use --timer cupti")


def tare_for(flush: L2Flush, cycles_per_s: float, cache: TimerCache) -> EventOverhead:
    """The tare for this flush size, measured on first use in this process."""
    return cache.get("event_overhead", flush.nbytes, lambda: calibrate_events(flush, cycles_per_s))


def calibrate_events(flush: L2Flush, cycles_per_s: float) -> EventOverhead:
    """Measure the events timer's fixed per-call cost: events vs CUPTI on a tiny and a ~20 us probe."""
    import torch

    tiny = torch.ones(1024, device="cuda")
    probes: list[tuple[str, Call]] = [
        ("tiny add (4 KiB)", lambda i: tiny.add_(1.0)),
        (f"spin ~{CAL_SPIN_PROBE_S * 1e6:.0f} us", lambda i: torch.cuda._sleep(int(CAL_SPIN_PROBE_S * cycles_per_s))),
    ]
    try:
        names = flush_kernel_names(flush)
        found = [_probe(name, fn, flush, names, cycles_per_s) for name, fn in probes]
    except Exception as exc:  # no CUPTI (a profiler already running, no permission): do not guess
        return EventOverhead(0.0, 0.0, 0.0, flush.nbytes, (), f"events overhead not calibrated (CUPTI "
                             f"unavailable: {type(exc).__name__}: {exc}); times include the event pair's "
                             f"fixed cost (~3 us per call on an H200)")
    return overhead_from(found, flush.nbytes)


def _probe(name: str, fn: Call, flush: L2Flush, flush_names: frozenset[str],
           cycles_per_s: float) -> dict[str, Any]:
    """Events and CUPTI medians (with standard errors) of one probe kernel, same flush sequence."""
    import torch

    per_iter = warm(fn, flush, 0.005, torch.cuda.synchronize)
    events: list[float] = []
    for _ in range(CAL_BATCHES + MAX_STARVED):
        b, _ = event_batch(fn, flush, CAL_ITERS, spin_for(per_iter, CAL_ITERS), cycles_per_s, 0)
        per_iter = max(per_iter, b.enqueue_s)
        if not b.starved:
            events += b.samples
        if len(events) >= CAL_BATCHES * CAL_ITERS:
            break
    device, _, _ = cupti_window(fn, flush, flush_names, CAL_ITERS, 0, None)
    if len(events) < 3 or len(device) < 3:
        raise RuntimeError(f"probe '{name}': too few samples ({len(events)} events, {len(device)} CUPTI)")
    ev_med, dev_med = statistics.median(events), statistics.median(device)
    if dev_med <= 0 or ev_med <= 0:
        raise RuntimeError(f"probe '{name}': no device time seen (events {ev_med:.3g} s, CUPTI {dev_med:.3g} s)")
    return {"probe": name, "events_median_s": ev_med, "cupti_median_s": dev_med,
            "events_se_s": median_rse(events) * ev_med, "cupti_se_s": median_rse(device) * dev_med}


def overhead_from(probes: list[dict[str, Any]], flush_bytes: int) -> EventOverhead:
    """The tare from probe results: mean of (events - CUPTI) medians; its error includes their disagreement."""
    diffs = [p["events_median_s"] - p["cupti_median_s"] for p in probes]
    mean = statistics.fmean(diffs)
    se_stat = math.sqrt(statistics.fmean([p["events_se_s"] ** 2 + p["cupti_se_s"] ** 2 for p in probes])
                        / len(probes))
    spread = (max(diffs) - min(diffs)) / 2
    note = None
    if max(diffs) - min(diffs) > CAL_DISAGREE_S:
        note = (f"events overhead differs between probe kernels ({', '.join(f'{d * 1e6:.2f}' for d in diffs)} us): "
                f"the correction ({mean * 1e6:.2f} us) is uncertain by +-{spread * 1e6:.2f} us")
    if mean < 0:
        note = (f"events overhead came out negative ({mean * 1e6:.2f} us): not subtracted")
    floor = min(p["cupti_median_s"] for p in probes)
    return EventOverhead(max(mean, 0.0), math.sqrt(se_stat ** 2 + spread ** 2), floor, flush_bytes,
                         tuple(probes), note)
