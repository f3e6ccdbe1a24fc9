"""How long does one call take? Timers, L2 flushing, adaptive stopping, clock checks, timer integrity.

Timers (every record names the one that produced it):
- `events` (CUDA default): two CUDA events around each call, the L2 flushed before each call outside the
  events. A spin kernel holds the stream while the host queues a whole batch, so the GPU runs the batch
  back to back and the events see kernels, not Python's launch overhead. If the spin ran out before the
  host finished queueing (the GPU waited on the host: launch gaps inside the events), the batch is
  thrown away and the spin lengthened.
- `graph`: n iterations (flush + call) captured in one CUDA graph; a graph of the n flushes alone is
  timed too and subtracted; one sample = (graph - flushes) / n.
- `cupti`: device-side durations of every GPU activity on every stream from torch.profiler (CUPTI),
  overlaps merged, the flush kernels excluded; one sample per iteration.
- `wall` (CPU): a monotonic clock around each call.

With `events` or `graph`, a short CUPTI window of the same call follows the measurement: if the timer
saw much less time than the device spent in kernels, work escaped the timed stream (a side stream, or
work deferred past the end event) and the record is invalid.

Sampling stops once the relative standard error of the median is under `rse_target` (and at least
`min_samples` were taken), or when `budget_s` runs out: then the measurement is flagged as not having
reached its target rather than silently reported as precise.
"""

from __future__ import annotations

import math
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

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise ValueError(f"unknown timer '{self.timer}' (have: {', '.join(TIMERS)})")


@dataclass
class Measurement:
    samples_s: list[float]
    stats: TimeStats
    timer: str
    reached_target: bool
    rse_target: float
    flush_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    throttled: bool = False                         # throttling persisted: samples kept, record warned
    cross_check: dict[str, Any] | None = None       # events/graph vs CUPTI, when run
    invalid: str | None = None                      # a reason the time cannot be trusted

    def time_json(self) -> dict[str, Any]:
        """The record's `time_s`: the robust summary plus the noise target and whether it was reached."""
        return {**self.stats.to_json(), "rse_target": self.rse_target, "reached_target": self.reached_target}


Call = Callable[[int], Any]  # call(i) runs iteration i (the caller rotates inputs by i)


def measure(call: Call, device_kind: str, config: TimingConfig, l2_bytes: int | None = None,
            sm_clock_mhz: float | None = None, monitor: ClockMonitor | None = None) -> Measurement:
    monitor = monitor or ClockMonitor.open("cpu")
    if device_kind != "cuda":
        return _measure_wall(call, config)
    flush = L2Flush(max(2 * (l2_bytes or 0), _MIN_FLUSH_BYTES) if config.flush else 0)
    per_iter_s = _warmup(call, flush, config.warmup_s)
    monitor.mark_before()
    if config.timer == "graph":
        m = _measure_graph(call, flush, config, per_iter_s, monitor)
    elif config.timer == "cupti":
        m = _measure_cupti(call, flush, config, per_iter_s, monitor)
    else:
        m = _measure_events(call, flush, config, per_iter_s, sm_clock_mhz, monitor)
    monitor.mark_after()
    if config.cross_check and config.timer != "cupti":
        _cross_check(m, call, flush)
    return m


# ---------------------------------------------------------------- stopping rule and throttle handling

def _enough(samples: list[float], config: TimingConfig, started: float) -> tuple[bool, bool]:
    """(stop, reached_target)."""
    n = len(samples)
    reached = n >= config.min_samples and median_rse(samples) <= config.rse_target
    out_of_budget = time.perf_counter() - started > config.budget_s and n >= min(config.min_samples, 3)
    return reached or out_of_budget or n >= config.max_samples, reached


@dataclass
class _Sampler:
    """Collects batches of samples until the stopping rule says enough; drops throttled batches."""

    config: TimingConfig
    monitor: ClockMonitor
    samples: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    discards: int = 0
    throttled: bool = False
    started: float = field(default_factory=time.perf_counter)

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
        self.samples += batch
        stop, _ = _enough(self.samples, self.config, self.started)
        return stop

    def result(self, timer: str, flush_bytes: int) -> Measurement:
        reached = len(self.samples) >= self.config.min_samples and median_rse(self.samples) <= self.config.rse_target
        notes = list(self.notes)
        if not reached:
            notes.append(f"noise target {self.config.rse_target:.2%} not reached "
                         f"(rse {median_rse(self.samples):.2%} after {len(self.samples)} samples)")
        return Measurement(self.samples, summarize(self.samples), timer, reached, self.config.rse_target,
                           flush_bytes, notes, self.throttled)


# ---------------------------------------------------------------- CPU

def _measure_wall(call: Call, config: TimingConfig) -> Measurement:
    i = 0
    warm_until = time.perf_counter() + config.warmup_s
    while i < 2 or time.perf_counter() < warm_until:
        call(i)
        i += 1
    sampler = _Sampler(config, ClockMonitor.open("cpu"))
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


def _measure_events(call: Call, flush: L2Flush, config: TimingConfig, per_iter_s: float,
                    sm_clock_mhz: float | None, monitor: ClockMonitor) -> Measurement:
    import torch

    # torch.cuda._sleep counts SM cycles; at a lower real clock the spin only lasts longer, which is safe.
    cycles_per_s = (sm_clock_mhz or 2000.0) * 1e6
    enqueue_s = per_iter_s  # pessimistic until measured
    sampler = _Sampler(config, monitor)
    starved_in_row = 0
    i = 0
    while True:
        batch = _batch_size(per_iter_s, len(sampler.samples), config)
        # Keep the batch short enough for the longest spin to cover its enqueue time.
        batch = max(1, min(batch, int(_MAX_SPIN_S / (_SPIN_MARGIN * max(enqueue_s, 1e-7)))))
        spin_s = min(_MAX_SPIN_S, max(_MIN_SPIN_S, enqueue_s * batch * _SPIN_MARGIN))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
        spin_done = torch.cuda.Event()
        torch.cuda._sleep(int(spin_s * cycles_per_s))
        spin_done.record()
        q0 = time.perf_counter()
        for k in range(batch):
            flush()
            starts[k].record()
            call(i)
            ends[k].record()
            i += 1
        enqueue_s = (time.perf_counter() - q0) / batch
        # If the spin already finished, the GPU caught up with the host somewhere in this batch and the
        # events may contain launch gaps: drop the batch and spin longer next time.
        starved = spin_done.query()
        throttle = monitor.during()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
        if starved and starved_in_row < _MAX_STARVED:
            starved_in_row += 1
            continue
        if starved and not any("host" in n for n in sampler.notes):
            sampler.notes.append("the GPU waited on the host inside timed batches (the call synchronises or "
                                 "its host work outlasts the spin): events include launch gaps")
        starved_in_row = 0
        if sampler.add(samples, throttle):
            return sampler.result("events", flush.nbytes)


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

    sampler = _Sampler(config, monitor)
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
    sampler = _Sampler(config, monitor)
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
