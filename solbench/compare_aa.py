"""`solbench compare --aa RUN1 RUN2 [RUN3 ...]`: check the gate on unchanged code before trusting it.

Two or more runs of the same code on the same runner are compared pairwise with exactly the rule
`solbench compare` uses. Every SLOWER or FASTER among them is a false alarm. Beside the count, the
changes are expressed in units of the pairs' combined run-to-run spread: if the noise model fits the
runner, about 5% of them exceed 1.96 and none comes near the call margin (3.29 at the default
confidence); many more means the model is too narrow for this runner (re-measure it with
`solbench noise`, or raise --confidence).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, Sequence

from solbench.compare import (DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD, FASTER, SLOWER, VERDICT_ORDER,
                              CompareResult, PairResult, compare_runs, load_results)
from solbench.compare_render import load_model_flag, markdown_table, pair_json, rule_text
from solbench.console import make_console
from solbench.errors import UserError

AA_SCHEMA = "solbench.compare-aa/1"
WORST_SHOWN = 10
Z_95 = 1.96                 # a model that fits: about 5% of A/A changes beyond this many spreads


@dataclass(frozen=True)
class AAPair:
    comparison: CompareResult
    pair: PairResult

    @property
    def spreads(self) -> float | None:
        """|log ratio| in units of the combined run-to-run spread (None: no ratio or no spread)."""
        v = self.pair.verdict
        if v.ratio is None or not v.run_to_run:
            return None
        return abs(math.log(v.ratio)) / v.run_to_run

    @property
    def is_false_alarm(self) -> bool:
        return self.pair.verdict.verdict in (SLOWER, FASTER)


@dataclass
class AAResult:
    paths: list[str]
    comparisons: list[CompareResult]       # one per pair of runs, earlier run as BASE

    @property
    def pairs(self) -> list[AAPair]:
        return [AAPair(c, p) for c in self.comparisons for p in c.pairs]

    @property
    def false_alarms(self) -> list[AAPair]:
        return [p for p in self.pairs if p.is_false_alarm]

    def counts(self) -> dict[str, int]:
        return {v: sum(c.count(v) for c in self.comparisons) for v in VERDICT_ORDER}

    def spread_summary(self) -> dict[str, float | int | None]:
        z = sorted(s for s in (p.spreads for p in self.pairs) if s is not None)
        if not z:
            return {"n": 0, "p95": None, "max": None, "beyond_1.96": None}
        p95 = z[min(len(z) - 1, math.ceil(0.95 * len(z)) - 1)]
        return {"n": len(z), "p95": p95, "max": z[-1], "beyond_1.96": sum(x > Z_95 for x in z) / len(z)}

    def worst(self, n: int = WORST_SHOWN) -> list[AAPair]:
        """The pairs closest to a false alarm: largest change relative to the margin a call needed."""
        def closeness(p: AAPair) -> float:
            v = p.pair.verdict
            if v.ratio is None:
                return -1.0
            return abs(math.log(v.ratio)) / v.rr_margin if v.rr_margin else math.inf

        return sorted(self.pairs, key=closeness, reverse=True)[:n]


def compare_aa(paths: Sequence[str | Path], *, metric: str = "time", threshold: float = DEFAULT_THRESHOLD,
               alpha: float = DEFAULT_ALPHA, confidence: float = DEFAULT_CONFIDENCE,
               noise_model: str | Path | None = None, allow_mixed_methods: bool = False) -> AAResult:
    """Every pair of runs compared with the gate's rule (the earlier file as BASE)."""
    if len(paths) < 2:
        raise UserError(f"needs at least two results files of the same code, got {len(paths)}", field="--aa")
    model = load_model_flag(noise_model)
    runs = [(str(p), load_results(p)) for p in paths]
    comparisons = [compare_runs(a, b, base_path=pa, new_path=pb, metric=metric, threshold=threshold, alpha=alpha,
                                confidence=confidence, model=model, allow_mixed_methods=allow_mixed_methods)
                   for (pa, a), (pb, b) in combinations(runs, 2)]
    result = AAResult([p for p, _ in runs], comparisons)
    if not result.pairs:
        raise UserError("no record is ok in two of these runs: nothing to compare", field="--aa")
    return result


def _pair_row(p: AAPair) -> list[str]:
    v = p.pair.verdict
    change = "-" if v.ratio is None else f"{v.ratio - 1:+.2%}"
    margin = "-" if v.rr_margin is None else f"±{math.expm1(v.rr_margin):.1%}"
    spreads = "-" if p.spreads is None else f"{p.spreads:.2f}"
    return [f"{Path(p.comparison.base_path).name} -> {Path(p.comparison.new_path).name}", p.pair.name, change,
            margin, spreads, v.decided_by or "-", v.verdict]


PAIR_HEADER = ["runs", "benchmark", "change", "run-to-run", "spreads", "decided by", "verdict"]


def headline(result: AAResult) -> str:
    alarms = result.false_alarms
    counts = ", ".join(f"{n} {v.lower()}" for v, n in result.counts().items())
    return (f"A/A: {len(result.pairs)} pairs from {len(result.paths)} runs ({len(result.comparisons)} comparisons): "
            f"{len(alarms)} false alarm(s); {counts}")


def spread_line(result: AAResult) -> str:
    s = result.spread_summary()
    if not s["n"]:
        return "no pair had a ratio and a run-to-run spread"
    return (f"changes in run-to-run spreads: 95th percentile {s['p95']:.2f}, max {s['max']:.2f}, "
            f"{s['beyond_1.96']:.1%} beyond 1.96 (a model that fits this runner: about 5%)")


def to_json(result: AAResult) -> dict[str, Any]:
    return {
        "schema": AA_SCHEMA,
        "runs": result.paths,
        "pairs": len(result.pairs),
        "false_alarms": len(result.false_alarms),
        "counts": result.counts(),
        "spreads": result.spread_summary(),
        "rule": rule_text(result.comparisons[0]),
        "comparisons": [{"base": c.base_path, "new": c.new_path, "counts": {v: c.count(v) for v in VERDICT_ORDER},
                         "pairs": [pair_json(p) for p in c.pairs]} for c in result.comparisons],
        "worst": [{"base": p.comparison.base_path, "new": p.comparison.new_path, "spreads": p.spreads,
                   **pair_json(p.pair)} for p in result.worst()],
        "exit_code": exit_code(result),
    }


def to_markdown(result: AAResult) -> str:
    rows = [_pair_row(p) for p in result.false_alarms] or [_pair_row(p) for p in result.worst()]
    title = "False alarms" if result.false_alarms else "Closest to a false alarm"
    return "\n".join([f"## solbench compare --aa: {len(result.false_alarms)} false alarm(s)", "",
                      headline(result) + ".", "", spread_line(result) + ".", "", f"### {title}", "",
                      markdown_table(PAIR_HEADER, rows), "", f"<sub>{rule_text(result.comparisons[0])}</sub>", ""])


def render_terminal(result: AAResult) -> None:
    from rich.table import Table

    console = make_console()
    table = Table(title="closest to a false alarm (change / run-to-run margin)")
    for h in PAIR_HEADER:
        table.add_column(h, justify="left" if h in ("runs", "benchmark") else "right")
    for p in result.worst():
        table.add_row(*_pair_row(p))
    console.print(table)
    for p in result.false_alarms:
        console.print(f"[bold red]false alarm[/]: {_pair_row(p)[0]} {p.pair.name}: {p.pair.verdict.reason}",
                      highlight=False)
    console.print(headline(result), highlight=False)
    console.print(spread_line(result), highlight=False)


def exit_code(result: AAResult) -> int:
    """1 when unchanged code got any SLOWER or FASTER verdict: the gate would cry wolf on this runner."""
    return 1 if result.false_alarms else 0


def run_aa(paths: Sequence[str | Path], *, json_path: str | Path | None = None,
           markdown: str | Path | None = None, quiet: bool = False, **settings: Any) -> int:
    """What `solbench compare --aa` does; returns the exit code."""
    result = compare_aa(paths, **settings)
    if not quiet:
        render_terminal(result)
    for path, text in ((json_path, lambda: json.dumps(to_json(result), indent=2) + "\n"),
                       (markdown, lambda: to_markdown(result))):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text())
    return exit_code(result)
