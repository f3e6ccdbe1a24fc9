"""Compare two results files: pair records, decide a verdict per pair from raw samples, export.

The regression gate must not cry wolf on a noisy shared GPU, so a verdict comes from the raw
`samples_s` of both runs, never from two medians alone. The rule (see `decide`):

* fewer than `MIN_SAMPLES` samples on either side            -> AMBIGUOUS
* the (1 - alpha) bootstrap CI of the ratio new/base lies
  inside the tolerance band [1/(1+t), 1+t]                    -> SAME (any change is below t)
* Mann-Whitney U p < alpha and CI lower bound > 1 + t/2       -> SLOWER
* Mann-Whitney U p < alpha and CI upper bound < 1/(1 + t/2)   -> FASTER
* anything else                                               -> AMBIGUOUS

The ratio compares *costs* (time, or time over T_SOL for `--metric sol`), so > 1 is worse.
Requiring the whole CI above 1 + t/2 (not merely above 1) keeps a small, real change in noisy
data from being flagged, while a change at the threshold with modest noise still is: its CI
clears t/2 long before its point estimate could fall below the threshold by chance.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from solbench.errors import UserError
from solbench.results import Record, Run, load_run

COMPARE_SCHEMA = "solbench.compare/1"

MIN_SAMPLES = 5
DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.01
BOOTSTRAP_RESAMPLES = 2000

FASTER, SLOWER, SAME, AMBIGUOUS = "FASTER", "SLOWER", "SAME", "AMBIGUOUS"
# Worst first: the order a pull-request comment lists pairs in.
VERDICT_ORDER = {SLOWER: 0, AMBIGUOUS: 1, SAME: 2, FASTER: 3}

FAIL_ON_CHOICES = ("slower", "missing", "failed")
METRICS = ("time", "sol")
# A record that did not run is "missing" in NEW, not "failed".
NOT_RUN_STATUSES = {"skipped"}

Key = tuple[str, str, str, str]  # (op, case, dtype, impl)


# ---------------------------------------------------------------- loading


def load_results(path: str | Path) -> Run:
    """Load and check one results file (errors name the file)."""
    return load_run(Path(path))


def key_name(key: Key) -> str:
    return "/".join(key)


def index_records(run: Run, source: str | Path = "") -> dict[Key, Record]:
    """Records by (op, case, dtype, impl); a duplicate key is an error, not a silent overwrite."""
    out: dict[Key, Record] = {}
    for i, rec in enumerate(run.records):
        key = rec.key
        if key in out:
            raise UserError(f"duplicate record {key_name(key)}", file=source or None, field=f"records[{i}]")
        out[key] = rec
    return out


# ---------------------------------------------------------------- statistics


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


def decide(
    base: Sequence[float],
    new: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Verdict:
    """Verdict for two samples of a cost (smaller is better); the rule is in the module docstring."""
    from scipy.stats import mannwhitneyu

    b = np.asarray(base, dtype=float)
    n = np.asarray(new, dtype=float)
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(n)) and np.all(b > 0) and np.all(n > 0)):
        raise ValueError("samples must be finite and positive")
    if b.size < MIN_SAMPLES or n.size < MIN_SAMPLES:
        ratio = float(np.median(n) / np.median(b)) if b.size and n.size else None
        return Verdict(AMBIGUOUS, ratio, None, None, None, int(b.size), int(n.size),
                       f"too few samples (need {MIN_SAMPLES} on each side)")
    ratio = float(np.median(n) / np.median(b))
    lo, hi = bootstrap_ratio_ci(b, n, level=1.0 - alpha, resamples=resamples, seed=seed)
    p = float(mannwhitneyu(n, b, alternative="two-sided").pvalue)
    if math.isnan(p):  # identical constant samples: no evidence of any difference
        p = 1.0
    upper, lower = 1.0 + threshold, 1.0 / (1.0 + threshold)
    half_up, half_down = 1.0 + threshold / 2.0, 1.0 / (1.0 + threshold / 2.0)
    if lower <= lo and hi <= upper:
        verdict, reason = SAME, f"CI within +/-{threshold:.0%}"
    elif p < alpha and lo > half_up:
        verdict, reason = SLOWER, f"p={p:.2g} < {alpha:g}, CI above +{threshold / 2:.1%}"
    elif p < alpha and hi < half_down:
        verdict, reason = FASTER, f"p={p:.2g} < {alpha:g}, CI below -{threshold / 2:.1%}"
    else:
        verdict, reason = AMBIGUOUS, f"p={p:.2g}, CI [{lo:.3f}, {hi:.3f}] not conclusive"
    return Verdict(verdict, ratio, lo, hi, p, int(b.size), int(n.size), reason)


# ---------------------------------------------------------------- pairing


@dataclass(frozen=True)
class PairResult:
    key: Key
    verdict: Verdict
    metric: str
    base_value: float | None  # median time (s) or SOL
    new_value: float | None

    @property
    def name(self) -> str:
        return key_name(self.key)


@dataclass(frozen=True)
class Problem:
    """A pair that could not be compared: missing in NEW, newly failing, and the like."""

    key: Key
    base_status: str | None
    new_status: str | None
    message: str

    @property
    def name(self) -> str:
        return key_name(self.key)


@dataclass
class CompareResult:
    base_path: str
    new_path: str
    base_device: str
    new_device: str
    metric: str
    threshold: float
    alpha: float
    pairs: list[PairResult]
    missing: list[Problem]  # ok in BASE, absent or not run in NEW
    failed: list[Problem]  # ok in BASE, failed/invalid/error in NEW
    added: list[Key]  # only in NEW
    recovered: list[Problem]  # not ok in BASE, ok in NEW

    def count(self, verdict: str) -> int:
        return sum(1 for p in self.pairs if p.verdict.verdict == verdict)


def _samples(rec: Record, source: str, metric: str) -> np.ndarray:
    raw = rec.samples_s or []
    try:
        arr = np.asarray(raw, dtype=float).ravel()  # a null sample becomes NaN and fails below
    except (TypeError, ValueError):
        arr = np.asarray([np.nan])
    if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise UserError("samples must be finite and positive seconds", file=source,
                        field=f"{key_name(rec.key)}.samples_s")
    if metric == "sol":
        t_sol = rec.t_sol_s
        if not t_sol or t_sol <= 0:
            return np.asarray([], dtype=float)
        # Time over T_SOL is 1/SOL per sample: a cost that stays comparable across GPUs.
        arr = arr / float(t_sol)
    return arr


def _display_value(rec: Record, metric: str) -> float | None:
    return rec.sol if metric == "sol" else (rec.time_s or {}).get("median")


def _method(run: Run) -> tuple[str, str]:
    """What a run's numbers were measured with: (timers of its timed records, peak source)."""
    timers = sorted({r.timer for r in run.records if r.timer}) or [str(run.timer)]
    return ",".join(timers), str(run.peaks.get("source", "?"))


def check_comparable(base: Run, new: Run, metric: str, allow_cross_device: bool, allow_mixed_methods: bool,
                     new_path: str) -> None:
    """Refuse comparisons whose difference would be the instrument, not the code."""
    if metric == "time" and base.device != new.device and not allow_cross_device:
        raise UserError(
            f"BASE ran on {base.device!r} and NEW on {new.device!r}: times from different devices are not "
            "comparable; use --metric sol, or --allow-cross-device if you really mean it",
            file=new_path, field="env.device")
    (b_timer, b_peaks), (n_timer, n_peaks) = _method(base), _method(new)
    if allow_mixed_methods:
        return
    if b_timer != n_timer:
        raise UserError(f"BASE was timed with '{b_timer}' and NEW with '{n_timer}': different timers measure "
                        f"different things (e.g. launch overhead); rerun with the same --timer, or pass "
                        f"--allow-mixed-methods", file=new_path, field="records[].timer")
    if metric == "sol" and b_peaks != n_peaks:
        raise UserError(f"BASE was scored against '{b_peaks}' peaks and NEW against '{n_peaks}': SOL from "
                        f"different ceilings is not comparable; use the same --peaks, or pass "
                        f"--allow-mixed-methods", file=new_path, field="peaks.source")


def compare_runs(
    base: Run,
    new: Run,
    *,
    base_path: str = "BASE",
    new_path: str = "NEW",
    metric: str = "time",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    allow_cross_device: bool = False,
    allow_mixed_methods: bool = False,
    seed: int = 0,
) -> CompareResult:
    """Pair BASE and NEW by (op, case, dtype, impl) and decide a verdict for each ok/ok pair."""
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}", field="--metric")
    if not 0 < alpha < 1:
        raise UserError(f"alpha must be in (0, 1), got {alpha}", field="--alpha")
    if not 0 <= threshold < 1:
        raise UserError(f"threshold must be in [0, 1), got {threshold}", field="--threshold")
    check_comparable(base, new, metric, allow_cross_device, allow_mixed_methods, new_path)
    b_idx, n_idx = index_records(base, base_path), index_records(new, new_path)
    result = CompareResult(base_path, new_path, base.device, new.device, metric, threshold, alpha,
                           [], [], [], [k for k in n_idx if k not in b_idx], [])
    for key, brec in b_idx.items():
        nrec = n_idx.get(key)
        b_status = brec.status
        n_status = nrec.status if nrec else None
        if b_status != "ok":
            if n_status == "ok":
                result.recovered.append(Problem(key, b_status, n_status, "ok in NEW, not in BASE"))
            continue
        if nrec is None or n_status in NOT_RUN_STATUSES:
            msg = "absent from NEW" if nrec is None else f"{n_status} in NEW: {nrec.message}"
            result.missing.append(Problem(key, b_status, n_status, msg.strip()))
            continue
        if n_status != "ok":
            result.failed.append(Problem(key, b_status, n_status, nrec.message))
            continue
        b_s, n_s = _samples(brec, base_path, metric), _samples(nrec, new_path, metric)
        # One seed per pair, stable across runs, so a verdict never depends on record order.
        pair_seed = seed ^ zlib.crc32(key_name(key).encode())
        if b_s.size == 0 or n_s.size == 0:
            what = "t_sol_s or samples_s" if metric == "sol" else "samples_s"
            v = Verdict(AMBIGUOUS, None, None, None, None, int(b_s.size), int(n_s.size), f"no {what}")
        else:
            v = decide(b_s, n_s, threshold=threshold, alpha=alpha, seed=pair_seed)
        result.pairs.append(PairResult(key, v, metric, _display_value(brec, metric),
                                       _display_value(nrec, metric)))
    result.pairs.sort(key=_worst_first)
    return result


def _worst_first(p: PairResult) -> tuple[int, float]:
    ratio = p.verdict.ratio if p.verdict.ratio is not None else 1.0
    return (VERDICT_ORDER[p.verdict.verdict], -ratio)


def parse_fail_on(text: str) -> frozenset[str]:
    parts = {t.strip().lower() for t in text.split(",") if t.strip()}
    bad = parts - set(FAIL_ON_CHOICES)
    if bad:
        raise UserError(f"unknown value(s) {', '.join(sorted(bad))}; choose from "
                        f"{', '.join(FAIL_ON_CHOICES)}", field="--fail-on")
    return frozenset(parts)


def exit_code(result: CompareResult, fail_on: Iterable[str] = ("slower",)) -> int:
    """1 when any condition named in fail_on holds, else 0."""
    fail_on = set(fail_on)
    if "slower" in fail_on and result.count(SLOWER):
        return 1
    if "missing" in fail_on and result.missing:
        return 1
    if "failed" in fail_on and result.failed:
        return 1
    return 0
