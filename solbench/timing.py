"""How long does one call take? Timers, L2 flushing, adaptive stopping, clock checks, timer integrity.

Timers (every record names the one that produced it):
- `events` (CUDA default): two CUDA events around each call, the L2 flushed before each call outside the
  events. A spin kernel holds the stream while the host queues a whole batch, so the GPU runs the batch
  back to back and the events see kernels, not Python's launch overhead. If the spin ran out before the
  host finished queueing (the GPU waited on the host: launch gaps inside the events), the batch is
  thrown away and the spin lengthened. The fixed per-call cost of the event pair is then subtracted
  (see "Event overhead" below).
- `graph`: n iterations (flush + call) captured in one CUDA graph; a graph of the n flushes alone is
  timed too and subtracted; one sample = (graph - flushes) / n. The event-pair cost is in both graphs'
  times and cancels in the difference.
- `cupti`: device-side durations of every GPU activity on every stream from torch.profiler (CUPTI),
  overlaps merged, the flush kernels excluded; one sample per iteration.
- `wall` (CPU): a monotonic clock around each call.

Event overhead (the `events` timer). Even with the launch queue held, the stream runs
[flush][start event][kernel][end event]: the start timestamp is written when the flush retires, then
the front end launches the kernel, and the end timestamp waits for the kernel's completion and a memory
flush. On an H200 that adds a fixed ~3 us to every sample whatever the kernel's length (measured: 3.1 us
on a 2.4 us add, 3.2 us on a 49 us add). A fixed offset of the instrument is removed the way a scale is
tared: once per worker and flush size, `calibrate_events` times two probe kernels (a tiny add and a
~20 us spin, of very different lengths) both with events (the same flush/event sequence, the same
queue-holding spin) and with CUPTI, and takes overhead = events median - CUPTI median, averaged over the
two probes. Every events sample then becomes max(sample - overhead, min(sample, floor)), floor = the
CUPTI device time of the tiny probe (no call that launches a kernel runs shorter), so a sample never
goes below zero nor is raised. The record says what was done: `time_s.overhead_s` and
`telemetry.timer_correction` (both probes' numbers). The overhead's standard error (and the probes'
disagreement, if the cost is not quite constant) enters the record's noise, because a wrong overhead
shifts every sample of the process alike. Without CUPTI the correction is skipped and a warning says so.
Not chosen: recording the start event after a dependency-breaking no-op so the kernel's launch is
already resident; the event's own write and the end-of-kernel flush stay inside the window, and it
cannot be verified without the device, while the tare is measured on it.
A call that launches several kernels keeps its inter-kernel gaps (they are part of its cost): only the
once-per-pair cost is removed, so events >= CUPTI's merged kernel time is still expected there.

Noise (`time_s.rse`, the relative standard error of the reported median). The within-run estimate from
the samples (IQR-based standard error of the median) assumes independent samples and sees nothing that
differs between processes: boost clock and power state, memory placement, the tare above. Two runs of
the same case differed by 2.6-3.2% on an H200 where that estimate said 0.3-0.6%. The reported `rse` is

    rse = sqrt(within^2 + clock^2 + overhead^2 + floor^2)

- within = max(sampling, batches): `sampling` is the IQR estimate over all samples; `batches` is the
  standard error from the medians of >= MIN_BATCHES independent batches taken one after another (slow
  drift and batch-to-batch correlation show up here, not in the pooled estimate);
- clock = relative standard deviation of the SM clock NVML saw during the kept batches (a time is at
  most inversely proportional to the clock, so this bounds the clock's share);
- overhead = the event tare's standard error over the median (events timer only);
- floor = RUN_TO_RUN_FLOOR for the device kind: the process-to-process spread that no single run can
  observe, estimated from A/A pairs (`scripts/aa_check.py` prints the estimate from any two runs).
Only `within` shrinks with more samples, so the stopping rule (and `reached_target`) compares `within`
(`time_s.rse_within`) with `rse_target`, and needs >= MIN_BATCHES batches; `rse` is what two runs of the
same case are compared with (`scripts/aa_check.py` uses exactly this field). The components are in
`telemetry.noise`.

With `events` or `graph`, a short CUPTI window of the same call follows the measurement: if the timer
saw much less time than the device spent in kernels, work escaped the timed stream (a side stream, or
work deferred past the end event) and the record is invalid.

Sampling stops once `within` is under `rse_target` (with at least `min_samples` samples in MIN_BATCHES
batches), or when `budget_s` runs out: then the measurement is flagged as not having reached its target
rather than silently reported as precise.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from solbench.stats import TimeStats, median_rse, summarize
from solbench.telemetry import ClockMonitor

TIMERS = ("events", "graph", "cupti")     # CUDA timers; a CPU run always uses `wall`
_MIN_FLUSH_BYTES = 64 * 2**20
_SPIN_MARGIN = 2.0          # queue-holding spin = host enqueue time of the batch x this
_MIN_SPIN_S = 20e-6
_MAX_SPIN_S = 0.2
_MAX_BATCH = 100
_BATCH_GPU_S = 0.05         # aim for batches of about this much GPU time
_MAX_STARVED = 3            # starved batches in a row before accepting them with a note
_GRAPH_ITERS = 20           # iterations per captured graph (fewer for long calls)
_CUPTI_BATCH = 50
_CROSS_ITERS = 10           # iterations in the CUPTI cross-check window
# events/graph below CUPTI by more than this fraction (and the absolute slack) means work escaped the window
CROSS_CHECK_TOL = 0.25
CROSS_CHECK_SLACK_S = 0.5e-6

MIN_BATCHES = 5             # independent batches before the between-batch noise counts (and the target can be met)
_GROUP_MIN = 5              # batches smaller than this (wall: one sample) are pooled into groups of >= 5
# Process-to-process relative spread of a median that one run cannot see. cuda: from the H200 A/A pair
# (eager softmax + gemm, 14 cases): |differences| up to 3.2% where within-run noise explained <= 0.6%;
# a 1% per-run spread (1.4% on a difference) makes that the largest of 14 at ~2.2 sigma. CPU: not
# estimated, so none is claimed. Re-estimate with scripts/aa_check.py on the device in question.
RUN_TO_RUN_FLOOR = {"cuda": 0.01, "cpu": 0.0}
_CAL_ITERS = 50             # iterations per events batch / CUPTI window of an overhead probe
_CAL_BATCHES = 3
_CAL_SPIN_PROBE_S = 20e-6   # the long probe: a spin of about this long
_CAL_DISAGREE_S = 1e-6      # probes disagreeing by more: the overhead is not constant, say so


@dataclass(frozen=True)
class TimingConfig:
    timer: str = "events"
    rse_target: float = 0.005
    min_samples: int = 10
    max_samples: int = 2000
    budget_s: float = 1.0
    warmup_s: float = 0.025
    flush: bool = True
    cross_check: bool = True         # events/graph: compare with CUPTI kernel time of the same call
    max_discards: int = 5            # throttled batches re-measured before throttling is accepted (and warned)
    throttle_pause_s: float = 0.5
    peaks_at_clock: bool = False     # re-score the compute peak at the SM clock NVML observed
    rse_floor: float | None = None   # run-to-run floor; None: RUN_TO_RUN_FLOOR of the device kind
    event_correction: bool = True    # events: subtract the calibrated per-call event overhead

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise ValueError(f"unknown timer '{self.timer}' (have: {', '.join(TIMERS)})")
        if self.rse_floor is not None and not 0 <= self.rse_floor < 1:
            raise ValueError(f"rse_floor must be in [0, 1), got {self.rse_floor}")

    def floor_for(self, device_kind: str) -> float:
        return self.rse_floor if self.rse_floor is not None else RUN_TO_RUN_FLOOR.get(device_kind, 0.0)


@dataclass(frozen=True)
class Noise:
    """Components of the reported relative standard error of the median (see the module docstring)."""

    sampling: float
    batches: float | None        # None: fewer than MIN_BATCHES batches
    clock: float = 0.0
    overhead: float = 0.0
    floor: float = 0.0

    @property
    def within(self) -> float:
        return max(self.sampling, self.batches or 0.0)

    @property
    def total(self) -> float:
        return math.sqrt(self.within ** 2 + self.clock ** 2 + self.overhead ** 2 + self.floor ** 2)

    def to_json(self) -> dict[str, Any]:
        return {"rse": self.total, "within": self.within, "sampling": self.sampling, "batches": self.batches,
                "clock": self.clock, "overhead": self.overhead, "floor": self.floor}


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
class TimerCache:
    """Per-worker calibrations, so each is measured once per process (keyed by flush size)."""

    event_overhead: dict[int, EventOverhead] = field(default_factory=dict)


@dataclass
class Measurement:
    samples_s: list[float]
    stats: TimeStats             # stats.rse is the reported (total) noise
    timer: str
    reached_target: bool
    rse_target: float
    flush_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    throttled: bool = False                         # throttling persisted: samples kept, record warned
    cross_check: dict[str, Any] | None = None       # events/graph vs CUPTI, when run
    invalid: str | None = None                      # a reason the time cannot be trusted
    noise: Noise | None = None
    overhead_s: float = 0.0                         # subtracted from every sample (events tare)
    correction: dict[str, Any] | None = None        # how the tare was measured, for the record

    def time_json(self) -> dict[str, Any]:
        """The record's `time_s`: the robust summary, the noise (total and within-run), the target, the tare."""
        within = self.noise.within if self.noise else self.stats.rse
        return {**self.stats.to_json(), "rse_within": within, "rse_target": self.rse_target,
                "reached_target": self.reached_target, "overhead_s": self.overhead_s}


Call = Callable[[int], Any]  # call(i) runs iteration i (the caller rotates inputs by i)


def measure(call: Call, device_kind: str, config: TimingConfig, l2_bytes: int | None = None,
            sm_clock_mhz: float | None = None, monitor: ClockMonitor | None = None,
            cache: TimerCache | None = None) -> Measurement:
    monitor = monitor or ClockMonitor.open("cpu")
    if device_kind != "cuda":
        return _measure_wall(call, config, device_kind)
    flush = L2Flush(max(2 * (l2_bytes or 0), _MIN_FLUSH_BYTES) if config.flush else 0)
    cycles_per_s = (sm_clock_mhz or 2000.0) * 1e6
    tare = None
    if config.timer == "events" and config.event_correction:
        tare = _event_overhead(flush, cycles_per_s, cache or TimerCache())
    per_iter_s = _warmup(call, flush, config.warmup_s)
    monitor.mark_before()
    if config.timer == "graph":
        m = _measure_graph(call, flush, config, per_iter_s, monitor)
    elif config.timer == "cupti":
        m = _measure_cupti(call, flush, config, per_iter_s, monitor)
    else:
        m = _measure_events(call, flush, config, per_iter_s, cycles_per_s, monitor, tare)
    monitor.mark_after()
    if config.cross_check and config.timer != "cupti":
        _cross_check(m, call, flush)
    return m


# ---------------------------------------------------------------- noise, stopping rule, throttle handling

def batch_rse(batches: list[list[float]]) -> float | None:
    """Relative standard error of the location from the spread of batch medians (None: too few batches).

    Batches smaller than _GROUP_MIN are pooled with their successors, so one-sample batches (wall) become
    groups of consecutive samples.
    """
    groups: list[list[float]] = []
    cur: list[float] = []
    for b in batches:
        cur = cur + list(b)
        if len(cur) >= _GROUP_MIN:
            groups.append(cur)
            cur = []
    if len(groups) < MIN_BATCHES:
        return None
    meds = [statistics.median(g) for g in groups]
    center = statistics.median(meds)
    if center <= 0:
        return math.inf
    return statistics.stdev(meds) / math.sqrt(len(meds)) / center


def noise_of(batches: list[list[float]], clock: float = 0.0, overhead_s: float = 0.0,
             floor: float = 0.0) -> Noise:
    """The reported noise of the median of all samples in `batches` (overhead_s: the tare's error, absolute)."""
    samples = [x for b in batches for x in b]
    med = statistics.median(samples) if samples else 0.0
    rel_overhead = overhead_s / med if med > 0 else (math.inf if overhead_s else 0.0)
    return Noise(median_rse(samples), batch_rse(batches), clock, rel_overhead, floor)


@dataclass
class _Sampler:
    """Collects batches of samples until the stopping rule says enough; drops throttled batches."""

    config: TimingConfig
    monitor: ClockMonitor
    floor: float = 0.0                  # run-to-run floor for this device kind
    overhead_se_s: float = 0.0          # events tare's standard error
    batches: list[list[float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    discards: int = 0
    throttled: bool = False
    started: float = field(default_factory=time.perf_counter)

    @property
    def samples(self) -> list[float]:
        return [x for b in self.batches for x in b]

    def noise(self) -> Noise:
        return noise_of(self.batches, self.monitor.sm_rel_sd(), self.overhead_se_s, self.floor)

    def _reached(self) -> bool:
        n = sum(len(b) for b in self.batches)
        if n < max(self.config.min_samples, 3):
            return False
        nz = self.noise()
        return nz.batches is not None and nz.within <= self.config.rse_target

    def add(self, batch: list[float], throttle: str | None) -> bool:
        """Keep (or drop) one batch; True when sampling should stop."""
        if throttle and self.discards < self.config.max_discards:
            self.discards += 1
            time.sleep(self.config.throttle_pause_s)   # let the GPU cool down / the clock recover
            self.started += self.config.throttle_pause_s
            return False
        if throttle and not self.throttled:
            self.throttled = True
            self.notes.append(f"throttled: {throttle} persisted after {self.discards} re-measured batches; "
                              f"samples kept, the time is pessimistic")
        self.batches.append(list(batch))
        n = sum(len(b) for b in self.batches)
        out_of_budget = time.perf_counter() - self.started > self.config.budget_s and n >= min(self.config.min_samples, 3)
        return self._reached() or out_of_budget or n >= self.config.max_samples

    def result(self, timer: str, flush_bytes: int) -> Measurement:
        samples = self.samples
        reached = self._reached()
        nz = self.noise()
        notes = list(self.notes)
        if not reached:
            why = (f"only {len(self.batches)} batches (need {MIN_BATCHES} for the between-batch noise)"
                   if nz.batches is None else f"within-run rse {nz.within:.2%}")
            notes.append(f"noise target {self.config.rse_target:.2%} not reached ({why} after {len(samples)} "
                         f"samples)")
        stats = dataclasses.replace(summarize(samples), rse=nz.total)
        return Measurement(samples, stats, timer, reached, self.config.rse_target, flush_bytes, notes,
                           self.throttled, noise=nz)


# ---------------------------------------------------------------- CPU

def _measure_wall(call: Call, config: TimingConfig, device_kind: str = "cpu") -> Measurement:
    i = 0
    warm_until = time.perf_counter() + config.warmup_s
    while i < 2 or time.perf_counter() < warm_until:
        call(i)
        i += 1
    sampler = _Sampler(config, ClockMonitor.open("cpu"), floor=config.floor_for(device_kind))
    while True:
        t0 = time.perf_counter()
        call(i)
        dt = time.perf_counter() - t0
        i += 1
        if sampler.add([dt], None):
            return sampler.result("wall", 0)


# ---------------------------------------------------------------- CUDA

class L2Flush:
    """Evicts the L2 by rewriting a buffer at least twice its size.

    bitwise_not on uint8 (read + write of every byte) rather than zero_(): its kernel has a name no
    implementation is likely to launch, so the CUPTI timer can recognise and exclude it by name.
    """

    def __init__(self, nbytes: int):
        import torch

        self.nbytes = nbytes
        self.buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda") if nbytes else None

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.bitwise_not_()


def _warmup(call: Call, flush: L2Flush, warmup_s: float) -> float:
    """Compile, autotune, allocate; returns a first (pessimistic: includes a sync) time per iteration."""
    import torch

    i = 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while i < 2 or time.perf_counter() - t0 < warmup_s:
        flush()
        call(i)
        i += 1
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / i


def _batch_size(per_iter_s: float, have: int, config: TimingConfig, cap: int = _MAX_BATCH) -> int:
    remaining = max(config.min_samples - have, 5)
    batch = int(min(cap, max(5, remaining, _BATCH_GPU_S / max(per_iter_s, 1e-6))))
    return max(1, min(batch, config.max_samples - have))


@dataclass
class _EventBatch:
    samples: list[float]          # raw elapsed seconds per call, event pair included
    starved: bool                 # the spin ran out before the batch was queued: launch gaps inside
    enqueue_s: float              # host time to queue one iteration


def _event_batch(call: Call, flush: "L2Flush", batch: int, spin_s: float, cycles_per_s: float,
                 i0: int, monitor: ClockMonitor | None = None) -> tuple[_EventBatch, str | None]:
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
    return _EventBatch([s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)], starved, enqueue_s), throttle


def _spin_for(enqueue_s: float, batch: int) -> float:
    return min(_MAX_SPIN_S, max(_MIN_SPIN_S, enqueue_s * batch * _SPIN_MARGIN))


def apply_overhead(samples: list[float], tare: EventOverhead | None) -> list[float]:
    """Subtract the tare; never below the tiny probe's device time, never raising a sample, never < 0."""
    if tare is None:
        return list(samples)
    return [max(x - tare.overhead_s, min(x, tare.floor_s), 0.0) for x in samples]


def _measure_events(call: Call, flush: "L2Flush", config: TimingConfig, per_iter_s: float,
                    cycles_per_s: float, monitor: ClockMonitor, tare: EventOverhead | None) -> Measurement:
    enqueue_s = per_iter_s  # pessimistic until measured
    usable = tare if tare is not None and tare.overhead_s > 0 else None   # None: nothing to subtract
    sampler = _Sampler(config, monitor, floor=config.floor_for("cuda"),
                       overhead_se_s=usable.se_s if usable else 0.0)
    starved_in_row = 0
    at_floor = total = 0
    i = 0
    while True:
        batch = _batch_size(per_iter_s, len(sampler.samples), config)
        # Keep the batch short enough for the longest spin to cover its enqueue time.
        batch = max(1, min(batch, int(_MAX_SPIN_S / (_SPIN_MARGIN * max(enqueue_s, 1e-7)))))
        b, throttle = _event_batch(call, flush, batch, _spin_for(enqueue_s, batch), cycles_per_s, i, monitor)
        i += batch
        enqueue_s = b.enqueue_s
        if b.starved and starved_in_row < _MAX_STARVED:
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
            m = sampler.result("events", flush.nbytes)
            _record_tare(m, tare, usable, at_floor, total)
            return m


def _record_tare(m: Measurement, tare: EventOverhead | None, usable: EventOverhead | None,
                 at_floor: int, total: int) -> None:
    m.overhead_s = usable.overhead_s if usable else 0.0
    m.correction = tare.to_json() if tare else {"method": "none", "overhead_s": 0.0,
                                                 "note": "event overhead correction off"}
    if tare is not None and tare.note:
        m.notes.append(tare.note)
    if usable is not None and total and at_floor > total // 2:
        m.notes.append(f"events: {at_floor}/{total} samples hit the floor of the overhead correction "
                       f"({usable.floor_s * 1e6:.2f} us): the call is too short for this timer, use --timer cupti")


def _event_overhead(flush: "L2Flush", cycles_per_s: float, cache: TimerCache) -> EventOverhead:
    if flush.nbytes not in cache.event_overhead:
        cache.event_overhead[flush.nbytes] = calibrate_events(flush, cycles_per_s)
    return cache.event_overhead[flush.nbytes]


def calibrate_events(flush: "L2Flush", cycles_per_s: float) -> EventOverhead:
    """Measure the events timer's fixed per-call cost: events vs CUPTI on a tiny and a ~20 us probe."""
    import torch

    tiny = torch.ones(1024, device="cuda")
    probes: list[tuple[str, Call]] = [
        ("tiny add (4 KiB)", lambda i: tiny.add_(1.0)),
        (f"spin ~{_CAL_SPIN_PROBE_S * 1e6:.0f} us", lambda i: torch.cuda._sleep(int(_CAL_SPIN_PROBE_S * cycles_per_s))),
    ]
    try:
        names = _flush_kernel_names(flush)
        found = [_probe(name, fn, flush, names, cycles_per_s) for name, fn in probes]
    except Exception as exc:  # no CUPTI (a profiler already running, no permission): do not guess
        return EventOverhead(0.0, 0.0, 0.0, flush.nbytes, (), f"events overhead not calibrated (CUPTI "
                             f"unavailable: {type(exc).__name__}: {exc}); times include the event pair's "
                             f"fixed cost (~3 us per call on an H200)")
    return overhead_from(found, flush.nbytes)


def _probe(name: str, fn: Call, flush: "L2Flush", flush_names: frozenset[str],
           cycles_per_s: float) -> dict[str, Any]:
    """Events and CUPTI medians (with standard errors) of one probe kernel, same flush sequence."""
    per_iter = _warmup(fn, flush, 0.005)
    events: list[float] = []
    for _ in range(_CAL_BATCHES + _MAX_STARVED):
        b, _ = _event_batch(fn, flush, _CAL_ITERS, _spin_for(per_iter, _CAL_ITERS), cycles_per_s, 0)
        per_iter = max(per_iter, b.enqueue_s)
        if not b.starved:
            events += b.samples
        if len(events) >= _CAL_BATCHES * _CAL_ITERS:
            break
    device, _, _ = _cupti_window(fn, flush, flush_names, _CAL_ITERS, 0, None)
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
    if max(diffs) - min(diffs) > _CAL_DISAGREE_S:
        note = (f"events overhead differs between probe kernels ({', '.join(f'{d * 1e6:.2f}' for d in diffs)} us): "
                f"the correction ({mean * 1e6:.2f} us) is uncertain by +-{spread * 1e6:.2f} us")
    if mean < 0:
        note = (f"events overhead came out negative ({mean * 1e6:.2f} us): not subtracted")
    floor = min(p["cupti_median_s"] for p in probes)
    return EventOverhead(max(mean, 0.0), math.sqrt(se_stat ** 2 + spread ** 2), floor, flush_bytes,
                         tuple(probes), note)


def _measure_graph(call: Call, flush: L2Flush, config: TimingConfig, per_iter_s: float,
                   monitor: ClockMonitor) -> Measurement:
    import torch

    n = max(1, min(_GRAPH_ITERS, int(0.02 / max(per_iter_s, 1e-6))))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):        # capture needs a warm-up on a side stream first
        for k in range(3):
            flush()
            call(k)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    work, flushes = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(work):
            for k in range(n):
                flush()
                call(k)
    except Exception as exc:
        raise RuntimeError(f"--timer graph: the call cannot be captured in a CUDA graph ({type(exc).__name__}: "
                           f"{exc}); use --timer events") from exc
    with torch.cuda.graph(flushes):
        for _ in range(n):
            flush()
    cycles = int(_MIN_SPIN_S * 4 * 2e9)   # a short spin so the replay is queued before the start event runs

    def timed(g: Any) -> tuple[Any, Any]:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)
        a.record()
        g.replay()
        b.record()
        return a, b

    sampler = _Sampler(config, monitor, floor=config.floor_for("cuda"))
    while True:
        pairs = [(timed(flushes), timed(work)) for _ in range(5)]
        throttle = monitor.during()
        torch.cuda.synchronize()
        flush_t = sorted(f[0].elapsed_time(f[1]) / 1e3 for f, _ in pairs)[len(pairs) // 2]
        batch = [max(w[0].elapsed_time(w[1]) / 1e3 - flush_t, 0.0) / n for _, w in pairs]
        if sampler.add(batch, throttle):
            m = sampler.result("graph", flush.nbytes)
            m.notes.append(f"{n} iterations per graph; the flushes' own graph time subtracted")
            return m


def _measure_cupti(call: Call, flush: L2Flush, config: TimingConfig, per_iter_s: float,
                   monitor: ClockMonitor) -> Measurement:
    flush_names = _flush_kernel_names(flush)
    sampler = _Sampler(config, monitor, floor=config.floor_for("cuda"))
    i = 0
    while True:
        batch = _batch_size(per_iter_s, len(sampler.samples), config, cap=_CUPTI_BATCH)
        samples, note, throttle = _cupti_window(call, flush, flush_names, batch, i, monitor)
        i += batch
        if note and note not in sampler.notes:
            sampler.notes.append(note)
        if sampler.add(samples, throttle):
            return sampler.result("cupti", flush.nbytes)


def _flush_kernel_names(flush: L2Flush) -> frozenset[str]:
    import torch

    if flush.buf is None:
        return frozenset()
    torch.cuda.synchronize()
    with _profile() as prof:
        for _ in range(3):
            flush()
        torch.cuda.synchronize()
    return frozenset(name for _, _, name in gpu_intervals(prof))


def _profile() -> Any:
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CUDA])


def _cupti_window(call: Call, flush: L2Flush, flush_names: frozenset[str], batch: int, i0: int,
                  monitor: ClockMonitor | None) -> tuple[list[float], str | None, str | None]:
    """Per-iteration device time of `batch` calls: (samples, note, throttle reason)."""
    import torch

    torch.cuda.synchronize()
    throttle = None
    with _profile() as prof:
        for k in range(batch):
            flush()
            call(i0 + k)
        if monitor is not None:
            throttle = monitor.during()
        torch.cuda.synchronize()
    samples, note = split_iterations(gpu_intervals(prof), flush_names, batch)
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
                     batch: int) -> tuple[list[float], str | None]:
    """Per-iteration device seconds: each flush starts an iteration; the rest is merged work.

    When the flushes cannot be told apart (no flush, or the implementation launches the same kernel),
    the window's merged work is spread evenly over the iterations and a note says so.
    """
    flushes = [s for s, _, name in events if name in flush_names]
    work = [(s, e) for s, e, name in events if name not in flush_names]
    if len(flushes) != batch:
        per = merged_length(work) / 1e9 / max(batch, 1)
        note = (f"CUPTI: found {len(flushes)} flush kernels for {batch} iterations; per-iteration times are "
                f"the window's average") if flush_names else None
        return [per] * batch, note
    buckets: list[list[tuple[int, int]]] = [[] for _ in range(batch)]
    for s, e in work:
        j = sum(1 for f in flushes if f <= s) - 1
        buckets[max(j, 0)].append((s, e))
    return [merged_length(b) / 1e9 for b in buckets], None


def _cross_check(m: Measurement, call: Call, flush: L2Flush) -> None:
    """Compare the timer with CUPTI's device time of the same call; flag work that escaped the window."""
    try:
        samples, _, _ = _cupti_window(call, flush, _flush_kernel_names(flush), _CROSS_ITERS, 10_000, None)
    except Exception as exc:  # no CUPTI (e.g. a profiler already running): say so, do not guess
        m.notes.append(f"CUPTI cross-check unavailable ({type(exc).__name__}: {exc})")
        return
    device_s = sorted(samples)[len(samples) // 2]
    timer_s = m.stats.median
    ok = timer_s >= device_s * (1 - CROSS_CHECK_TOL) - CROSS_CHECK_SLACK_S
    m.cross_check = {"timer": m.timer, "timer_median_s": timer_s, "cupti_median_s": device_s,
                     "ratio": timer_s / device_s if device_s > 0 else None, "ok": ok}
    if not ok:
        m.invalid = (f"work outside the timed window: the {m.timer} timer saw {timer_s * 1e6:.2f} us per call but "
                     f"the GPU ran {device_s * 1e6:.2f} us of kernels per call (CUPTI, all streams); "
                     f"work on a side stream or deferred past the end event is not measured")
    elif device_s > 0 and timer_s > 1.5 * device_s and timer_s - device_s > 2e-6:
        m.notes.append(f"{m.timer} time is {timer_s / device_s:.1f}x the kernels' device time "
                       f"({device_s * 1e6:.2f} us, CUPTI): gaps or host work inside the timed window")


def describe(m: Measurement) -> str:
    rse = m.stats.rse
    return f"{m.timer}: median {m.stats.median * 1e6:.2f} us over {m.stats.n} samples, rse " + (
        "n/a" if math.isinf(rse) else f"{rse:.2%}")


# ---------------------------------------------------------------- timer integrity

def _guarded_attrs() -> list[tuple[str, Any, str]]:
    """(label, owner, attribute) of everything a measurement or a correctness check relies on."""
    import torch

    from solbench import check, stats, telemetry, worker
    import solbench.timing as this

    out: list[tuple[str, Any, str]] = []
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "sleep"):
        out.append((f"time.{name}", time, name))
    for name in ("synchronize", "Event", "Stream", "current_stream", "stream", "_sleep", "graph", "CUDAGraph"):
        out.append((f"torch.cuda.{name}", torch.cuda, name))
    for name in ("record", "elapsed_time", "synchronize", "query", "wait"):
        out.append((f"torch.cuda.Event.{name}", torch.cuda.Event, name))
    for name in ("replay", "capture_begin", "capture_end"):
        out.append((f"torch.cuda.CUDAGraph.{name}", torch.cuda.CUDAGraph, name))
    out.append(("torch.profiler.profile", torch.profiler, "profile"))
    for name in ("equal", "isfinite", "zeros_like"):
        out.append((f"torch.{name}", torch, name))
    for name in ("to", "abs", "max", "sum", "clone", "copy_", "__sub__", "__eq__"):
        out.append((f"torch.Tensor.{name}", torch.Tensor, name))
    out.append(("torch.linalg.vector_norm", torch.linalg, "vector_norm"))
    for mod in (this, check, stats, telemetry, worker):
        for name, value in vars(mod).items():
            if isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", "") == mod.__name__:
                out.append((f"{mod.__name__}.{name}", mod, name))
    return out


_MISSING = object()


@dataclass(frozen=True)
class Guard:
    """Identity snapshot of the timing and checking functions, taken before any implementation is imported."""

    entries: tuple[tuple[str, Any, str, Any], ...]

    @classmethod
    def capture(cls) -> "Guard":
        return cls(tuple((label, owner, attr, getattr(owner, attr, _MISSING)) for label, owner, attr in _guarded_attrs()))

    def tampered(self) -> list[str]:
        return [label for label, owner, attr, value in self.entries if getattr(owner, attr, _MISSING) is not value]

    def restore(self) -> None:
        for _, owner, attr, value in self.entries:
            if getattr(owner, attr, _MISSING) is not value and value is not _MISSING:
                setattr(owner, attr, value)
