"""Roofline and SOL bar charts, drawn from results files only.

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

from solbench.compare import is_baseline, key_name, load_results, record_key
from solbench.errors import UserError

PLOTTED_STATUSES = ("ok", "invalid")
IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
MARKERS = ("o", "s", "^", "D", "v", "P", "*", "h", "<", ">")
ERROR_COLOR = "#d62728"
# Two labels closer than this, as a fraction of each log axis span, would overlap: keep the first.
LABEL_MIN_SEP = (0.09, 0.045)
# Rounding in a results file must not turn a point sitting exactly on its roof into an error.
ROOF_TOLERANCE = 1e-6
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
               "float8_e4m3fn": "fp8", "float8_e5m2": "fp8e5", "int8": "i8"}


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


@dataclass
class SolBarsSummary:
    n_bars: int
    ops: list[str]
    invalid: list[str]
    failed: list[str]


# ---------------------------------------------------------------- selection


def _matches(value: Any, allowed: Sequence[str] | None) -> bool:
    return not allowed or str(value) in allowed


def select_records(
    runs: Sequence[dict[str, Any]],
    *,
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    impls: Sequence[str] | None = None,
    statuses: Iterable[str] | None = PLOTTED_STATUSES,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, record) pairs passing the filters; an empty selection is a user error."""
    wanted = set(statuses) if statuses is not None else None
    out = [(run, rec) for run in runs for rec in run.get("records", [])
           if _matches(rec.get("op"), ops) and _matches(rec.get("dtype"), dtypes)
           and _matches(rec.get("impl"), impls) and (wanted is None or rec.get("status") in wanted)]
    if not out:
        have = sorted({str(r.get("op")) for run in runs for r in run.get("records", [])})
        raise UserError(f"no records to plot after filters ops={list(ops or [])} dtypes={list(dtypes or [])} "
                        f"impls={list(impls or [])}; ops present: {', '.join(have) or 'none'}")
    return out


# ---------------------------------------------------------------- roofs


def _measured_blocks(run: dict[str, Any]) -> list[dict[str, Any]]:
    peaks = run.get("peaks") or {}
    blocks = [b for b in (peaks.get("measured"), run.get("calibration")) if isinstance(b, dict)]
    return blocks


def _peak(block: dict[str, Any], unit: str, key: str) -> float | None:
    value = (block.get(unit) or {}).get(key) if isinstance(block.get(unit), dict) else None
    return float(value) if value else None


def roofs_for(run: dict[str, Any], units: Iterable[tuple[str, str]], prefix: str = "") -> list[Roof]:
    """One compute roof per (compute_unit, peak_key) present, from the datasheet/peaks block, plus
    dashed measured ceilings when the run carries them."""
    peaks = run.get("peaks") or {}
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


def _short_case(rec: dict[str, Any]) -> str:
    params = rec.get("params")
    if isinstance(params, dict) and params:
        return "x".join(str(v) for v in params.values())
    return str(rec.get("case", ""))[:16]


def short_label(p: Point) -> str:
    return f"{p.impl} {p.case} {DTYPE_SHORT.get(p.dtype, p.dtype)}"


def record_point(run: dict[str, Any], rec: dict[str, Any]) -> Point | str:
    """The record as a roofline point, or the reason it cannot be drawn on log axes."""
    flops, nbytes = rec.get("flops"), rec.get("bytes")
    median = (rec.get("time_s") or {}).get("median")
    if not flops or not nbytes or flops <= 0 or nbytes <= 0:
        return "no positive flops/bytes"
    if not median or median <= 0:
        return "no timing"
    peaks = run.get("peaks") or {}
    intensity = flops / nbytes
    achieved = flops / median
    peak_flops = rec.get("peak_flops") or _peak(peaks, str(rec.get("compute_unit")), str(rec.get("peak_key")))
    peak_bw = rec.get("peak_bandwidth") or peaks.get("memory_bandwidth")
    error = None
    if rec.get("status") == "invalid":
        error = str(rec.get("message") or "invalid")
    elif peak_flops and peak_bw:
        attainable = min(float(peak_flops), float(peak_bw) * intensity)
        if achieved > attainable * (1 + ROOF_TOLERANCE):
            error = f"above its roof ({achieved / attainable:.2f}x attainable)"
    return Point(key_name(record_key(rec)), str(rec.get("op")), _short_case(rec), str(rec.get("dtype")),
                 str(rec.get("impl")), is_baseline(rec), intensity, achieved, error)


def _colors(names: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def _markers(names: Sequence[str]) -> dict[str, str]:
    return {n: MARKERS[i % len(MARKERS)] for i, n in enumerate(names)}


def _title(runs: Sequence[dict[str, Any]], what: str) -> str:
    devices = sorted({str((r.get("env") or {}).get("device") or "unknown device") for r in runs})
    sources = sorted({str((r.get("peaks") or {}).get("source") or "unknown") for r in runs})
    return f"{what}: {', '.join(devices)} (peaks: {', '.join(sources)})"


def _peaks_identity(run: dict[str, Any]) -> tuple[Any, ...]:
    p = run.get("peaks") or {}
    return (p.get("name"), p.get("source"), p.get("memory_bandwidth"),
            tuple(sorted((p.get("simt") or {}).items())), tuple(sorted((p.get("tensor") or {}).items())))


# ---------------------------------------------------------------- roofline


def plot_roofline(
    runs: Sequence[dict[str, Any]],
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
            skipped.append(f"{key_name(record_key(rec))}: {pt}")
        else:
            points.append(pt)

    # Roofs per distinct peaks block; several only when runs from different GPUs are overlaid.
    groups: dict[tuple[Any, ...], tuple[dict[str, Any], set[tuple[str, str]]]] = {}
    for run, rec in selected:
        entry = groups.setdefault(_peaks_identity(run), (run, set()))
        if rec.get("compute_unit") and rec.get("peak_key"):
            entry[1].add((str(rec["compute_unit"]), str(rec["peak_key"])))
    multi = len(groups) > 1
    roofs: list[Roof] = []
    for run, units in groups.values():
        prefix = f"{(run.get('peaks') or {}).get('name', '?')}: " if multi else ""
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
    ax.set_title(title or _title(runs, "Roofline"))
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
    colors = _colors(sorted({p.op for p in points}))
    markers = _markers(sorted({p.impl for p in points}))
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
    colors = _colors(sorted({p.op for p in points}))
    markers = _markers(sorted({p.impl for p in points}))
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


# ---------------------------------------------------------------- SOL bars


def plot_sol_bars(
    runs: Sequence[dict[str, Any]],
    *,
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    impls: Sequence[str] | None = None,
    title: str | None = None,
) -> tuple[Figure, SolBarsSummary]:
    """Per op, bars of SOL per implementation side by side (baselines first) for each case."""
    selected = select_records(runs, ops=ops, dtypes=dtypes, impls=impls,
                              statuses=("ok", "invalid", "failed", "error"))
    by_op: dict[str, list[dict[str, Any]]] = {}
    for _, rec in selected:
        by_op.setdefault(str(rec.get("op")), []).append(rec)
    op_names = sorted(by_op)
    widest = max(len({(r.get("case"), r.get("dtype")) for r in recs}) for recs in by_op.values())
    fig = Figure(figsize=(max(6.0, 1.6 * widest + 3), 3.2 * len(op_names)), layout="constrained")
    axes = fig.subplots(len(op_names), 1, squeeze=False)[:, 0]
    summary = SolBarsSummary(0, op_names, [], [])
    for ax, op in zip(axes, op_names):
        _sol_bars_for_op(ax, op, by_op[op], summary)
    fig.suptitle(title or _title(runs, "Speed of light per implementation"))
    return fig, summary


def _sol_bars_for_op(ax: Any, op: str, recs: list[dict[str, Any]], summary: SolBarsSummary) -> None:
    groups = sorted({(str(r.get("case")), str(r.get("dtype"))) for r in recs})
    impl_names = sorted({str(r.get("impl")) for r in recs},
                        key=lambda i: (not any(is_baseline(r) for r in recs if r.get("impl") == i), i))
    colors = _colors(impl_names)
    width = 0.8 / len(impl_names)
    lookup = {(str(r.get("case")), str(r.get("dtype")), str(r.get("impl"))): r for r in recs}
    for j, impl in enumerate(impl_names):
        for i, (case, dtype) in enumerate(groups):
            rec = lookup.get((case, dtype, impl))
            if rec is None:
                continue
            x = i - 0.4 + width * (j + 0.5)
            name = key_name(record_key(rec))
            status, sol = rec.get("status"), rec.get("sol")
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
                            gid=f"failed:{name}")
                summary.failed.append(name)
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


# ---------------------------------------------------------------- files


def save_figure(fig: Figure, output: str | Path) -> Path:
    output = Path(output)
    if output.suffix.lower() not in IMAGE_SUFFIXES:
        raise UserError(f"unsupported image type {output.suffix or '(none)'!r}; use one of "
                        f"{', '.join(IMAGE_SUFFIXES)}", file=output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=130)
    return output


def _split(values: Sequence[str] | str | None) -> list[str] | None:
    if values is None:
        return None
    items = [values] if isinstance(values, str) else list(values)
    out = [v.strip() for item in items for v in item.split(",") if v.strip()]
    return out or None


def run_roofline(paths: Sequence[str | Path], output: str | Path, *, ops: Any = None, dtypes: Any = None,
                 impls: Any = None) -> RooflineSummary:
    """What `solbench roofline` does."""
    runs = [load_results(p) for p in paths]
    fig, summary = plot_roofline(runs, ops=_split(ops), dtypes=_split(dtypes), impls=_split(impls))
    save_figure(fig, output)
    return summary


def run_sol_plot(paths: Sequence[str | Path], output: str | Path, *, ops: Any = None, dtypes: Any = None,
                 impls: Any = None) -> SolBarsSummary:
    """What `solbench plot sol` does."""
    runs = [load_results(p) for p in paths]
    fig, summary = plot_sol_bars(runs, ops=_split(ops), dtypes=_split(dtypes), impls=_split(impls))
    save_figure(fig, output)
    return summary
