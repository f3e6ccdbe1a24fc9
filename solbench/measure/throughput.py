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


def best_batched_cuda_s(fn: Thunk, batches: int = BATCHES, on_busy: Callable[[], object] | None = None) -> float:
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
    best = math.inf
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
        best = min(best, start.elapsed_time(end) / 1e3 / reps)
    return best


def best_call_wall_s(fn: Thunk, repeats: int) -> float:
    """Best time of one call on the host clock over `repeats` calls, after one warm-up call."""
    fn()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
