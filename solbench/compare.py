"""Compare two results files: pair records by (op, case, dtype, impl), judge each pair with the gate's
decision rule (verdict.py: within-run, run-to-run and threshold criteria), decide the exit code.

Each record brings its own run-to-run spread (`time_s.run_to_run`: the device's noise model from
noise_model.py, plus the clock and timer-calibration spread its run saw); records from results files
older than that field get the default model of their device kind, and `--noise-model FILE` replaces
the modelled part with a measured model.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from solbench.errors import UserError
from solbench.noise_model import RunToRunModel, default_model
from solbench.results import Record, Run, load_run
from solbench.verdict import (ALL_THREE, AMBIGUOUS, CRITERIA, DEFAULT_ALPHA, DEFAULT_CONFIDENCE,  # noqa: F401
                              DEFAULT_THRESHOLD, FASTER, MIN_SAMPLES, RUN_TO_RUN, SAME, SLOWER, THRESHOLD,
                              VERDICT_ORDER, WITHIN, Verdict, decide, z_for)

COMPARE_SCHEMA = "solbench.compare/1"

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


# ---------------------------------------------------------------- pairing


@dataclass(frozen=True)
class RunToRun:
    """One record's between-run spread of its median, and where the number came from."""

    spread: float
    source: str            # the record's time_s.run_to_run_source, or the default model that filled in

    @property
    def is_default(self) -> bool:
        return self.source.startswith("default")


@dataclass(frozen=True)
class PairResult:
    key: Key
    verdict: Verdict
    metric: str
    base_value: float | None  # median time (s) or SOL
    new_value: float | None
    base_rr: RunToRun | None = None
    new_rr: RunToRun | None = None

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
    confidence: float
    pairs: list[PairResult]
    missing: list[Problem]  # ok in BASE, absent or not run in NEW
    failed: list[Problem]  # ok in BASE, failed/invalid/error in NEW
    added: list[Key]  # only in NEW
    recovered: list[Problem]  # not ok in BASE, ok in NEW

    def count(self, verdict: str) -> int:
        return sum(1 for p in self.pairs if p.verdict.verdict == verdict)

    @property
    def default_rr(self) -> int:
        """Records whose run-to-run spread came from a default model, not a measured one."""
        return sum(int(rr.is_default) for p in self.pairs for rr in (p.base_rr, p.new_rr) if rr is not None)


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


def record_run_to_run(rec: Record, device_kind: str, model: RunToRunModel | None = None) -> RunToRun:
    """A record's run-to-run spread: `time_s.run_to_run` as measured, unless `model` replaces the modelled
    part; a record without one (an older results file) gets the default model of its device kind. The
    clock and tare spread the run saw (telemetry.noise) are added to any model evaluated here."""
    ts = rec.time_s or {}
    given = ts.get("run_to_run")
    if model is None and isinstance(given, (int, float)) and math.isfinite(given) and given >= 0:
        return RunToRun(float(given), str(ts.get("run_to_run_source") or "record"))
    chosen = model or default_model(device_kind)
    seen = (rec.telemetry or {}).get("noise") or {}
    extra = [float(seen.get(k) or 0.0) for k in ("clock", "overhead")]
    spread = math.sqrt(chosen.spread(float(ts.get("median") or 0.0)) ** 2 + sum(x * x for x in extra))
    source = chosen.source if model is not None else f"{chosen.source} (not in the results file)"
    return RunToRun(spread, source)


def _display_value(rec: Record, metric: str) -> float | None:
    return rec.sol if metric == "sol" else (rec.time_s or {}).get("median")


def _method(run: Run) -> tuple[str, str]:
    """What a run's numbers were measured with: (timers of its timed records, peak source)."""
    timers = sorted({r.timer for r in run.records if r.timer}) or [str(run.timer)]
    return ",".join(timers), str(run.peaks.get("source", "?"))


def _flush(run: Run) -> str:
    """How a run's GPU records flushed the L2: write (also every record from before the mode was recorded),
    read or balanced; several modes joined by commas."""
    modes = {(r.telemetry or {}).get("flush_mode") or "write" for r in run.records
             if r.timer and r.timer != "wall" and (r.telemetry or {}).get("flush_bytes")}
    return ",".join(sorted(modes)) or "write"


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
    b_flush, n_flush = _flush(base), _flush(new)
    if b_flush != n_flush:
        raise UserError(f"BASE flushed the L2 by '{b_flush}' and NEW by '{n_flush}': the modes leave the L2 with "
                        f"different dirty lines for the timed call to write back; rerun with the same --flush, or "
                        f"pass --allow-mixed-methods", file=new_path, field="records[].telemetry.flush_mode")
    if metric == "sol" and b_peaks != n_peaks:
        raise UserError(f"BASE was scored against '{b_peaks}' peaks and NEW against '{n_peaks}': SOL from "
                        f"different ceilings is not comparable; use the same --peaks, or pass "
                        f"--allow-mixed-methods", file=new_path, field="peaks.source")


@dataclass(frozen=True)
class Settings:
    """How pairs are judged (the flags of `solbench compare`)."""

    metric: str = "time"
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA
    confidence: float = DEFAULT_CONFIDENCE
    model: RunToRunModel | None = None       # replaces the records' modelled run-to-run part
    seed: int = 0

    def check(self) -> None:
        if self.metric not in METRICS:
            raise UserError(f"unknown metric {self.metric!r}; choose one of {', '.join(METRICS)}", field="--metric")
        if not 0 < self.alpha < 1:
            raise UserError(f"alpha must be in (0, 1), got {self.alpha}", field="--alpha")
        if not 0 <= self.threshold < 1:
            raise UserError(f"threshold must be in [0, 1), got {self.threshold}", field="--threshold")
        if not 0.5 <= self.confidence < 1:
            raise UserError(f"confidence must be in [0.5, 1), got {self.confidence}", field="--confidence")


def compare_runs(
    base: Run,
    new: Run,
    *,
    base_path: str = "BASE",
    new_path: str = "NEW",
    metric: str = "time",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    confidence: float = DEFAULT_CONFIDENCE,
    model: RunToRunModel | None = None,
    allow_cross_device: bool = False,
    allow_mixed_methods: bool = False,
    seed: int = 0,
) -> CompareResult:
    """Pair BASE and NEW by (op, case, dtype, impl) and decide a verdict for each ok/ok pair."""
    settings = Settings(metric, threshold, alpha, confidence, model, seed)
    settings.check()
    check_comparable(base, new, metric, allow_cross_device, allow_mixed_methods, new_path)
    b_idx, n_idx = index_records(base, base_path), index_records(new, new_path)
    result = CompareResult(base_path, new_path, base.device, new.device, metric, threshold, alpha, confidence,
                           [], [], [], [k for k in n_idx if k not in b_idx], [])
    kinds = (_device_kind(base), _device_kind(new))
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
        result.pairs.append(judge_pair(key, brec, nrec, settings, (base_path, new_path), kinds))
    result.pairs.sort(key=_worst_first)
    return result


def _device_kind(run: Run) -> str:
    return str(run.env.get("device_kind") or "cuda")


def judge_pair(key: Key, brec: Record, nrec: Record, settings: Settings, paths: tuple[str, str],
               kinds: tuple[str, str]) -> PairResult:
    """The verdict for one pair of ok records."""
    metric = settings.metric
    b_s, n_s = _samples(brec, paths[0], metric), _samples(nrec, paths[1], metric)
    b_rr = record_run_to_run(brec, kinds[0], settings.model)
    n_rr = record_run_to_run(nrec, kinds[1], settings.model)
    # One seed per pair, stable across runs, so a verdict never depends on record order.
    pair_seed = settings.seed ^ zlib.crc32(key_name(key).encode())
    if b_s.size == 0 or n_s.size == 0:
        what = "t_sol_s or samples_s" if metric == "sol" else "samples_s"
        v = Verdict(AMBIGUOUS, None, None, None, None, int(b_s.size), int(n_s.size), f"no {what}",
                    decided_by="samples")
    else:
        v = decide(b_s, n_s, threshold=settings.threshold, alpha=settings.alpha,
                   run_to_run=(b_rr.spread, n_rr.spread), confidence=settings.confidence, seed=pair_seed)
    return PairResult(key, v, metric, _display_value(brec, metric), _display_value(nrec, metric), b_rr, n_rr)


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
