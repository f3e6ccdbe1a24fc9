"""Did the timer see all the work? The events and graph timers checked against CUPTI.

Events and graphs time one stream between two points. An implementation that puts its work on a side
stream, or defers it past the end event, looks fast to them while the GPU is busy elsewhere. After
the measurement, a short CUPTI window of the same call measures the device time of every kernel on
every stream: if the timer saw much less than that, work escaped the timed window and the record is
invalid. A timer far above the device time is only noted (gaps or host work inside the window).
"""

from __future__ import annotations

from solbench.measure.config import Call, Measurement
from solbench.measure.l2flush import L2Flush
from solbench.measure.timers.cupti import cupti_window, flush_kernel_names

CHECKED_TIMERS = frozenset({"events", "graph"})   # cupti is the reference; wall synchronises the whole device
CROSS_ITERS = 10            # iterations in the CUPTI cross-check window
CROSS_I0 = 10_000           # iteration index of the window (after the timed ones: fresh input rotation)
# events/graph below CUPTI by more than this fraction (and the absolute slack) means work escaped the window
CROSS_CHECK_TOL = 0.25
CROSS_CHECK_SLACK_S = 0.5e-6


def cross_check(m: Measurement, call: Call, flush: L2Flush) -> None:
    """Compare the timer with CUPTI's device time of the same call; flag work that escaped the window."""
    try:
        samples, _, _ = cupti_window(call, flush, flush_kernel_names(flush), CROSS_ITERS, CROSS_I0, None)
    except Exception as exc:  # no CUPTI (e.g. a profiler already running): say so, do not guess
        m.notes.append(f"CUPTI cross-check unavailable ({type(exc).__name__}: {exc})")
        return
    device_s = sorted(samples)[len(samples) // 2]
    judge(m, device_s)


def judge(m: Measurement, device_s: float) -> None:
    """Record the comparison of the timer's median with the device time `device_s` (CUPTI, all streams)."""
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
