"""Roofline charts (FLOP/byte vs FLOP/s, one roof per precision present), drawn from results files only.

One panel per op, so that every point can be told apart: within a panel a colour is a case (named as
the tables name it, `M=4096,N=8192 bf16`), a marker an implementation (the same marker in every chart:
charts.markers_for derives it from the name), hollow markers are baselines, a red X a result that is
not a win (SOL > 1 or invalid), and a grey arrow runs from the reference baseline to each other
implementation of the case. The legend beside each panel names them all; roof values are written on
the roofs (`1,340 TFLOP/s`), placed where they overlap no other text (chartlabels.py) after the
layout is final, so nothing is drawn over anything or clipped at an edge.

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

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from solbench.chartlabels import Placer, Spot, around
from solbench.charts import (DTYPE_SHORT, ERROR_COLOR, PALETTE, chart_title, markers_for, save_figure,
                             select_records, split_list)
from solbench.console import fmt_rate
from solbench.compare import key_name, load_results
from solbench.errors import UserError
from solbench.results import Record, Run

PANEL_SIZE = (6.8, 4.4)          # inches per op panel, legend included
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
    labels_drawn: int = 0                               # roof, ridge and memory values written on the chart
    unplaced: list[str] = field(default_factory=list)   # values that fit nowhere without overlapping text
    title: str = ""


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


def short_label(p: Point) -> str:
    """A case as the tables name it, with the short dtype: `M=4096,N=8192 bf16`."""
    return f"{p.case} {DTYPE_SHORT.get(p.dtype, p.dtype)}"


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
    return Point(key_name(rec.key), rec.op, rec.case, rec.dtype, rec.impl, rec.is_baseline,
                 intensity, achieved, error)


def _peaks_identity(run: Run) -> tuple[Any, ...]:
    p = run.peaks
    return (p.get("name"), p.get("source"), p.get("memory_bandwidth"),
            tuple(sorted((p.get("simt") or {}).items())), tuple(sorted((p.get("tensor") or {}).items())))


# ---------------------------------------------------------------- roofline


@dataclass
class _Panel:
    op: str
    points: list[tuple[Point, str]]             # (point, group label)
    roofs: list[Roof]
    ax: Any = None
    limits: tuple[float, float, float, float] = (0.1, 1e4, 1e9, 1e15)


def plot_roofline(
    runs: Sequence[Run],
    *,
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    impls: Sequence[str] | None = None,
    title: str | None = None,
) -> tuple[Figure, RooflineSummary]:
    """Log-log roofline of every ok/invalid record passing the filters, one panel per op."""
    selected = select_records(runs, ops=ops, dtypes=dtypes, impls=impls)
    multi = len({_peaks_identity(run) for run, _ in selected}) > 1
    panels: dict[str, _Panel] = {}
    skipped: list[str] = []
    units: dict[str, dict[tuple[Any, ...], tuple[Run, set[tuple[str, str]]]]] = {}
    for run, rec in selected:
        pt = record_point(run, rec)
        if isinstance(pt, str):
            skipped.append(f"{key_name(rec.key)}: {pt}")
            continue
        group = short_label(pt) + (f" ({run.device})" if multi else "")
        panels.setdefault(rec.op, _Panel(rec.op, [], [])).points.append((pt, group))
        entry = units.setdefault(rec.op, {}).setdefault(_peaks_identity(run), (run, set()))
        if rec.compute_unit and rec.peak_key:
            entry[1].add((rec.compute_unit, rec.peak_key))
    if not panels:
        raise UserError("nothing to plot: no selected record has a time and positive FLOPs and bytes ("
                        + "; ".join(skipped[:3]) + (" ..." if len(skipped) > 3 else "") + ")")
    for op, panel in panels.items():
        for run, keys in units[op].values():
            panel.roofs += roofs_for(run, keys, f"{run.peaks.get('name', '?')}: " if multi else "")

    order = sorted(panels)
    ncols = 1 if len(order) == 1 else 2
    nrows = math.ceil(len(order) / ncols)
    fig = Figure(figsize=(PANEL_SIZE[0] * ncols, PANEL_SIZE[1] * nrows + 0.4), layout="constrained")
    FigureCanvasAgg(fig)     # text is measured with the renderer that will draw it
    axes = fig.subplots(nrows, ncols, squeeze=False).flatten()
    markers = markers_for(sorted({p.impl for panel in panels.values() for p, _ in panel.points}))
    errors: list[Point] = []
    for ax, op in zip(axes, order):
        panel = panels[op]
        panel.ax = ax
        errors += _draw_panel(ax, panel, markers)
    for ax in axes[len(order):]:
        ax.set_visible(False)
    text = title or chart_title(runs, "Roofline")
    fig.suptitle(text)
    if errors:
        # Names only: the reasons are long and live in the summary, the CLI output and the report.
        shown = ", ".join(p.name for p in errors[:3]) + (f", +{len(errors) - 3} more" if len(errors) > 3 else "")
        # supxlabel, not fig.text: constrained layout keeps it clear of the axis labels.
        fig.supxlabel(f"Not a win (SOL > 1 or invalid): {shown}", color=ERROR_COLOR, fontsize=8,
                      gid="caption:errors")
    # The values written on the roofs go where no text is, measured on the final layout: draw once, then fix it.
    fig.canvas.draw()
    fig.set_layout_engine("none")
    placed, unplaced = 0, []
    for op in order:
        n, missed = _write_values(panels[op])
        placed += n
        unplaced += [f"{op}: {m}" for m in missed]
    roofs = sorted({r.label for panel in panels.values() for r in panel.roofs})
    summary = RooflineSummary(sum(len(p.points) for p in panels.values()), roofs,
                              [f"{p.name} ({p.error})" for p in errors], skipped, placed, unplaced, text)
    return fig, summary


def _limits(points: Sequence[Point], roofs: Sequence[Roof]) -> tuple[float, float, float, float]:
    xs = [p.intensity for p in points] + [r.ridge for r in roofs]
    ys = [p.achieved for p in points] + [r.flops for r in roofs]
    x_lo, x_hi = min(xs) / 4, max(xs) * 6         # room right of the ridges for the roof values
    y_lo = min(min(ys) / 4, min((r.bandwidth * x_lo for r in roofs), default=math.inf))
    return x_lo, x_hi, max(y_lo, 1.0), max(ys) * 2.5


def _draw_panel(ax: Any, panel: _Panel, markers: dict[str, str]) -> list[Point]:
    points = [p for p, _ in panel.points]
    panel.limits = x_lo, x_hi, y_lo, y_hi = _limits(points, panel.roofs)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    _draw_roofs(ax, panel.roofs, x_lo, x_hi)
    groups = sorted({g for _, g in panel.points})
    colors = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}
    errors = _draw_points(ax, panel.points, colors, markers)
    _draw_arrows(ax, points)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(panel.op, loc="left", fontsize=10, fontweight="bold")
    _legend(ax, colors, {p.impl: markers[p.impl] for p in points},
            baselines={p.impl for p in points if p.is_baseline}, n_errors=len(errors))
    return errors


def rate_text(v: float, unit: str) -> str:
    """A roof value the way the tables print rates: `1,340 TFLOP/s`, `4,800 GB/s`, `82.2 GFLOP/s`."""
    if unit == "B/s":
        return f"{fmt_rate(v / 1e9)} GB/s"
    return f"{fmt_rate(v / 1e12)} T{unit}" if v >= 1e12 else f"{fmt_rate(v / 1e9)} G{unit}"


def _draw_roofs(ax: Any, roofs: Sequence[Roof], x_lo: float, x_hi: float) -> None:
    drawn_bw: set[tuple[float, bool]] = set()
    for roof in sorted(roofs, key=lambda r: r.flops, reverse=True):
        style = "--" if roof.measured else "-"
        if (roof.bandwidth, roof.measured) not in drawn_bw:
            # The memory slope, drawn once per bandwidth up to the highest ridge on it.
            top = max(r.ridge for r in roofs if r.bandwidth == roof.bandwidth and r.measured == roof.measured)
            ax.plot([x_lo, top], [roof.bandwidth * x_lo, roof.bandwidth * top], style, color="black",
                    lw=1.6, gid=f"roof:memory{' (measured)' if roof.measured else ''}")
            drawn_bw.add((roof.bandwidth, roof.measured))
        ax.plot([roof.ridge, x_hi], [roof.flops, roof.flops], style, color="dimgray", lw=1.4,
                gid=f"roof:{roof.label}")
        ax.plot([roof.ridge], [roof.flops], "o", ms=4, color="dimgray", gid=f"ridge:{roof.label}")


def _draw_points(ax: Any, points: Sequence[tuple[Point, str]], colors: dict[str, str],
                 markers: dict[str, str]) -> list[Point]:
    errors = []
    for p, group in points:
        if p.error:
            ax.plot([p.intensity], [p.achieved], "X", ms=11, color=ERROR_COLOR, mec="black", mew=0.6,
                    ls="none", gid=f"error:{p.name}", zorder=5)
            errors.append(p)
        else:
            c = colors[group]
            ax.plot([p.intensity], [p.achieved], markers[p.impl], ms=8, color=c,
                    mfc="white" if p.is_baseline else c, mec=c, mew=1.5, ls="none",
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


def _legend(ax: Any, colors: dict[str, str], markers: dict[str, str], baselines: set[str], n_errors: int) -> None:
    handles: list[Any] = [Patch(color=c, label=g) for g, c in colors.items()]
    for impl, m in sorted(markers.items()):
        hollow = impl in baselines
        handles.append(Line2D([], [], marker=m, color="gray", mfc="white" if hollow else "gray", ls="none",
                              label=f"{impl} (baseline)" if hollow else impl))
    styles = {ln.get_linestyle() for ln in ax.get_lines() if str(ln.get_gid() or "").startswith("roof:")}
    if "-" in styles:
        handles.append(Line2D([], [], color="black", ls="-", label="datasheet roof"))
    if "--" in styles:
        handles.append(Line2D([], [], color="black", ls="--", label="measured ceiling"))
    if n_errors:
        handles.append(Line2D([], [], marker="X", color=ERROR_COLOR, ls="none",
                              label=f"SOL > 1 / invalid ({n_errors})"))
    # Outside the axes: inside, it hides points. Constrained layout makes room for it.
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, framealpha=0.85,
              borderaxespad=0.0)


def _write_values(panel: _Panel) -> tuple[int, list[str]]:
    """Roof, memory and ridge values on a panel, each where it overlaps no text; (written, not written)."""
    ax, (x_lo, x_hi, _, _) = panel.ax, panel.limits
    placer = Placer.for_axes(ax)
    placer.block_markers([p.intensity for p, _ in panel.points], [p.achieved for p, _ in panel.points], 11)
    style = {"fontsize": 7, "color": "dimgray"}
    written, missed = 0, []
    for roof in sorted(panel.roofs, key=lambda r: r.flops, reverse=True):
        text = f"{roof.label} {rate_text(roof.flops, 'FLOP/s')}"
        anchors = _along(max(roof.ridge * 1.5, x_lo), x_hi / 1.05, reverse=True)
        if _place_along(placer, text, anchors, lambda x, r=roof: r.flops, [Spot(-2, 2, "right", "bottom"),
                                                                          Spot(-2, -2, "right", "top")], style):
            written += 1
        else:
            missed.append(text)
    for bw, measured in sorted({(r.bandwidth, r.measured) for r in panel.roofs}):
        text = f"memory {rate_text(bw, 'B/s')}{' (measured)' if measured else ''}"
        top = max(r.ridge for r in panel.roofs if r.bandwidth == bw and r.measured == measured)
        xs = _along(x_lo * 1.2, top)
        if _place_along(placer, text, xs, lambda x, bw=bw: bw * x,
                        [Spot(-3, 3, "right", "bottom"), Spot(3, -3, "left", "top"), Spot(12, -12, "left", "top")],
                        {**style, "color": "black"}) or any(
                placer.place(text, (x, bw * x), around(), leader=True, **{**style, "color": "black"})
                for x in xs[::4]):
            written += 1
        else:
            missed.append(text)
    for roof in panel.roofs:
        # Only next to its point: a ridge value further away would read as another roof's.
        if placer.place(f"ridge {fmt_rate(roof.ridge)} FLOP/B", (roof.ridge, roof.flops),
                        [Spot(4, -4, "left", "top"), Spot(-4, 4, "right", "bottom"), *around((5, 9))], **style):
            written += 1
        else:
            missed.append(f"ridge of {roof.label}")
    return written, missed


def _along(lo: float, hi: float, reverse: bool = False, steps: int = 24) -> list[float]:
    """Geometric positions between lo and hi (log axes)."""
    if hi <= lo:
        return [lo]
    xs = [lo * (hi / lo) ** (k / (steps - 1)) for k in range(steps)]
    return xs[::-1] if reverse else xs


def _place_along(placer: Placer, text: str, xs: Sequence[float], y_of: Any, spots: Sequence[Spot],
                 style: dict[str, Any]) -> bool:
    for x in xs:
        if placer.place(text, (x, y_of(x)), spots, **style) is not None:
            return True
    return False


def run_roofline(paths: Sequence[str | Path], output: str | Path, *, ops: Any = None, dtypes: Any = None,
                 impls: Any = None) -> RooflineSummary:
    """What `solbench roofline` does."""
    runs = [load_results(p) for p in paths]
    fig, summary = plot_roofline(runs, ops=split_list(ops), dtypes=split_list(dtypes), impls=split_list(impls))
    save_figure(fig, output, runs)
    return summary
