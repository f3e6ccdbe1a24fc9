"""The `wall` timer: a monotonic host clock around each call.

A CPU device is always timed this way: each call on cold caches (the flush is measure.cpu's
CacheFlush), and timed again when another process preempted it (measure.cpu.timed_call). On a GPU
it is the user-visible latency of one call: the
L2 is flushed and the device drained before the clock starts, and the clock stops once the device
has finished (a device-wide synchronise, so work on any stream counts); launch overhead and Python
are included, which is the point of choosing it there.
"""

from __future__ import annotations

import time

from solbench.measure.config import Measurement
from solbench.measure.cpu import Preemptions, timed_call
from solbench.measure.sampler import Sampler
from solbench.measure.timers.base import TimerContext


def measure_wall(ctx: TimerContext) -> Measurement:
    ctx.warm_up()
    call, flush, sync = ctx.call, ctx.flush, ctx.sync
    sampler = Sampler(ctx.config, ctx.monitor, device_kind=ctx.device_kind)
    preempted = Preemptions()
    i = 0
    while True:
        if ctx.device_kind == "cpu":
            dt = timed_call(call, i, flush, preempted)
        else:
            flush()
            if sync is not None:
                sync()
            t0 = time.perf_counter()
            call(i)
            if sync is not None:
                sync()
            dt = time.perf_counter() - t0
        i += 1
        if sampler.add([dt], None):
            m = sampler.result("wall", ctx.flush.nbytes)
            note = preempted.note()
            if note:
                m.notes.append(note)
            return m
