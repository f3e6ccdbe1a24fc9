"""Roofline charts (FLOP/byte vs FLOP/s, one roof per precision present), drawn from results files only.

Functions return the matplotlib Figure plus a small summary, so tests inspect matplotlib objects
(artists carry `gid`s: "roof:...", "ridge:...", "point:...", "error:...", "arrow:...", "bar:...")
rather than pixels. No pyplot: a bare Figure renders through Agg and touches no display or global
figure registry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from solbench.charts import (DTYPE_SHORT, ERROR_COLOR, chart_title, colors_for, markers_for, save_figure,
                             select_records, split_list)
from solbench.compare import key_name, load_results
from solbench.errors import UserError
from solbench.results import Record, Run

# Two labels closer than this, as a fraction of each log axis span, would overlap: keep the first.
LABEL_MIN_SEP = (0.09, 0.045)
# Rounding in a results file must not turn a point sitting exactly on its roof into an error.
ROOF_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Roof:
    label: str
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    measured: bool

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the memory slope meets this compute roof."""
        return self.flops / self.bandwidth


@dataclass(frozen=True)
class Point:
    name: str
    op: str
    case: str
    dtype: str
    impl: str
    is_baseline: bool
    intensity: float
    achieved: float  # FLOP/s
    error: str | None  # why this point is not a legitimate result


@dataclass
class RooflineSummary:
    n_points: int
    roofs: list[str]
    error_points: list[str]
    skipped: list[str] = field(default_factory=list)
    labels_drawn: int = 0


# ---------------------------------------------------------------- roofs


def _measured_blocks(run: Run) -> list[dict[str, Any]]:
    """Measured ceilings a run carries beside the peaks it was scored against."""
    measured = run.peaks.get("measured")
    return [measured] if isinstance(measured, dict) else []


def _peak(block: dict[str, Any], unit: str, key: str) -> float | None:
    value = (block.get(unit) or {}).get(key) if isinstance(block.get(unit), dict) else None
    return float(value) if value else None


def roofs_for(run: Run, units: Iterable[tuple[str, str]], prefix: str = "") -> list[Roof]:
    """One compute roof per (compute_unit, peak_key) present, from the datasheet/peaks block, plus
    dashed measured ceilings when the run carries them."""
    peaks = run.peaks
    bw = peaks.get("memory_bandwidth")
    if not bw:
        raise UserError("peaks has no memory_bandwidth; cannot draw a roofline", field="peaks.memory_bandwidth")
    main_measured = str(peaks.get("source", "")).startswith(("measured", "cpu-measured"))
    roofs = []
    for unit, key in sorted(set(units)):
        flops = _peak(peaks, unit, key)
        if flops:
            roofs.append(Roof(f"{prefix}{key} {unit}", flops, float(bw), main_measured))
    for block in _measured_blocks(run):
        mbw = float(block.get("memory_bandwidth") or bw)
        for unit, key in sorted(set(units)):
            flops = _peak(block, unit, key)
            if flops:
                roofs.append(Roof(f"{prefix}{key} {unit} (measured)", flops, mbw, True))
    return merge_equal_roofs(roofs)


def merge_equal_roofs(roofs: Sequence[Roof]) -> list[Roof]:
    """One line per distinct ceiling: bf16 and fp16 share a roof on most GPUs, and drawing two
    identical lines would only stack their labels on top of each other."""
    merged: dict[tuple[float, float, bool], list[str]] = {}
    for r in roofs:
        merged.setdefault((r.flops, r.bandwidth, r.measured), []).append(r.label)
    return [Roof(", ".join(labels), flops, bw, measured) for (flops, bw, measured), labels in merged.items()]


# ---------------------------------------------------------------- points


def _short_case(rec: Record) -> str:
    if rec.params:
        return "x".join(str(v) for v in rec.params.values())
    return rec.case[:16]


def short_label(p: Point) -> str:
    return f"{p.impl} {p.case} {DTYPE_SHORT.get(p.dtype, p.dtype)}"


def record_point(run: Run, rec: Record) -> Point | str:
    """The record as a roofline point, or the reason it cannot be drawn on log axes."""
    flops, nbytes = rec.flops, rec.bytes
    median = (rec.time_s or {}).get("median")
    if not flops or not nbytes or flops <= 0 or nbytes <= 0:
        return "no positive flops/bytes"
    if not median or median <= 0:
        return "no timing"
    intensity = flops / nbytes
    achieved = flops / median
    peak_flops = rec.peak_flops or _peak(run.peaks, str(rec.compute_unit), str(rec.peak_key))
    peak_bw = rec.peak_bandwidth or run.peaks.get("memory_bandwidth")
    error = None
    if rec.status == "invalid":
        error = rec.message or "invalid"
    elif peak_flops and peak_bw:
        attainable = min(float(peak_flops), float(peak_bw) * intensity)
        if achieved > attainable * (1 + ROOF_TOLERANCE):
            error = f"above its roof ({achieved / attainable:.2f}x attainable)"
    return Point(key_name(rec.key), rec.op, _short_case(rec), rec.dtype, rec.impl, rec.is_baseline,
                 intensity, achieved, error)


def _peaks_identity(run: Run) -> tuple[Any, ...]:
    p = run.peaks
    return (p.get("name"), p.get("source"), p.get("memory_bandwidth"),
            tuple(sorted((p.get("simt") or {}).items())), tuple(sorted((p.get("tensor") or {}).items())))


# ---------------------------------------------------------------- roofline


def plot_roofline(
    runs: Sequence[Run],
    *,
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    impls: Sequence[str] | None = None,
    title: str | None = None,
) -> tuple[Figure, RooflineSummary]:
    """Log-log roofline of every ok/invalid record passing the filters."""
    selected = select_records(runs, ops=ops, dtypes=dtypes, impls=impls)
    points: list[Point] = []
    skipped: list[str] = []
    for run, rec in selected:
        pt = record_point(run, rec)
        if isinstance(pt, str):
            skipped.append(f"{key_name(rec.key)}: {pt}")
        else:
            points.append(pt)

    # Roofs per distinct peaks block; several only when runs from different GPUs are overlaid.
    groups: dict[tuple[Any, ...], tuple[Run, set[tuple[str, str]]]] = {}
    for run, rec in selected:
        entry = groups.setdefault(_peaks_identity(run), (run, set()))
        if rec.compute_unit and rec.peak_key:
            entry[1].add((rec.compute_unit, rec.peak_key))
    multi = len(groups) > 1
    roofs: list[Roof] = []
    for run, units in groups.values():
        prefix = f"{run.peaks.get('name', '?')}: " if multi else ""
        roofs += roofs_for(run, units, prefix)

    fig = Figure(figsize=(10, 7), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [p.intensity for p in points] + [r.ridge for r in roofs]
    ys = [p.achieved for p in points] + [r.flops for r in roofs]
    x_lo, x_hi = (min(xs) / 8, max(xs) * 8) if xs else (0.1, 1e4)
    y_lo = min(min(ys) / 8, min((r.bandwidth * x_lo for r in roofs), default=math.inf)) if ys else 1e9
    y_hi = max(ys) * 3 if ys else 1e15
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(max(y_lo, 1.0), y_hi)

    _draw_roofs(ax, roofs, x_lo, x_hi)
    error_names = _draw_points(ax, points)
    _draw_arrows(ax, points)
    labels = _draw_labels(ax, points, (x_lo, x_hi), (max(y_lo, 1.0), y_hi))

    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title or chart_title(runs, "Roofline"))
    _roofline_legend(ax, points, len(error_names))
    if error_names:
        # Names only: the reasons are long and live in the summary, the CLI output and the report.
        names = [p.name for p in points if p.error]
        shown = ", ".join(names[:3]) + (f", +{len(names) - 3} more" if len(names) > 3 else "")
        # supxlabel, not fig.text: constrained layout keeps it clear of the axis label.
        fig.supxlabel(f"Not a win (SOL > 1 or invalid): {shown}", color=ERROR_COLOR, fontsize=8,
                      gid="caption:errors")
    summary = RooflineSummary(len(points), [r.label for r in roofs], error_names, skipped, labels)
    return fig, summary


def _fmt_rate(v: float, unit: str) -> str:
    return f"{v / 1e12:.3g} T{unit}" if v >= 1e12 else f"{v / 1e9:.3g} G{unit}"


def _draw_roofs(ax: Any, roofs: Sequence[Roof], x_lo: float, x_hi: float) -> None:
    drawn_bw: set[tuple[float, bool]] = set()
    for roof in sorted(roofs, key=lambda r: r.flops, reverse=True):
        style = "--" if roof.measured else "-"
        if (roof.bandwidth, roof.measured) not in drawn_bw:
            # The memory slope, drawn once per bandwidth up to the highest ridge on it.
            top = max(r.ridge for r in roofs if r.bandwidth == roof.bandwidth and r.measured == roof.measured)
            ax.plot([x_lo, top], [roof.bandwidth * x_lo, roof.bandwidth * top], style, color="black",
                    lw=1.6, gid=f"roof:memory{' (measured)' if roof.measured else ''}")
            ax.annotate(f"memory {_fmt_rate(roof.bandwidth, 'B/s')}{' (measured)' if roof.measured else ''}",
                        (x_lo * 1.5, roof.bandwidth * x_lo * 1.5), rotation=0, fontsize=8, color="black")
            drawn_bw.add((roof.bandwidth, roof.measured))
        ax.plot([roof.ridge, x_hi], [roof.flops, roof.flops], style, color="dimgray", lw=1.4,
                gid=f"roof:{roof.label}")
        ax.annotate(f"{roof.label} {_fmt_rate(roof.flops, 'FLOP/s')}", (x_hi / 1.1, roof.flops * 1.08),
                    ha="right", fontsize=8, color="dimgray")
        ax.plot([roof.ridge], [roof.flops], "o", ms=4, color="dimgray", gid=f"ridge:{roof.label}")
        ax.annotate(f"ridge {roof.ridge:.3g} FLOP/B", (roof.ridge, roof.flops / 1.35), ha="left",
                    fontsize=7, color="dimgray")


def _draw_points(ax: Any, points: Sequence[Point]) -> list[str]:
    colors = colors_for(sorted({p.op for p in points}))
    markers = markers_for(sorted({p.impl for p in points}))
    errors = []
    for p in points:
        if p.error:
            ax.plot([p.intensity], [p.achieved], "X", ms=11, color=ERROR_COLOR, mec="black", mew=0.6,
                    ls="none", gid=f"error:{p.name}", zorder=5)
            errors.append(f"{p.name} ({p.error})")
        else:
            ax.plot([p.intensity], [p.achieved], markers[p.impl], ms=8, color=colors[p.op],
                    mfc="white" if p.is_baseline else colors[p.op], mec=colors[p.op], mew=1.5, ls="none",
                    gid=f"point:{p.name}", zorder=4)
    return errors


def _draw_arrows(ax: Any, points: Sequence[Point]) -> None:
    by_case: dict[tuple[str, str, str], list[Point]] = {}
    for p in points:
        by_case.setdefault((p.op, p.case, p.dtype), []).append(p)
    for group in by_case.values():
        bases = [p for p in group if p.is_baseline and not p.error]
        # No arrow into an error point: it would read as an improvement.
        customs = [p for p in group if not p.is_baseline and not p.error]
        for b in bases:
            for c in customs:
                ax.annotate("", xy=(c.intensity, c.achieved), xytext=(b.intensity, b.achieved),
                            arrowprops={"arrowstyle": "->", "color": "gray", "alpha": 0.6, "lw": 1},
                            gid=f"arrow:{b.name}->{c.impl}")


def _draw_labels(ax: Any, points: Sequence[Point], xlim: tuple[float, float],
                 ylim: tuple[float, float]) -> int:
    span_x = math.log10(xlim[1] / xlim[0])
    span_y = math.log10(ylim[1] / ylim[0])
    placed: list[tuple[float, float]] = []
    for p in sorted(points, key=lambda q: (q.error is None, -q.achieved)):
        lx, ly = math.log10(p.intensity), math.log10(p.achieved)
        if any(abs(lx - x) < LABEL_MIN_SEP[0] * span_x and abs(ly - y) < LABEL_MIN_SEP[1] * span_y
               for x, y in placed):
            continue  # would pile onto a label already drawn
        placed.append((lx, ly))
        ax.annotate(short_label(p), (p.intensity, p.achieved), xytext=(6, 4), textcoords="offset points",
                    fontsize=7, color=ERROR_COLOR if p.error else "black", gid=f"label:{p.name}")
    return len(placed)


def _roofline_legend(ax: Any, points: Sequence[Point], n_errors: int) -> None:
    colors = colors_for(sorted({p.op for p in points}))
    markers = markers_for(sorted({p.impl for p in points}))
    handles: list[Any] = [Patch(color=c, label=op) for op, c in colors.items()]
    handles += [Line2D([], [], marker=m, color="gray", ls="none", label=impl) for impl, m in markers.items()]
    styles = {ln.get_linestyle() for ln in ax.get_lines() if str(ln.get_gid() or "").startswith("roof:")}
    if "-" in styles:
        handles.append(Line2D([], [], color="black", ls="-", label="datasheet roof"))
    if "--" in styles:
        handles.append(Line2D([], [], color="black", ls="--", label="measured ceiling"))
    if n_errors:
        handles.append(Line2D([], [], marker="X", color=ERROR_COLOR, ls="none",
                              label=f"SOL > 1 / invalid ({n_errors})"))
    # Outside the axes: inside, it hides the points at low intensity.
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.85)


def run_roofline(paths: Sequence[str | Path], output: str | Path, *, ops: Any = None, dtypes: Any = None,
                 impls: Any = None) -> RooflineSummary:
    """What `solbench roofline` does."""
    runs = [load_results(p) for p in paths]
    fig, summary = plot_roofline(runs, ops=split_list(ops), dtypes=split_list(dtypes), impls=split_list(impls))
    save_figure(fig, output, runs)
    return summary
