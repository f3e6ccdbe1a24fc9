"""Speed-of-light arithmetic: T_SOL, SOL score, MFU, bandwidth utilisation, speedup.

T_SOL = max(FLOPs / compute peak, bytes / memory bandwidth): no implementation can beat the slower
of the two. SOL = T_SOL / T_measured lies in (0, 1]; anything above 1 means the FLOP or byte count,
the peak, the timer or the kernel is wrong, and the record is marked invalid instead of scored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SOL_LIMIT = 1.0


@dataclass(frozen=True)
class Score:
    flops: float
    bytes: float
    intensity: float | None      # FLOP per byte
    peak_flops: float | None
    peak_bandwidth: float
    t_sol_s: float
    bound: str                   # compute | memory
    tflops: float
    gbps: float
    sol: float
    mfu: float | None
    mbu: float

    def to_json(self) -> dict:
        return asdict(self)


def t_sol(flops: float, nbytes: float, peak_flops: float | None, peak_bandwidth: float) -> tuple[float, str]:
    """The speed-of-light time and which side bounds it."""
    if peak_bandwidth <= 0:
        raise ValueError("memory bandwidth peak must be positive")
    t_mem = nbytes / peak_bandwidth
    t_compute = flops / peak_flops if peak_flops else 0.0
    return (t_compute, "compute") if t_compute > t_mem else (t_mem, "memory")


def score(flops: float, nbytes: float, median_s: float, peak_flops: float | None,
          peak_bandwidth: float) -> Score:
    if median_s <= 0:
        raise ValueError(f"measured time must be positive, got {median_s}")
    tsol, bound = t_sol(flops, nbytes, peak_flops, peak_bandwidth)
    achieved_flops = flops / median_s
    achieved_bw = nbytes / median_s
    return Score(
        flops=flops,
        bytes=nbytes,
        intensity=flops / nbytes if nbytes else None,
        peak_flops=peak_flops,
        peak_bandwidth=peak_bandwidth,
        t_sol_s=tsol,
        bound=bound,
        tflops=achieved_flops / 1e12,
        gbps=achieved_bw / 1e9,
        sol=tsol / median_s,
        mfu=achieved_flops / peak_flops if peak_flops else None,
        mbu=achieved_bw / peak_bandwidth,
    )


def invalid_reason(s: Score, peaks_source: str = "datasheet", *, tolerance: float = 0.0,
                   cache_bytes: int | None = None) -> str | None:
    """Why a score cannot be real, or None.

    tolerance   the measured ceiling's own relative spread (Peaks.noise_of): a time that ties a ceiling
                measured with the same library is a tie, not a contradiction (tie_note says so);
    cache_bytes the cache the timer evicts before each call: a memory-bound working set that fits in it
                can still beat DRAM (its outputs are written back after the timer stops), which the
                message tells apart from a true contradiction.
    """
    if s.sol <= SOL_LIMIT + max(tolerance, 0.0):
        return None
    head = f"SOL {s.sol:.2f} > 1: faster than the speed of light ({s.bound}-bound T_SOL {s.t_sol_s * 1e6:.2f} us)"
    if s.bound == "memory" and cache_bytes and s.bytes <= cache_bytes:
        reason = (f"{head}; cache-resident working set: its {_mib(s.bytes)} fit in the {_mib(cache_bytes)} of "
                  f"cache evicted before each call, so part of its traffic (its outputs' write-back, at least) "
                  f"happened after the timer stopped; size the case past the cache (a spec's `cpu_cases` on a "
                  f"CPU) to score it against memory bandwidth")
    else:
        why = (f"not explained by caching (its {_mib(s.bytes)} working set is larger than the {_mib(cache_bytes)} "
               f"cache evicted before each call)" if s.bound == "memory" and cache_bytes else "a true contradiction")
        reason = (f"{head}; {why}: the spec's FLOP/byte count, the peak table, the timer or the kernel is wrong "
                  f"(e.g. work done outside the timed window)")
    if peaks_source in ("measured", "cpu-measured"):
        # A measured ceiling is only as good as its measurement (a busy machine, too few shapes).
        reason += (f"; the peaks are {peaks_source}"
                   + (f" (spread {tolerance:.1%})" if tolerance else "")
                   + ": if the ceiling was measured on a busy machine, measure it again (`solbench calibrate`, "
                     "or delete results/cache/ for CPU ceilings)")
    return reason


def tie_note(s: Score, tolerance: float) -> str | None:
    """A note for a score above 1 that its measured ceiling's spread explains (a tie)."""
    if SOL_LIMIT < s.sol <= SOL_LIMIT + tolerance:
        return (f"SOL {s.sol:.3f} ties its measured {s.bound} ceiling (within the ceiling's own spread of "
                f"{tolerance:.1%}): as fast as the code the ceiling was measured with, not faster than light")
    return None


def _mib(nbytes: float | None) -> str:
    if not nbytes:
        return "? MiB"
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes < 100 * 2**20 else f"{nbytes / 2**20:,.0f} MiB"


def peak_key(unit: str, tensor_key: str, element_size: int) -> str:
    """Which entry of the peak table a dtype runs at: its tensor-core key, or fp32 on CUDA cores for
    dtypes of at most 4 bytes (bf16 arithmetic on CUDA cores runs at the fp32 rate)."""
    if unit == "tensor":
        return tensor_key
    return "fp32" if element_size <= 4 else tensor_key


def clock_factor(reference_mhz: float | None, observed_mhz: float | None) -> float | None:
    """--peaks at-clock: a compute peak quoted at `reference_mhz` scales with the clock seen."""
    if not reference_mhz or not observed_mhz:
        return None
    return observed_mhz / reference_mhz


def speedup(baseline_median_s: float | None, median_s: float) -> float | None:
    if not baseline_median_s or median_s <= 0:
        return None
    return baseline_median_s / median_s
