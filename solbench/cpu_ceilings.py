"""This CPU's ceilings: copy/read/write bandwidth and fp32/bf16 matmul, with torch's threads.

What `solbench calibrate --device cpu` records and what a CPU run is scored against (peaks.cpu_peaks
caches it). On a machine shared with other work the figures must not depend on the neighbours, so
every figure is the best of windows of back-to-back calls with preempted calls left out
(measure.cpu), repeated until the best two windows agree; a figure whose windows never agree says it
was measured on a busy machine (BUSY), and is then not cached.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from solbench.calibration import Calibration, Measured, assemble
from solbench.hardware import probe_device
from solbench.measure.cpu import BestCall, best_unpreempted_s

Progress = Callable[[str], None]

# CPU bandwidth: buffers of at least CPU_CACHE_MULTIPLE times all the caches (and CPU_COPY_BYTES),
# streamed in chunks of about the caches' size, so neither a cache nor its imperfect replacement
# flatters the figure while each call stays short; windows of back-to-back calls with preempted calls
# left out (measure.cpu) until the best two windows agree within CPU_AGREE. Best-of-5 whole-buffer
# calls moved between 30 and 44 GB/s from one measurement to the next on a 2-core VM shared with
# other work: a 10 ms call there is rarely left alone, a 0.7 ms one often is.
CPU_COPY_BYTES = 128 * 2**20
CPU_CACHE_MULTIPLE = 8
CPU_CHUNK_MIN = 16 * 2**20
CPU_CHUNK_MAX = 64 * 2**20
CPU_AGREE = 0.02
CPU_ROUNDS = 16                      # windows at most per figure (CPU_ROUNDS x CPU_ROUND_S seconds)
CPU_ROUND_S = 0.25
BUSY = "the best two windows disagree: measured on a busy machine"
CPU_MATMUL_N = 1024
QUICK_CPU_COPY_BYTES = 8 * 2**20
QUICK_CPU_MATMUL_N = 128
QUICK_CPU_ROUND_S = 0.02
CPU_MATMUL_CALL_S = 0.15             # CPU matmuls are sized to take about this long per call


def measure_cpu(quick: bool = False, repeats: int = CPU_ROUNDS, progress: Progress | None = None,
                name: str | None = None, cache_bytes: int | None = None) -> Calibration:
    """Copy/read/write bandwidth and fp32/bf16 matmul on this CPU with torch's threads; about ten seconds
    (`quick`: small sizes and windows, a smoke test). Each figure is the best of at most `repeats` windows.

    `name` is the CPU's name for the record and `cache_bytes` the size of its caches (default: what
    the device probe reports); the bandwidth working sets are sized well past the caches.
    """
    import torch

    probed = probe_device("cpu") if name is None or cache_bytes is None else None
    name = name or probed.name
    cache_bytes = cache_bytes if cache_bytes is not None else probed.cache_bytes
    nbytes = QUICK_CPU_COPY_BYTES if quick else cpu_bandwidth_bytes(cache_bytes)
    chunk = nbytes // 4 if quick else cpu_chunk_bytes(cache_bytes)
    window = QUICK_CPU_ROUND_S if quick else CPU_ROUND_S
    cap = window * repeats
    n = QUICK_CPU_MATMUL_N if quick else CPU_MATMUL_N
    results = measure_cpu_bandwidth(nbytes, chunk, window, cap, progress)
    gen = torch.Generator().manual_seed(0)
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        if progress:
            progress(f"CPU {key} matmul {n}^3")
        size = _cpu_matmul_size(torch, dtype, n, gen)
        # A CPU's best matmul rate depends on the size (cache blocking): try smaller ones too, so a
        # benchmark of one of those sizes cannot beat the ceiling. bf16 is slow enough for one size.
        sizes = sorted({max(64, size // 4 // 64 * 64), max(64, size // 2 // 64 * 64), size}) if key == "fp32" else [size]
        for sz in sizes:
            a = torch.randn(sz, sz, generator=gen).to(dtype)
            b = torch.randn(sz, sz, generator=gen).to(dtype)
            windows = _windows(lambda: a @ b, window, cap, min_calls=2)
            results.append(_from_windows(f"matmul_{key}", "FLOP/s", sz, 2.0 * sz**3, windows))
    threads = torch.get_num_threads()
    return assemble(results, device_kind="cpu", name=name, sm_count=None, memory_bytes=None, cc=None,
                    l2_bytes=None, driver=None, cuda=None, torch_version=torch.__version__, clocks={},
                    quick=quick, cpu_threads=threads)


def measure_cpu_bandwidth(nbytes: int, chunk_bytes: int, window_s: float = CPU_ROUND_S,
                          cap_s: float = CPU_ROUNDS * CPU_ROUND_S, progress: Progress | None = None) -> list[Measured]:
    """Copy, read and write bandwidth streaming `chunk_bytes` calls over `nbytes` buffers.

    Each call works on the next chunk, so its data was evicted by the rest of the buffer streamed since
    its last turn (as CacheFlush evicts before a timed call), and is short enough that a busy machine
    still leaves some calls unpreempted. Windows of calls are timed until the best two windows agree
    within CPU_AGREE (or `cap_s` runs out); the best window's best call counts, and the two windows'
    disagreement is the figure's spread.
    """
    import torch

    # Rounded up: the working set must reach nbytes (CPU_CACHE_MULTIPLE times the caches), and a
    # cache that is no multiple of the chunk (480 MiB of L3 here, 64 MiB chunks) left it short.
    chunks = max(2, -(-nbytes // chunk_bytes))
    # Bandwidth does not depend on the values, and torch.rand of 256 MiB alone takes over a second.
    src = torch.empty(chunks, chunk_bytes // 8).fill_(1.25)
    dst = torch.empty_like(src)
    big = torch.empty(chunks, chunk_bytes // 4).fill_(0.75)
    results = []
    for what, fn, work in (("copy", lambda k: dst[k].copy_(src[k]), 2.0 * src[0].numel() * 4),
                           ("read", lambda k: torch.sum(big[k]), float(big[0].numel() * 4)),
                           ("write", lambda k: big[k].fill_(1.5), float(big[0].numel() * 4))):
        if progress:
            progress(f"CPU {what} {chunk_bytes / 2**20:.0f} MiB chunks of {chunks * chunk_bytes / 2**20:.0f} MiB")
        turn = iter(range(1 << 62))
        windows = _windows(lambda: fn(next(turn) % chunks), window_s, cap_s)
        results.append(_from_windows(what, "B/s", chunks * chunk_bytes, work, windows))
    return results


def _windows(fn: Callable[[], object], window_s: float, cap_s: float, min_calls: int = 3) -> list[BestCall]:
    """Windows of back-to-back calls until the best two agree within CPU_AGREE, or `cap_s` is spent."""
    start = time.perf_counter()
    windows: list[BestCall] = []
    while True:
        windows.append(best_unpreempted_s(fn, window_s, min_calls))
        clean = sorted(w.best_s for w in windows if w.clean)
        if len(windows) >= 3 and len(clean) >= 2 and clean[1] - clean[0] <= CPU_AGREE * clean[1]:
            return windows
        if time.perf_counter() - start > cap_s:
            return windows


def _from_windows(what: str, unit: str, size: int, work: float, windows: list[BestCall]) -> Measured:
    """One figure from windows of calls: the best window's best; spread = how far the second best fell behind."""
    clean = sorted(w.best_s for w in windows if w.clean)
    times = clean or sorted(w.best_s for w in windows)
    best = times[0]
    spread = (times[1] - best) / times[1] if len(times) > 1 else None
    converged = len(clean) >= 2 and clean[1] - clean[0] <= CPU_AGREE * clean[1]
    note = (f"best of {len(windows)} windows ({sum(w.calls for w in windows)} calls), preempted calls left out; "
            + ("the best two agree" if converged else BUSY))
    return Measured(what=what, unit=unit, size=size, work=work, best_s=best, rate=work / best, note=note,
                    spread=spread)


def cpu_bandwidth_bytes(cache_bytes: int | None) -> int:
    """The CPU bandwidth working set: CPU_CACHE_MULTIPLE times the caches, at least CPU_COPY_BYTES."""
    return max(CPU_COPY_BYTES, CPU_CACHE_MULTIPLE * (cache_bytes or 0))


def cpu_chunk_bytes(cache_bytes: int | None) -> int:
    """What one bandwidth call streams: about the caches' size (long enough to reach full speed), within limits."""
    return int(min(max(cache_bytes or 0, CPU_CHUNK_MIN), CPU_CHUNK_MAX)) // 4096 * 4096


def _cpu_matmul_size(torch: Any, dtype: Any, n_max: int, gen: Any) -> int:
    """The largest n <= n_max whose matmul takes about CPU_MATMUL_CALL_S: bf16 without AMX is ~30x slower."""
    probe = min(256, n_max)
    a = torch.randn(probe, probe, generator=gen).to(dtype)
    t = best_unpreempted_s(lambda: a @ a, 0.05).best_s
    n = probe * (CPU_MATMUL_CALL_S / max(t, 1e-7)) ** (1 / 3)
    return int(max(probe, min(n_max, n // 64 * 64)))


