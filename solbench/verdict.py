"""The decision rule of the regression gate: a verdict for two samples of a cost, given how far each
side's median moves between runs of unchanged code.

SLOWER or FASTER only when three criteria agree, with r = median(new) / median(base) of the cost
(smaller is better, so r > 1 is worse):

* within-run: the two samples differ (Mann-Whitney U, p < alpha);
* run-to-run: |log r| exceeds z(confidence) x sqrt(rr_base^2 + rr_new^2), rr being each median's
  relative spread between runs (records carry it as `time_s.run_to_run`). Within-run statistics cannot
  see this: between processes a microsecond kernel moves by several percent while its samples agree to
  a fraction of one;
* threshold: the (1 - alpha) bootstrap CI of r lies beyond 1 + t/2 and reaches past 1 + t (the mirror
  image for FASTER): the change may be t or more and is surely more than t/2, so a change at the
  threshold is caught while a precisely measured change below it is not.

Otherwise SAME when the CI lies within +/-max(t, run-to-run margin) (any change is below the threshold,
or indistinguishable from what unchanged code does), else AMBIGUOUS; fewer than MIN_SAMPLES samples on
either side is AMBIGUOUS. Each verdict names what decided it (`decided_by`): "all three" for a call,
otherwise the criteria that were not met.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_SAMPLES = 5
DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.01
DEFAULT_CONFIDENCE = 0.999       # two-sided, for the run-to-run criterion: z = 3.29
BOOTSTRAP_RESAMPLES = 2000

FASTER, SLOWER, SAME, AMBIGUOUS = "FASTER", "SLOWER", "SAME", "AMBIGUOUS"
WITHIN, RUN_TO_RUN, THRESHOLD = "within-run", "run-to-run", "threshold"
CRITERIA = (WITHIN, RUN_TO_RUN, THRESHOLD)
ALL_THREE = "all three"
# Worst first: the order a pull-request comment lists pairs in.
VERDICT_ORDER = {SLOWER: 0, AMBIGUOUS: 1, SAME: 2, FASTER: 3}


@dataclass(frozen=True)
class Verdict:
    verdict: str
    ratio: float | None  # median(new) / median(base) of the cost; > 1 means NEW is slower
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_base: int
    n_new: int
    reason: str
    run_to_run: float | None = None      # combined relative spread of the two medians between runs
    rr_margin: float | None = None       # z * run_to_run: the |log ratio| a call must exceed
    criteria: dict[str, bool] | None = None   # each criterion: met in the direction of the change?
    decided_by: str = ""                 # ALL_THREE for SLOWER/FASTER, else the criteria not met


def bootstrap_ratio_ci(
    base: np.ndarray, new: np.ndarray, *, level: float, resamples: int, seed: int
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(new) / median(base), resampling each side independently."""
    rng = np.random.default_rng(seed)
    med_b = np.median(base[rng.integers(0, base.size, (resamples, base.size))], axis=1)
    med_n = np.median(new[rng.integers(0, new.size, (resamples, new.size))], axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(med_n / med_b, [tail, 1.0 - tail])
    return float(lo), float(hi)


def z_for(confidence: float) -> float:
    """The two-sided normal quantile of a confidence level (0.999 -> 3.29)."""
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2.0))


def _threshold_met(lo: float, hi: float, up: bool, t: float) -> bool:
    """The CI is surely beyond t/2 and may reach t, on the side of the change."""
    if up:
        return lo > 1.0 + t / 2.0 and hi > 1.0 + t
    return hi < 1.0 / (1.0 + t / 2.0) and lo < 1.0 / (1.0 + t)


def decide(
    base: Sequence[float],
    new: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    run_to_run: tuple[float, float] = (0.0, 0.0),
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Verdict:
    """Verdict for two samples of a cost (smaller is better); the rule is in the module docstring.

    run_to_run: the relative between-run spread of each side's median, (base, new).
    """
    from scipy.stats import mannwhitneyu

    b = np.asarray(base, dtype=float)
    n = np.asarray(new, dtype=float)
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(n)) and np.all(b > 0) and np.all(n > 0)):
        raise ValueError("samples must be finite and positive")
    rr = math.hypot(*run_to_run)
    margin = z_for(confidence) * rr
    if b.size < MIN_SAMPLES or n.size < MIN_SAMPLES:
        ratio = float(np.median(n) / np.median(b)) if b.size and n.size else None
        return Verdict(AMBIGUOUS, ratio, None, None, None, int(b.size), int(n.size),
                       f"too few samples (need {MIN_SAMPLES} on each side)", rr, margin, None, "samples")
    ratio = float(np.median(n) / np.median(b))
    lo, hi = bootstrap_ratio_ci(b, n, level=1.0 - alpha, resamples=resamples, seed=seed)
    p = float(mannwhitneyu(n, b, alternative="two-sided").pvalue)
    if math.isnan(p):  # identical constant samples: no evidence of any difference
        p = 1.0
    change = math.log(ratio)
    up = change > 0
    met = {WITHIN: p < alpha, RUN_TO_RUN: abs(change) > margin, THRESHOLD: _threshold_met(lo, hi, up, threshold)}
    missed = [c for c in CRITERIA if not met[c]]
    decided_by = " + ".join(missed) if missed else ALL_THREE
    band = max(math.log1p(threshold), margin)   # SAME: the CI within the threshold or the run-to-run margin
    if not missed:
        verdict = SLOWER if up else FASTER
    elif math.log(lo) >= -band and math.log(hi) <= band:
        verdict = SAME
    else:
        verdict = AMBIGUOUS
    reason = _reason(verdict, p, alpha, ratio, (lo, hi), margin, band, threshold, decided_by)
    return Verdict(verdict, ratio, lo, hi, p, int(b.size), int(n.size), reason, rr, margin, met, decided_by)


def _reason(verdict: str, p: float, alpha: float, ratio: float, ci: tuple[float, float], margin: float,
            band: float, threshold: float, decided_by: str) -> str:
    """One line with the numbers that decided the verdict."""
    interval = f"CI [{ci[0] - 1:+.1%}, {ci[1] - 1:+.1%}]"
    rr = f"run-to-run margin +/-{math.expm1(margin):.1%}"
    if verdict in (SLOWER, FASTER):
        side = "+" if verdict == SLOWER else "-"
        return f"p={p:.2g} < {alpha:g}; {ratio - 1:+.1%} beyond the {rr}; {interval} beyond {side}{threshold / 2:.1%}"
    if verdict == SAME:
        what = "the threshold" if band == math.log1p(threshold) else "the run-to-run margin"
        return f"{interval} within +/-{math.expm1(band):.1%} ({what}); not met: {decided_by}"
    return f"p={p:.2g}, {interval}, {rr}; not met: {decided_by}"
