"""How long does one call take? solbench's timers, L2 flushing, noise model and stopping rule.

    from solbench.measure import bench
    m = bench(lambda: a @ b)             # like triton.testing.do_bench, for a notebook
    print(m.stats.median, m.stats.rse)   # seconds; relative standard error of the median

`bench` times a function of no arguments; `measure` is what `solbench run` calls (a function of the
iteration index, so the caller can rotate input sets, plus the device facts the worker knows).

Layout (nvbench's split; every record names the timer that produced it):
- config.py      TimingConfig (the knobs), Measurement (the answer), TimerCache (per-process calibrations)
- noise.py       the noise of a median (within-run + run-to-run from noise_model.py) and the stopping
                 rule (a protocol; NoiseTarget is today's rule)
- sampler.py     collects batches until the rule or the budget says stop; drops throttled batches
- l2flush.py     the flush buffer (twice the L2), rewritten (or only read) before each timed call
- cpu.py         on a CPU: the cache flush (four times all its caches) and re-timing preempted calls
- timers/        one module per timer, named in timers.TIMERS:
                   events (CUDA default: event pairs, spin-held queue, tare), graph (CUDA graph replay),
                   cupti (device-side kernel times from torch.profiler), wall (host clock; every CPU run)
- nvtx.py        --nvtx: NVTX ranges per timed call, cudaProfilerStart/Stop around the timed window
- crosscheck.py  events/graph checked against CUPTI: work on a side stream makes the record invalid
- throughput.py  best time per call of back-to-back batches (what `solbench calibrate` needs)

Sampling stops once the within-run noise is under `rse_target` (with at least `min_samples` samples
in noise.MIN_BATCHES batches), or when `budget_s` runs out: then the measurement says it did not
reach its target rather than being reported as precise.
"""

from __future__ import annotations

from typing import Any, Callable

from solbench.measure.config import Call, Measurement, TimerCache, TimingConfig, describe
from solbench.measure.cpu import CacheFlush, cpu_flush_bytes
from solbench.measure.crosscheck import CHECKED_TIMERS, cross_check
from solbench.measure.l2flush import DEFAULT_FLUSH_MODE, L2Flush, check_mode, flush_bytes
from solbench.measure.noise import Noise, NoiseTarget, StoppingRule
from solbench.measure.nvtx import Markers
from solbench.measure.timers import TIMERS, TimerContext, timer_named
from solbench.measure.timers.base import DEFAULT_SM_HZ
from solbench.measure.timers.events import EventOverhead
from solbench.telemetry import ClockMonitor

__all__ = ["TIMERS", "Call", "EventOverhead", "Measurement", "Noise", "NoiseTarget",
           "StoppingRule", "TimerCache", "TimingConfig", "bench", "describe", "measure", "returned_bytes"]


def measure(call: Call, device_kind: str, config: TimingConfig, l2_bytes: int | None = None,
            sm_clock_mhz: float | None = None, monitor: ClockMonitor | None = None,
            cache: TimerCache | None = None, output_bytes: int | None = None) -> Measurement:
    """Time `call(i)` on a device of kind `device_kind` ('cuda' or 'cpu') with `config.timer`.

    l2_bytes sizes the flush buffer: the cache to evict before each call (a GPU's L2; on a CPU all its
    caches, DeviceInfo.flushed_cache_bytes); sm_clock_mhz converts the events timer's spins to cycles;
    the monitor samples clocks during the batches (and drops throttled ones); the cache keeps the events
    tare and the CPU flush buffer for the next call in this process; output_bytes (what the call writes)
    sizes the rewritten part of a `balanced` flush (None: the bytes of the tensors one call returns; left
    at 0 a writing call would be timed as under `read`, and the graph timer, which charges the next
    flush for the call's dirty lines, would disagree with the others). A CPU is always timed with `wall`.
    """
    timer = timer_named(config.timer)           # an unknown name fails on every device
    if device_kind != "cuda":
        cache = cache or TimerCache()
        nbytes = cpu_flush_bytes(l2_bytes, config.flush)
        flush = cache.get("cpu_flush", nbytes, lambda: CacheFlush(nbytes))
        ctx = TimerContext(call, config, device_kind, flush, ClockMonitor.open("cpu"), cache)
        return TIMERS["wall"](ctx)
    import torch

    monitor = monitor or ClockMonitor.open("cpu")
    if output_bytes is None:
        output_bytes = returned_bytes(call(0)) if config.flush and config.flush_mode == "balanced" else 0
    flush = L2Flush(flush_bytes(l2_bytes, config.flush), config.flush_mode, output_bytes)
    cycles_per_s = sm_clock_mhz * 1e6 if sm_clock_mhz else DEFAULT_SM_HZ
    markers = Markers(config.nvtx)      # --nvtx: every timed call in a range, the timed window marked
    window = markers.window(f"solbench timed window ({config.timer})")
    ctx = TimerContext(markers.wrap(call, "timed call"), config, "cuda", flush, monitor, cache or TimerCache(),
                       torch.cuda.synchronize, cycles_per_s, window)
    try:
        m = timer(ctx)
    finally:
        window.close()
    monitor.mark_after()
    if config.cross_check and config.timer in CHECKED_TIMERS:
        cross_check(m, call, flush)
    return m


def bench(fn: Callable[[], Any], *, timer: str = "events", rse: float = 0.005, budget_s: float = 1.0,
          flush: bool = True, device: Any = None, cache: TimerCache | None = None,
          flush_mode: str = DEFAULT_FLUSH_MODE, output_bytes: int | None = None) -> Measurement:
    """Time `fn()` the way `solbench run` does, from a notebook or a script.

    fn       takes no arguments; whatever it returns is ignored, except to tell where it runs.
    timer    'events' (CUDA default: CUDA events, launch queue held, event cost subtracted), 'graph',
             'cupti' or 'wall'. A CPU is always timed with 'wall' (the result's `timer` says so).
    rse      stop sampling once the within-run relative standard error of the median is below this ...
    budget_s ... or after this many seconds (then `reached_target` is False and a note says so).
    flush    evict the cache before each call, outside the timed window, through a buffer twice the
             L2's size (on a CPU: four times all its caches, rewritten).
    flush_mode  on a GPU: 'balanced' (read the buffer, then rewrite output_bytes of it: the call writes
             back as many dirty lines as it leaves), 'read' (only read it) or 'write' (rewrite it all);
             l2flush.py says how they differ.
    output_bytes  what fn writes, for 'balanced'; None: the bytes of the tensors fn returns (an in-place
             op that returns its tensor counts it; one that returns nothing counts 0).
    device   'cpu', 'cuda' or 'cuda:N'; None: where the tensors fn returns live (CPU without CUDA).
    cache    keep the events timer's calibration between calls (pass the same TimerCache() each time).

    Example (CUDA tensors: the events timer, the L2 flushed between calls):

        import torch
        from solbench.measure import bench, describe
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        m = bench(lambda: a @ b)
        print(describe(m))                         # events: median ... us over ... samples, rse ...%
        print(2 * 4096**3 / m.stats.median / 1e12, "TFLOP/s")
    """
    timer_named(timer)  # fail before running anything
    if not 0 < rse < 1:
        raise ValueError(f"bench: rse must be a fraction in (0, 1) (0.005 = 0.5%), got {rse!r}")
    if not budget_s > 0:
        raise ValueError(f"bench: budget_s must be positive, got {budget_s!r}")
    kind, index = _where(fn, device)
    check_mode(flush_mode)
    config = TimingConfig(timer=timer, rse_target=rse, budget_s=budget_s, flush=flush, flush_mode=flush_mode)
    if kind == "cpu":
        from solbench.hardware import cpu_cache_bytes

        return measure(lambda _i: fn(), "cpu", config, cpu_cache_bytes(), cache=cache)
    import torch

    with torch.cuda.device(index):
        l2 = getattr(torch.cuda.get_device_properties(index), "L2_cache_size", None)
        monitor = ClockMonitor.open("cuda", index)
        try:
            return measure(lambda _i: fn(), "cuda", config, l2, monitor.sm_max_mhz, monitor, cache, output_bytes)
        finally:
            monitor.close()


def _where(fn: Callable[[], Any], device: Any) -> tuple[str, int]:
    """('cpu' | 'cuda', device index) from `device`, or from the tensors one call of fn returns."""
    import torch

    if device is not None:
        return _parse_device(device, torch)
    found = _tensors(fn())
    cuda = [t for t in found if t.is_cuda]
    if cuda:
        return "cuda", cuda[0].device.index or 0
    if found or not torch.cuda.is_available():
        return "cpu", 0
    raise ValueError("bench: fn returned no tensor, so it is unknown whether it runs on the GPU: "
                     "pass device='cuda' or device='cpu'")


def _parse_device(device: Any, torch: Any) -> tuple[str, int]:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"bench: device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if dev.type == "cpu":
        return "cpu", 0
    if dev.type != "cuda":
        raise ValueError(f"bench: device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"bench: device {device!r} asked for, but torch sees no CUDA device")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise ValueError(f"bench: device {device!r} does not exist ({torch.cuda.device_count()} CUDA devices)")
    return "cuda", index


def returned_bytes(value: Any) -> int:
    """The bytes of the tensors in a call's result: what a `balanced` flush takes the call to write."""
    return sum(t.numel() * t.element_size() for t in _tensors(value))


def _tensors(value: Any, depth: int = 2) -> list[Any]:
    """The tensors in a call's result: a tensor, or tensors in a (nested) tuple, list or dict."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if depth == 0:
        return []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    return [t for item in items for t in _tensors(item, depth - 1)]
