"""Robust summaries of timing samples. Outliers stay in the raw samples; summaries use quantiles."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Sequence

# For normally distributed samples the standard error of the median is sqrt(pi/2) times that of the
# mean; with the IQR as a robust sigma (IQR = 1.349 sigma) this stays honest when outliers are present.
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
_IQR_TO_SIGMA = 1.349


@dataclass(frozen=True)
class TimeStats:
    median: float
    mean: float
    min: float
    max: float
    q1: float
    q3: float
    std: float
    n: int
    rse: float  # estimated relative standard error of the median

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted data (numpy's default method)."""
    if not sorted_xs:
        raise ValueError("no samples")
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def median_rse(samples: Sequence[float]) -> float:
    """Relative standard error of the median; inf when it cannot be estimated yet."""
    if len(samples) < 3:
        return math.inf
    xs = sorted(samples)
    med = quantile(xs, 0.5)
    if med <= 0:
        return math.inf
    sigma = (quantile(xs, 0.75) - quantile(xs, 0.25)) / _IQR_TO_SIGMA
    return _MEDIAN_SE_FACTOR * sigma / math.sqrt(len(xs)) / med


def summarize(samples: Sequence[float]) -> TimeStats:
    if not samples:
        raise ValueError("no samples")
    xs = sorted(samples)
    return TimeStats(
        median=quantile(xs, 0.5),
        mean=statistics.fmean(xs),
        min=xs[0],
        max=xs[-1],
        q1=quantile(xs, 0.25),
        q3=quantile(xs, 0.75),
        std=statistics.stdev(xs) if len(xs) > 1 else 0.0,
        n=len(xs),
        rse=median_rse(xs),
    )


def geomean(values: Sequence[float]) -> float:
    positive = [v for v in values if v > 0]
    if not positive:
        return math.nan
    return math.exp(statistics.fmean(math.log(v) for v in positive))
