"""How long does one call take? Timers, L2 flushing and adaptive stopping.

`events` (CUDA): each timed call sits between two CUDA events; the L2 is flushed before each call,
outside the events. A spin kernel holds the stream while the host queues a batch of iterations, so
the GPU runs them back to back and the events measure the kernels, not Python's launch overhead.
`wall` (CPU): a monotonic clock around each call.

Sampling stops once the relative standard error of the median is under `rse_target` (and at least
`min_samples` were taken), or when the per-measurement `budget_s` runs out: then the measurement is
flagged as not having reached its target rather than silently reported as precise.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from solbench.stats import TimeStats, median_rse, summarize

TIMERS = ("events", "wall")
_MIN_FLUSH_BYTES = 64 * 2**20
_SPIN_MARGIN = 1.5        # queue-holding spin = host enqueue time x this
_MAX_SPIN_S = 0.05
_MAX_BATCH = 100


@dataclass(frozen=True)
class TimingConfig:
    timer: str = "events"
    rse_target: float = 0.005
    min_samples: int = 10
    max_samples: int = 2000
    budget_s: float = 1.0
    warmup_s: float = 0.025
    flush: bool = True


@dataclass
class Measurement:
    samples_s: list[float]
    stats: TimeStats
    timer: str
    reached_target: bool
    flush_bytes: int = 0
    notes: list[str] = field(default_factory=list)


Call = Callable[[int], Any]  # call(i) runs iteration i (the caller rotates inputs by i)


def measure(call: Call, device_kind: str, config: TimingConfig, l2_bytes: int | None = None,
            sm_clock_mhz: float | None = None) -> Measurement:
    if device_kind == "cuda":
        if config.timer != "events":
            raise ValueError(f"timer '{config.timer}' is not available here (have: events)")
        return _measure_events(call, config, l2_bytes, sm_clock_mhz)
    return _measure_wall(call, config)


def _enough(samples: list[float], config: TimingConfig, started: float) -> tuple[bool, bool]:
    """(stop, reached_target)."""
    n = len(samples)
    reached = n >= config.min_samples and median_rse(samples) <= config.rse_target
    out_of_budget = time.perf_counter() - started > config.budget_s and n >= min(config.min_samples, 3)
    return reached or out_of_budget or n >= config.max_samples, reached


def _measure_wall(call: Call, config: TimingConfig) -> Measurement:
    i = 0
    warm_until = time.perf_counter() + config.warmup_s
    while i < 2 or time.perf_counter() < warm_until:
        call(i)
        i += 1
    samples: list[float] = []
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - t0)
        i += 1
        stop, reached = _enough(samples, config, started)
        if stop:
            return Measurement(samples, summarize(samples), "wall", reached)


def _measure_events(call: Call, config: TimingConfig, l2_bytes: int | None,
                    sm_clock_mhz: float | None) -> Measurement:
    import torch

    flush_bytes = max(2 * (l2_bytes or 0), _MIN_FLUSH_BYTES) if config.flush else 0
    flush_buf = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda") if flush_bytes else None
    cycles_per_s = (sm_clock_mhz or 1500.0) * 1e6

    def flush() -> None:
        if flush_buf is not None:
            flush_buf.zero_()

    # Warm-up: compile, autotune, allocate; also gives a first estimate of one iteration's time.
    i = 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while i < 2 or time.perf_counter() - t0 < config.warmup_s:
        flush()
        call(i)
        i += 1
        torch.cuda.synchronize()
    per_iter_s = (time.perf_counter() - t0) / i

    samples: list[float] = []
    enqueue_s_per_iter = per_iter_s  # pessimistic until measured
    started = time.perf_counter()
    while True:
        remaining = max(config.min_samples - len(samples), 5)
        batch = int(min(_MAX_BATCH, max(5, remaining, 0.05 / max(per_iter_s, 1e-6))))
        batch = min(batch, config.max_samples - len(samples)) or 1
        spin_s = min(_MAX_SPIN_S, enqueue_s_per_iter * batch * _SPIN_MARGIN)
        torch.cuda._sleep(int(spin_s * cycles_per_s))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
        q0 = time.perf_counter()
        for k in range(batch):
            flush()
            starts[k].record()
            call(i)
            ends[k].record()
            i += 1
        enqueue_s_per_iter = (time.perf_counter() - q0) / batch
        torch.cuda.synchronize()
        samples += [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
        stop, reached = _enough(samples, config, started)
        if stop:
            notes = []
            if not reached:
                notes.append(f"noise target {config.rse_target:.2%} not reached "
                             f"(rse {median_rse(samples):.2%} after {len(samples)} samples)")
            return Measurement(samples, summarize(samples), "events", reached, flush_bytes, notes)


def describe(m: Measurement) -> str:
    rse = m.stats.rse
    return f"{m.timer}: median {m.stats.median * 1e6:.2f} us over {m.stats.n} samples, rse " + (
        "n/a" if math.isinf(rse) else f"{rse:.2%}")
