"""The `wall` timer: a monotonic host clock around each call.

A CPU device is always timed this way. On a GPU it is the user-visible latency of one call: the
L2 is flushed and the device drained before the clock starts, and the clock stops once the device
has finished (a device-wide synchronise, so work on any stream counts); launch overhead and Python
are included, which is the point of choosing it there.
"""

from __future__ import annotations

import time

from solbench.measure.config import Measurement
from solbench.measure.sampler import Sampler
from solbench.measure.timers.base import TimerContext


def measure_wall(ctx: TimerContext) -> Measurement:
    ctx.warm_up()
    call, flush, sync = ctx.call, ctx.flush, ctx.sync
    sampler = Sampler(ctx.config, ctx.monitor, device_kind=ctx.device_kind)
    i = 0
    while True:
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
            return sampler.result("wall", ctx.flush.nbytes)
