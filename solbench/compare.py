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

import json
import math
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from solbench.console import make_console
from solbench.errors import UserError
from solbench.results import load_run

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


def load_results(path: str | Path) -> dict[str, Any]:
    """Load and check one results file (errors name the file)."""
    return load_run(Path(path))


def record_key(rec: dict[str, Any]) -> Key:
    return (str(rec.get("op")), str(rec.get("case")), str(rec.get("dtype")), str(rec.get("impl")))


def is_baseline(rec: dict[str, Any]) -> bool:
    return bool(rec.get("is_baseline")) or rec.get("kind") == "baseline"


def key_name(key: Key) -> str:
    return "/".join(key)


def index_records(run: dict[str, Any], source: str | Path = "") -> dict[Key, dict[str, Any]]:
    """Records by (op, case, dtype, impl); a duplicate key is an error, not a silent overwrite."""
    out: dict[Key, dict[str, Any]] = {}
    for i, rec in enumerate(run.get("records", [])):
        key = record_key(rec)
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


def _samples(rec: dict[str, Any], source: str, metric: str) -> np.ndarray:
    raw = rec.get("samples_s") or []
    try:
        arr = np.asarray(raw, dtype=float).ravel()  # a null sample becomes NaN and fails below
    except (TypeError, ValueError):
        arr = np.asarray([np.nan])
    if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise UserError("samples must be finite and positive seconds", file=source,
                        field=f"{key_name(record_key(rec))}.samples_s")
    if metric == "sol":
        t_sol = rec.get("t_sol_s")
        if not t_sol or t_sol <= 0:
            return np.asarray([], dtype=float)
        # Time over T_SOL is 1/SOL per sample: a cost that stays comparable across GPUs.
        arr = arr / float(t_sol)
    return arr


def _display_value(rec: dict[str, Any], metric: str) -> float | None:
    if metric == "sol":
        return rec.get("sol")
    return (rec.get("time_s") or {}).get("median")


def _device(run: dict[str, Any]) -> str:
    return str((run.get("env") or {}).get("device") or "unknown")


def compare_runs(
    base: dict[str, Any],
    new: dict[str, Any],
    *,
    base_path: str = "BASE",
    new_path: str = "NEW",
    metric: str = "time",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    allow_cross_device: bool = False,
    seed: int = 0,
) -> CompareResult:
    """Pair BASE and NEW by (op, case, dtype, impl) and decide a verdict for each ok/ok pair."""
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}", field="--metric")
    if not 0 < alpha < 1:
        raise UserError(f"alpha must be in (0, 1), got {alpha}", field="--alpha")
    if not 0 <= threshold < 1:
        raise UserError(f"threshold must be in [0, 1), got {threshold}", field="--threshold")
    base_dev, new_dev = _device(base), _device(new)
    if metric == "time" and base_dev != new_dev and not allow_cross_device:
        raise UserError(
            f"BASE ran on {base_dev!r} and NEW on {new_dev!r}: times from different devices are not "
            "comparable; use --metric sol, or --allow-cross-device if you really mean it",
            file=new_path, field="env.device")
    b_idx, n_idx = index_records(base, base_path), index_records(new, new_path)
    result = CompareResult(base_path, new_path, base_dev, new_dev, metric, threshold, alpha,
                           [], [], [], [k for k in n_idx if k not in b_idx], [])
    for key, brec in b_idx.items():
        nrec = n_idx.get(key)
        b_status = brec.get("status")
        n_status = nrec.get("status") if nrec else None
        if b_status != "ok":
            if n_status == "ok":
                result.recovered.append(Problem(key, b_status, n_status, "ok in NEW, not in BASE"))
            continue
        if nrec is None or n_status in NOT_RUN_STATUSES:
            msg = "absent from NEW" if nrec is None else f"{n_status} in NEW: {nrec.get('message', '')}"
            result.missing.append(Problem(key, b_status, n_status, msg.strip()))
            continue
        if n_status != "ok":
            result.failed.append(Problem(key, b_status, n_status, str(nrec.get("message") or "")))
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


# ---------------------------------------------------------------- formatting


def format_seconds(t: float | None) -> str:
    if t is None or not math.isfinite(t):
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def _fmt_value(v: float | None, metric: str) -> str:
    if v is None:
        return "-"
    return f"{v:.1%}" if metric == "sol" else format_seconds(v)


def _fmt_change(v: Verdict) -> str:
    if v.ratio is None:
        return "-"
    text = f"{v.ratio - 1:+.1%}"
    if v.ci_low is not None and v.ci_high is not None:
        text += f" [{v.ci_low - 1:+.1%}, {v.ci_high - 1:+.1%}]"
    return text


def table_rows(result: CompareResult) -> list[list[str]]:
    """Rows for any table renderer: name, base, new, change (CI), p, verdict."""
    rows = []
    for p in result.pairs:
        v = p.verdict
        rows.append([p.name, _fmt_value(p.base_value, p.metric), _fmt_value(p.new_value, p.metric),
                     _fmt_change(v), "-" if v.p_value is None else f"{v.p_value:.2g}", v.verdict])
    return rows


TABLE_HEADER = ["benchmark", "base", "new", "cost change (CI)", "p", "verdict"]


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table; pandas' to_markdown needs tabulate, which may be absent."""
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rule_text(result: CompareResult) -> str:
    t, a = result.threshold, result.alpha
    return (f"Verdicts from raw samples: Mann-Whitney U (alpha {a:g}) and a seeded {1 - a:.0%} bootstrap CI "
            f"of the ratio of medians (new/base). SAME: CI within +/-{t:.0%}; SLOWER/FASTER: p < {a:g} and "
            f"the CI beyond +/-{t / 2:.1%}; else AMBIGUOUS; fewer than {MIN_SAMPLES} samples: AMBIGUOUS.")


def to_markdown(result: CompareResult) -> str:
    """A pull-request comment: headline counts, worst regressions first, then problems."""
    counts = ", ".join(f"{result.count(v)} {v.lower()}" for v in (SLOWER, AMBIGUOUS, SAME, FASTER))
    metric = "SOL (time / T_SOL)" if result.metric == "sol" else "time"
    head = "regressions found" if result.count(SLOWER) else "no regressions"
    lines = [f"## solbench compare: {head}", "",
             f"**{counts}**; {len(result.missing)} missing, {len(result.failed)} newly failing, "
             f"{len(result.added)} new.", "",
             f"Metric: {metric}. BASE `{result.base_path}` ({result.base_device}), "
             f"NEW `{result.new_path}` ({result.new_device}).", "",
             markdown_table(TABLE_HEADER, table_rows(result)), ""]
    for title, problems in (("Newly failing in NEW", result.failed), ("Missing from NEW", result.missing)):
        if problems:
            lines += [f"### {title}", ""]
            lines += [f"- `{p.name}`: {p.new_status or 'absent'}" + (f": {p.message}" if p.message else "")
                      for p in problems]
            lines.append("")
    if result.added:
        lines += ["### Only in NEW", ""] + [f"- `{key_name(k)}`" for k in result.added] + [""]
    lines += [f"<sub>{rule_text(result)}</sub>", ""]
    return "\n".join(lines)


def to_json(result: CompareResult, fail_on: Iterable[str] = ("slower",)) -> dict[str, Any]:
    def problem(p: Problem) -> dict[str, Any]:
        return {"name": p.name, "key": list(p.key), "base_status": p.base_status,
                "new_status": p.new_status, "message": p.message}

    return {
        "schema": COMPARE_SCHEMA,
        "base": {"path": result.base_path, "device": result.base_device},
        "new": {"path": result.new_path, "device": result.new_device},
        "metric": result.metric, "threshold": result.threshold, "alpha": result.alpha,
        "rule": rule_text(result),
        "counts": {v: result.count(v) for v in VERDICT_ORDER},
        "pairs": [{"name": p.name, "key": list(p.key), "base": p.base_value, "new": p.new_value,
                   **asdict(p.verdict)} for p in result.pairs],
        "missing": [problem(p) for p in result.missing],
        "failed": [problem(p) for p in result.failed],
        "recovered": [problem(p) for p in result.recovered],
        "added": [key_name(k) for k in result.added],
        "exit_code": exit_code(result, fail_on),
    }


def _ok_timed(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in run.get("records", [])
            if r.get("status") == "ok" and (r.get("time_s") or {}).get("median")]


def to_github_benchmark(run: dict[str, Any], verdicts: dict[Key, Verdict] | None = None) -> list[dict[str, Any]]:
    """github-action-benchmark `customSmallerIsBetter`: NEW's median time per ok record, in us."""
    out = []
    for rec in _ok_timed(run):
        ts = rec["time_s"]
        entry: dict[str, Any] = {"name": key_name(record_key(rec)), "unit": "us",
                                 "value": round(ts["median"] * 1e6, 6)}
        if ts.get("q1") is not None and ts.get("q3") is not None:
            entry["range"] = f"± {round((ts['q3'] - ts['q1']) * 1e6 / 2, 6)}"
        extra = []
        if rec.get("sol") is not None:
            extra.append(f"SOL {rec['sol']:.1%}")
        v = (verdicts or {}).get(record_key(rec))
        if v is not None:
            extra.append(f"{v.verdict} vs base")
        if extra:
            entry["extra"] = "; ".join(extra)
        out.append(entry)
    return out


def to_bencher(run: dict[str, Any]) -> dict[str, Any]:
    """Bencher Metric Format: median latency in ns, interquartile range as lower/upper values."""
    out: dict[str, Any] = {}
    for rec in _ok_timed(run):
        ts = rec["time_s"]
        latency: dict[str, float] = {"value": ts["median"] * 1e9}
        if ts.get("q1") is not None and ts.get("q3") is not None:
            latency["lower_value"] = ts["q1"] * 1e9
            latency["upper_value"] = ts["q3"] * 1e9
        out[key_name(record_key(rec))] = {"latency": latency}
    return out


def render_terminal(result: CompareResult) -> None:
    """Print the verdict table with rich (the CLI's human output)."""
    from rich.table import Table

    style = {SLOWER: "bold red", FASTER: "green", SAME: "", AMBIGUOUS: "yellow"}
    table = Table(title=f"solbench compare ({result.metric}): {result.base_path} -> {result.new_path}")
    for h in TABLE_HEADER:
        table.add_column(h, justify="left" if h == "benchmark" else "right")
    for row in table_rows(result):
        table.add_row(*row[:-1], f"[{style[row[-1]]}]{row[-1]}[/]" if style[row[-1]] else row[-1])
    console = make_console()
    console.print(table)
    for title, problems in (("newly failing", result.failed), ("missing from NEW", result.missing)):
        for p in problems:
            console.print(f"[red]{title}[/]: {p.name} ({p.new_status or 'absent'}) {p.message}")
    console.print(rule_text(result), style="dim")


def _write(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_compare(
    base: str | Path,
    new: str | Path,
    *,
    metric: str = "time",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    allow_cross_device: bool = False,
    fail_on: str = "slower",
    markdown: str | Path | None = None,
    json_path: str | Path | None = None,
    github_benchmark: str | Path | None = None,
    bencher: str | Path | None = None,
    quiet: bool = False,
) -> int:
    """What `solbench compare` does; returns the exit code."""
    conditions = parse_fail_on(fail_on)
    base_run, new_run = load_results(base), load_results(new)
    result = compare_runs(base_run, new_run, base_path=str(base), new_path=str(new), metric=metric,
                          threshold=threshold, alpha=alpha, allow_cross_device=allow_cross_device)
    if not quiet:
        render_terminal(result)
    if markdown:
        _write(markdown, to_markdown(result))
    if json_path:
        _write(json_path, json.dumps(to_json(result, conditions), indent=2) + "\n")
    if github_benchmark:
        verdicts = {p.key: p.verdict for p in result.pairs}
        _write(github_benchmark, json.dumps(to_github_benchmark(new_run, verdicts), indent=2) + "\n")
    if bencher:
        _write(bencher, json.dumps(to_bencher(new_run), indent=2) + "\n")
    return exit_code(result, conditions)
