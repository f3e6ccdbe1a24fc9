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


def invalid_reason(s: Score, peaks_source: str = "datasheet") -> str | None:
    """Why a score cannot be real, or None."""
    if s.sol <= SOL_LIMIT:
        return None
    reason = (f"SOL {s.sol:.2f} > 1: faster than the speed of light ({s.bound}-bound T_SOL "
              f"{s.t_sol_s * 1e6:.2f} us); the spec's FLOP/byte count, the peak table, the timer "
              f"or the kernel is wrong (e.g. data served from cache, or work done outside the timed window)")
    if peaks_source in ("measured", "cpu-measured"):
        # A measured ceiling is only as good as its measurement (a busy machine, too few shapes).
        reason += (f"; the peaks are {peaks_source}: if the ceiling was measured on a busy machine, "
                   f"measure it again (`solbench calibrate`, or delete results/cache/ for CPU ceilings)")
    return reason


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
