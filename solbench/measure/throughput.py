"""The best time per call of a call repeated back to back: what a ceiling (a calibration) is made of.

`measure` answers "how long does one call take", with the L2 flushed and the calls spaced by the
flush. A ceiling asks something else: the highest rate the device sustains on a large, simple
operation, so the calls run back to back and the best batch counts. On a GPU, CUDA events bracket a
batch of calls (long enough that the event pair and launch gaps are a small share); on a CPU each
call is timed alone (they are long) and the best counts.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

BATCH_S = 0.02       # each timed GPU batch lasts at least this long
MAX_REPS = 200
MIN_REPS = 3
BATCHES = 5          # best of this many batches

Thunk = Callable[[], Any]


class BestTime(float):
    """The best seconds per call, carrying `spread` = (median - best) / median over the repeats it was
    the best of: how precisely a ceiling made of it is known. A float, so callers that only want the
    time need not care (`spread_of` reads it back from any float)."""

    spread: float | None

    def __new__(cls, seconds: float, spread: float | None = None) -> "BestTime":
        obj = super().__new__(cls, seconds)
        obj.spread = spread
        return obj


def spread_of(t: float) -> float | None:
    return getattr(t, "spread", None)


def relative_spread(times: list[float]) -> float | None:
    """(median - best) / median of repeated timings; None for fewer than two."""
    if len(times) < 2:
        return None
    ordered = sorted(times)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return (median - ordered[0]) / median if median > 0 else None


def best_batched_cuda_s(fn: Thunk, batches: int = BATCHES, on_busy: Callable[[], object] | None = None) -> BestTime:
    """Best time per call: CUDA events around a batch of back-to-back calls, best of `batches`.

    `on_busy` runs while a batch is still on the GPU (e.g. a clock sample, so NVML sees the clock under load).
    """
    import torch

    fn()                                  # warm-up: allocations, cuBLAS heuristics, clocks ramp
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    estimate = max(time.perf_counter() - t0, 1e-6)
    reps = max(MIN_REPS, min(MAX_REPS, math.ceil(BATCH_S / estimate)))
    per_call: list[float] = []
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        if on_busy is not None:
            on_busy()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / 1e3 / reps)
    return BestTime(min(per_call), relative_spread(per_call))


def best_call_wall_s(fn: Thunk, repeats: int) -> BestTime:
    """Best time of one call on the host clock over `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return BestTime(min(times), relative_spread(times))
