"""What every timer is given (TimerContext) and the steps they share: warm-up and batch sizing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from solbench.measure.config import Call, Measurement, TimerCache, TimingConfig
from solbench.measure.cpu import CacheFlush
from solbench.measure.l2flush import L2Flush
from solbench.measure.nvtx import OFF, Window
from solbench.telemetry import ClockMonitor

MAX_BATCH = 100
BATCH_GPU_S = 0.05          # aim for batches of about this much GPU time
DEFAULT_SM_HZ = 2e9         # SM clock assumed when NVML gives none (spins then last longer at lower clocks)


@dataclass
class TimerContext:
    """One measurement's set-up: the call, the knobs, the flush, the clock monitor and the process's cache."""

    call: Call
    config: TimingConfig
    device_kind: str                        # cuda | cpu
    flush: L2Flush | CacheFlush             # the GPU's L2, or a CPU's caches
    monitor: ClockMonitor
    cache: TimerCache
    sync: Callable[[], None] | None = None  # waits for the device; None on a CPU
    cycles_per_s: float = DEFAULT_SM_HZ     # SM clock: torch.cuda._sleep counts cycles
    window: Window = field(default_factory=lambda: OFF.window(""))  # --nvtx: opened after the warm-up

    def warm_up(self) -> float:
        """Warm the call up (compile, autotune, allocate) and mark the clocks; a first time per iteration.

        Every timer calls this once, right before its first timed batch.
        """
        per_iter_s = warm(self.call, self.flush, self.config.warmup_s, self.sync)
        self.monitor.mark_before()
        self.window.open()       # the timed window starts here; measure() closes it when the timer returns
        return per_iter_s


Timer = Callable[[TimerContext], Measurement]


def warm(call: Call, flush: L2Flush | CacheFlush, seconds: float, sync: Callable[[], None] | None) -> float:
    """Run flush + call for `seconds` (at least twice); the time per iteration (pessimistic: includes a sync)."""
    i = 0
    if sync is not None:
        sync()
    t0 = time.perf_counter()
    while i < 2 or time.perf_counter() - t0 < seconds:
        flush()
        call(i)
        i += 1
        if sync is not None:
            sync()
    return (time.perf_counter() - t0) / i


def batch_size(per_iter_s: float, have: int, config: TimingConfig, cap: int = MAX_BATCH) -> int:
    """Iterations in the next batch: about BATCH_GPU_S of work, enough for min_samples, never past max_samples."""
    remaining = max(config.min_samples - have, 5)
    batch = int(min(cap, max(5, remaining, BATCH_GPU_S / max(per_iter_s, 1e-6))))
    return max(1, min(batch, config.max_samples - have))
