"""What timing a call on a CPU needs that a GPU timer gets from the device: cold caches, an unshared core.

Caches. Timed back to back, a CPU op finds its inputs in the caches (L2s and L3: 34 MiB on a 2-core
EPYC slice) while its ceiling (calibrate.measure_cpu) is DRAM bandwidth, and it scores above the speed
of light. `CacheFlush` rewrites a buffer of CACHE_MULTIPLE times all the caches before every timed
call, outside the timed window, as the GPU timers flush the L2. It runs as a torch op, so torch's
threads sweep every core's private cache too, and it reads and writes (bitwise_not_) like the GPU
flush: the caches are left full of dirty lines, so an op pays the write-back of as many lines as it
brings in, much as it would pay its own outputs' write-back in a model, where a cache-sized op would
otherwise leave that until after the timer stopped. Four times the caches, not two: a CPU cache does
not replace strictly least-recently-used lines, and after a sweep of twice its size a measurable
share of the previous data was still found in it.

Preemption. On a machine shared with other processes the OS takes cores away in the middle of a
call: torch's threads then wait for each other and a 40 us op reads 4 ms (a scheduler time slice),
which measures the neighbours, not the op. `Preemptions` counts this process's involuntary context
switches (getrusage) around a call; `timed_call` times it again, on cold caches again, when one
happened, and says how many samples had to be kept anyway.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from solbench.measure.config import Call

try:
    import resource
except ImportError:  # Windows: no getrusage, so preemption cannot be seen (and is not retimed)
    resource = None  # type: ignore[assignment]

CACHE_MULTIPLE = 4
MIN_FLUSH_BYTES = 64 * 2**20
UNKNOWN_CACHE_FLUSH_BYTES = 256 * 2**20     # when the cache size is unknown: larger than any desktop L3
RETRIES = 3                                  # a preempted call is timed again at most this many times


def cpu_flush_bytes(cache_bytes: int | None, enabled: bool = True) -> int:
    """Size of the buffer that evicts caches of `cache_bytes` (0: flushing off)."""
    if not enabled:
        return 0
    if not cache_bytes:
        return UNKNOWN_CACHE_FLUSH_BYTES
    return max(CACHE_MULTIPLE * cache_bytes, MIN_FLUSH_BYTES)


class CacheFlush:
    """Evicts a CPU's caches by rewriting a buffer several times their size; a no-op of size 0."""

    def __init__(self, nbytes: int):
        import torch

        self.nbytes = nbytes
        # Filled once so its pages exist: first-touch page faults would make the first flushes slow.
        self.buf = torch.zeros(nbytes, dtype=torch.uint8) if nbytes else None

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.bitwise_not_()


def preemptions() -> int:
    """Involuntary context switches of this process so far (all its threads); 0 where unknown."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw if resource is not None else 0


@dataclass
class Preemptions:
    """How often calls were preempted while being timed: `retimed` were timed again, `kept` had to stay."""

    retimed: int = 0
    kept: int = 0
    samples: int = 0

    def note(self) -> str | None:
        """A record note when preempted samples were kept (they are slow by the neighbours' doing)."""
        if not self.kept:
            return None
        return (f"the CPU was busy: {self.kept} of {self.samples} samples were preempted by other processes "
                f"{RETRIES + 1} times in a row and kept (the median is pessimistic)")


def timed_call(call: Call, i: int, flush: Callable[[], None], seen: Preemptions) -> float:
    """Seconds of one call on cold caches, timed again while another process preempted it."""
    seen.samples += 1
    for attempt in range(RETRIES + 1):
        flush()
        before = preemptions()
        t0 = time.perf_counter()
        call(i)
        dt = time.perf_counter() - t0
        if preemptions() == before:
            return dt
        if attempt < RETRIES:
            seen.retimed += 1
    seen.kept += 1
    return dt


@dataclass(frozen=True)
class BestCall:
    """The best time of one call over a window of calls; `clean` when it was not preempted."""

    best_s: float
    calls: int
    clean: bool


def best_unpreempted_s(fn: Callable[[], object], seconds: float, min_calls: int = 3) -> BestCall:
    """Best time of `fn()` over at least `seconds` and `min_calls` calls, counting unpreempted calls only.

    Back to back, no flush: what a ceiling (calibrate) wants. The window grows up to four times while
    every call was preempted; then the best preempted call is returned with `clean` False.
    """
    fn()                                        # warm-up: allocation, first-touch page faults
    best_clean = best_any = float("inf")
    calls = 0
    start = time.perf_counter()
    while True:
        before = preemptions()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        calls += 1
        best_any = min(best_any, dt)
        if preemptions() == before:
            best_clean = min(best_clean, dt)
        elapsed = time.perf_counter() - start
        if calls >= min_calls and (elapsed >= seconds and best_clean < float("inf") or elapsed >= 4 * seconds):
            break
    clean = best_clean < float("inf")
    return BestCall(best_clean if clean else best_any, calls, clean)
