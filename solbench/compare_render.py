"""What `solbench compare` shows and writes: a terminal table, a pull-request comment, JSON, and the
formats of CI benchmark tools (github-action-benchmark, Bencher); and the command itself."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from solbench.compare import (AMBIGUOUS, COMPARE_SCHEMA, DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD,
                              FASTER, MIN_SAMPLES, SAME, SLOWER, VERDICT_ORDER, CompareResult, Key, PairResult,
                              Problem, Verdict, compare_runs, exit_code, key_name, load_results, parse_fail_on, z_for)
from solbench.noise_model import RunToRunModel, load_noise_file
from solbench.console import make_console
from solbench.errors import UserError
from solbench.results import Record, Run


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


def _fmt_change(v: Verdict, metric: str = "time") -> str:
    """The change of the metric shown: time, or SOL. The verdict's ratio is of the cost (time, or time /
    T_SOL = 1 / SOL), so for SOL it is inverted: a SOL increase reads +, an improvement."""
    if v.ratio is None:
        return "-"
    if metric == "sol":
        text = f"{1 / v.ratio - 1:+.1%}"
        if v.ci_low and v.ci_high:
            text += f" [{1 / v.ci_high - 1:+.1%}, {1 / v.ci_low - 1:+.1%}]"
        return text
    text = f"{v.ratio - 1:+.1%}"
    if v.ci_low is not None and v.ci_high is not None:
        text += f" [{v.ci_low - 1:+.1%}, {v.ci_high - 1:+.1%}]"
    return text


def table_header(metric: str) -> list[str]:
    """TABLE_HEADER with the change column named after the metric: `time change` or `SOL change`."""
    change = "SOL change (CI)" if metric == "sol" else "time change (CI)"
    return [change if h == TABLE_HEADER[3] else h for h in TABLE_HEADER]


def _fmt_margin(p: PairResult) -> str:
    """The run-to-run margin a change had to exceed; '*' when a default model (not a measured one) set it."""
    margin = p.verdict.rr_margin
    if margin is None or not math.isfinite(margin):
        return "-"
    default = any(rr is not None and rr.is_default for rr in (p.base_rr, p.new_rr))
    return f"±{math.expm1(margin):.1%}" + ("*" if default else "")


def table_rows(result: CompareResult) -> list[list[str]]:
    """Rows for any table renderer: name, base, new, change (CI), run-to-run margin, p, decided by, verdict."""
    rows = []
    for p in result.pairs:
        v = p.verdict
        rows.append([p.name, _fmt_value(p.base_value, p.metric), _fmt_value(p.new_value, p.metric),
                     _fmt_change(v, p.metric), _fmt_margin(p), "-" if v.p_value is None else f"{v.p_value:.2g}",
                     v.decided_by or "-", v.verdict])
    return rows


TABLE_HEADER = ["benchmark", "base", "new", "cost change (CI)", "run-to-run", "p", "decided by", "verdict"]


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table; pandas' to_markdown needs tabulate, which may be absent."""
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rule_text(result: CompareResult) -> str:
    t, a, c = result.threshold, result.alpha, result.confidence
    text = (f"SLOWER/FASTER only when all three criteria are met: within-run (Mann-Whitney U on the raw samples, "
            f"p < {a:g}), run-to-run (the change exceeds {z_for(c):.2f} x the combined run-to-run spread of the "
            f"two medians, {c:.1%} confidence: the 'run-to-run' column) and threshold (the seeded {1 - a:.0%} "
            f"bootstrap CI of new/base beyond +/-{t / 2:.1%} and reaching +/-{t:.0%}). Otherwise SAME when the CI "
            f"lies within the larger of +/-{t:.0%} and the run-to-run margin, else AMBIGUOUS; fewer than "
            f"{MIN_SAMPLES} samples: AMBIGUOUS. 'decided by' names the criteria not met.")
    if result.default_rr:
        text += (f" * {result.default_rr} record(s) used the default run-to-run model (no `solbench noise` "
                 f"measurement for this device): the margin is conservative.")
    return text


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
             markdown_table(table_header(result.metric), table_rows(result)), ""]
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
        "confidence": result.confidence, "rule": rule_text(result),
        "counts": {v: result.count(v) for v in VERDICT_ORDER},
        "default_run_to_run": result.default_rr,
        "pairs": [pair_json(p) for p in result.pairs],
        "missing": [problem(p) for p in result.missing],
        "failed": [problem(p) for p in result.failed],
        "recovered": [problem(p) for p in result.recovered],
        "added": [key_name(k) for k in result.added],
        "exit_code": exit_code(result, fail_on),
    }


def pair_json(p: PairResult) -> dict[str, Any]:
    """One pair: its verdict with every number and criterion, and where each side's run-to-run came from."""
    def rr(side: Any) -> dict[str, Any] | None:
        return None if side is None else {"spread": side.spread, "source": side.source}

    return {"name": p.name, "key": list(p.key), "base": p.base_value, "new": p.new_value, **asdict(p.verdict),
            "base_run_to_run": rr(p.base_rr), "new_run_to_run": rr(p.new_rr)}


def _ok_timed(run: Run) -> list[Record]:
    return [r for r in run.records if r.median_s]


def to_github_benchmark(run: Run, verdicts: dict[Key, Verdict] | None = None) -> list[dict[str, Any]]:
    """github-action-benchmark `customSmallerIsBetter`: NEW's median time per ok record, in us."""
    out = []
    for rec in _ok_timed(run):
        ts = rec.time_s or {}
        entry: dict[str, Any] = {"name": key_name(rec.key), "unit": "us",
                                 "value": round(ts["median"] * 1e6, 6)}
        if ts.get("q1") is not None and ts.get("q3") is not None:
            entry["range"] = f"± {round((ts['q3'] - ts['q1']) * 1e6 / 2, 6)}"
        extra = []
        if rec.sol is not None:
            extra.append(f"SOL {rec.sol:.1%}")
        v = (verdicts or {}).get(rec.key)
        if v is not None:
            extra.append(f"{v.verdict} vs base")
        if extra:
            entry["extra"] = "; ".join(extra)
        out.append(entry)
    return out


def to_bencher(run: Run) -> dict[str, Any]:
    """Bencher Metric Format: median latency in ns, interquartile range as lower/upper values."""
    out: dict[str, Any] = {}
    for rec in _ok_timed(run):
        ts = rec.time_s or {}
        latency: dict[str, float] = {"value": ts["median"] * 1e9}
        if ts.get("q1") is not None and ts.get("q3") is not None:
            latency["lower_value"] = ts["q1"] * 1e9
            latency["upper_value"] = ts["q3"] * 1e9
        out[key_name(rec.key)] = {"latency": latency}
    return out


def render_terminal(result: CompareResult) -> None:
    """Print the verdict table with rich (the CLI's human output)."""
    from rich.table import Table

    style = {SLOWER: "bold red", FASTER: "green", SAME: "", AMBIGUOUS: "yellow"}
    table = Table(title=f"solbench compare ({result.metric}): {result.base_path} -> {result.new_path}")
    for h in table_header(result.metric):
        table.add_column(h, justify="left" if h == "benchmark" else "right")
    for row in table_rows(result):
        table.add_row(*row[:-1], f"[{style[row[-1]]}]{row[-1]}[/]" if style[row[-1]] else row[-1])
    console = make_console()
    console.print(table)
    for title, problems in (("newly failing", result.failed), ("missing from NEW", result.missing)):
        for p in problems:
            console.print(f"[red]{title}[/]: {p.name} ({p.new_status or 'absent'}) {p.message}")
    console.print(rule_text(result), style="dim")


def load_model_flag(path: str | Path | None) -> RunToRunModel | None:
    """--noise-model FILE: a `solbench noise` file whose model replaces the records' modelled run-to-run part."""
    if path is None:
        return None
    if not Path(path).is_file():
        raise UserError("no such noise model file (made by `solbench noise`)", file=path, field="--noise-model")
    return load_noise_file(Path(path))


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
    confidence: float = DEFAULT_CONFIDENCE,
    noise_model: str | Path | None = None,
    allow_cross_device: bool = False,
    allow_mixed_methods: bool = False,
    fail_on: str = "slower",
    markdown: str | Path | None = None,
    json_path: str | Path | None = None,
    github_benchmark: str | Path | None = None,
    bencher: str | Path | None = None,
    quiet: bool = False,
) -> int:
    """What `solbench compare` does; returns the exit code."""
    conditions = parse_fail_on(fail_on)
    model = load_model_flag(noise_model)
    base_run, new_run = load_results(base), load_results(new)
    result = compare_runs(base_run, new_run, base_path=str(base), new_path=str(new), metric=metric,
                          threshold=threshold, alpha=alpha, confidence=confidence, model=model,
                          allow_cross_device=allow_cross_device, allow_mixed_methods=allow_mixed_methods)
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
