"""SOL bar charts: per op, one bar of SOL per implementation and case, drawn from results files only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from solbench.charts import (DTYPE_SHORT, ERROR_COLOR, chart_title, impl_colors, save_figure, select_records,
                             split_list)
from solbench.compare import key_name, load_results
from solbench.errors import UserError
from solbench.results import Record, Run


@dataclass
class SolBarsSummary:
    n_bars: int
    ops: list[str]
    invalid: list[str]
    failed: list[str]                  # status "failed": wrong output
    errors: list[str] = field(default_factory=list)   # status "error": it did not run to a result


def plot_sol_bars(
    runs: Sequence[Run],
    *,
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    impls: Sequence[str] | None = None,
    title: str | None = None,
) -> tuple[Figure, SolBarsSummary]:
    """Per op, bars of SOL per implementation side by side (baselines first) for each case."""
    selected = select_records(runs, ops=ops, dtypes=dtypes, impls=impls,
                              statuses=("ok", "invalid", "failed", "error"))
    if not any(rec.status in ("ok", "invalid") and rec.sol is not None for _, rec in selected):
        counts = {s: sum(1 for _, r in selected if r.status == s) for s in ("error", "failed")}
        raise UserError(f"nothing to plot: none of the {len(selected)} selected records has a SOL ("
                        + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                        + "); their messages say why (`solbench report`)")
    by_op: dict[str, list[Record]] = {}
    for _, rec in selected:
        by_op.setdefault(rec.op, []).append(rec)
    op_names = sorted(by_op)
    widest = max(len({(r.case, r.dtype) for r in recs}) for recs in by_op.values())
    fig = Figure(figsize=(max(6.0, 1.6 * widest + 3), 3.2 * len(op_names)), layout="constrained")
    axes = fig.subplots(len(op_names), 1, squeeze=False)[:, 0]
    summary = SolBarsSummary(0, op_names, [], [])
    for ax, op in zip(axes, op_names):
        _sol_bars_for_op(ax, op, by_op[op], summary)
    fig.suptitle(title or chart_title(runs, "Speed of light per implementation"))
    return fig, summary


def _sol_bars_for_op(ax: Any, op: str, recs: list[Record], summary: SolBarsSummary) -> None:
    groups = sorted({(r.case, r.dtype) for r in recs})
    impl_names = sorted({r.impl for r in recs},
                        key=lambda i: (not any(r.is_baseline for r in recs if r.impl == i), i))
    colors = impl_colors(impl_names)      # the same colour per impl in every chart
    width = 0.8 / len(impl_names)
    lookup = {(r.case, r.dtype, r.impl): r for r in recs}
    for j, impl in enumerate(impl_names):
        for i, (case, dtype) in enumerate(groups):
            rec = lookup.get((case, dtype, impl))
            if rec is None:
                continue
            x = i - 0.4 + width * (j + 0.5)
            name = key_name(rec.key)
            status, sol = rec.status, rec.sol
            if status == "ok" and sol is not None:
                bars = ax.bar([x], [min(float(sol), 1.0)], width, color=colors[impl])
                bars.patches[0].set_gid(f"bar:{name}")
                ax.annotate(f"{sol:.0%}", (x, min(float(sol), 1.0)), ha="center", va="bottom", fontsize=7)
                summary.n_bars += 1
            elif status == "invalid":
                bars = ax.bar([x], [1.0], width, color="none", edgecolor=ERROR_COLOR, hatch="xx")
                bars.patches[0].set_gid(f"invalid:{name}")
                ax.annotate("invalid", (x, 0.5), ha="center", rotation=90, fontsize=7, color=ERROR_COLOR,
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
                summary.invalid.append(name)
            else:
                ax.annotate(str(status), (x, 0.02), ha="center", rotation=90, fontsize=7, color=ERROR_COLOR,
                            gid=f"{status}:{name}")
                (summary.errors if status == "error" else summary.failed).append(name)
    ax.set_xlim(-0.5, len(groups) - 0.5)  # annotations alone do not widen the axis
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{c}\n{DTYPE_SHORT.get(d, d)}" for c, d in groups], fontsize=7)
    ax.set_ylim(0, 1.12)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(0.8, color="gray", lw=0.6, ls=":")
    ax.set_ylabel("SOL")
    ax.set_title(op, fontsize=10, loc="left")
    ax.legend(handles=[Patch(color=colors[i], label=i) for i in impl_names], fontsize=7, loc="upper right",
              ncol=min(4, len(impl_names)))


def run_sol_plot(paths: Sequence[str | Path], output: str | Path, *, ops: Any = None, dtypes: Any = None,
                 impls: Any = None) -> SolBarsSummary:
    """What `solbench plot sol` does."""
    runs = [load_results(p) for p in paths]
    fig, summary = plot_sol_bars(runs, ops=split_list(ops), dtypes=split_list(dtypes), impls=split_list(impls))
    save_figure(fig, output, runs)
    return summary
