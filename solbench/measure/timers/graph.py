"""The `graph` timer: n iterations (flush + call) captured in one CUDA graph, replayed.

A graph of the n flushes alone is timed too and subtracted; one sample = (graph - flushes) / n. The
event-pair cost is in both graphs' times and cancels in the difference. Launch overhead is gone
(one launch for n calls), which is what a call replayed from a graph in production costs.
"""

from __future__ import annotations

from typing import Any

from solbench.measure.config import Measurement
from solbench.measure.sampler import Sampler
from solbench.measure.timers.base import DEFAULT_SM_HZ, TimerContext

GRAPH_ITERS = 20            # iterations per captured graph (fewer for long calls)
GRAPH_S = 0.02              # ... so that one graph holds about this much work
PAIRS_PER_BATCH = 5
# A short spin before each replay so the replay is queued before the start event runs (80 us at 2 GHz).
QUEUE_SPIN_CYCLES = int(80e-6 * DEFAULT_SM_HZ)


def measure_graph(ctx: TimerContext) -> Measurement:
    import torch

    call, flush = ctx.call, ctx.flush
    per_iter_s = ctx.warm_up()
    n = max(1, min(GRAPH_ITERS, int(GRAPH_S / max(per_iter_s, 1e-6))))
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

    def timed(g: Any) -> tuple[Any, Any]:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(QUEUE_SPIN_CYCLES)
        a.record()
        g.replay()
        b.record()
        return a, b

    sampler = Sampler(ctx.config, ctx.monitor, device_kind="cuda")
    while True:
        pairs = [(timed(flushes), timed(work)) for _ in range(PAIRS_PER_BATCH)]
        throttle = ctx.monitor.during()
        torch.cuda.synchronize()
        flush_t = sorted(f[0].elapsed_time(f[1]) / 1e3 for f, _ in pairs)[len(pairs) // 2]
        batch = [max(w[0].elapsed_time(w[1]) / 1e3 - flush_t, 0.0) / n for _, w in pairs]
        if sampler.add(batch, throttle):
            m = sampler.result("graph", flush.nbytes)
            m.notes.append(f"{n} iterations per graph; the flushes' own graph time subtracted")
            return m
