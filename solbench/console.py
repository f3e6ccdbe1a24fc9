"""What a run shows in the terminal: a progress bar while it runs, then one table per op.

The tables fit the terminal without cutting a number or a verdict. Columns are sized to their widest
cell; when the table is wider than the terminal it is narrowed in this order, stopping as soon as it fits:
  1. dtype names abbreviated (bfloat16 -> bf16, float8_e4m3fn -> fp8e4m3);
  2. columns left out, one at a time: MFU %, bound, TFLOP/s, GB/s, noise, speedup (DROP_ORDER);
  3. the case column wraps onto several lines (it is the only column that may).
case, dtype, impl, median, SOL % and check are never left out, and the caption names what was.
Messages (why a record failed, was invalid, errored or was skipped) are not squeezed into the table:
the check cell says `invalid [2]` and note 2 below the table says why, wrapped to the terminal.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from solbench.results import Record, Run

_STATUS_STYLE = {"ok": "green", "failed": "red", "invalid": "bold red", "error": "red", "skipped": "dim"}
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64", "tfloat32": "tf32",
               "float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2"}
DROP_ORDER = ("MFU %", "bound", "TFLOP/s", "GB/s", "noise", "speedup")
CASE_MIN = 12                 # the case column wraps, but never narrower than this
COLUMN_GAP = 2                # between columns: the box's (blank) separator and one space of padding
# A 5% change between two runs is told apart when it exceeds two standard errors of their difference,
# sqrt(2) x the noise of one: so noise above 5% / (2 sqrt 2) = 1.8% cannot tell it, and is marked.
NOISE_MARK_LIMIT = 0.05 / (2 * math.sqrt(2))


def make_console(stderr: bool = False) -> Console:
    """Tables are wide: when output goes to a file or a pipe, do not squeeze them into 80 columns."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, width=None if probe.is_terminal else 200)


def make_progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=console, transient=False)


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def fmt_rate(value: float | None, digits: int = 3) -> str:
    """A rate (TFLOP/s, GB/s) to `digits` significant figures, never in exponent form: 1,464 / 51.2 / 0.0231."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def record_noise(r: Record) -> float | None:
    """The relative noise a table shows: the run-to-run spread when the record has one, else the rse."""
    ts = r.time_s or {}
    value = ts.get("run_to_run") if ts.get("run_to_run") is not None else ts.get("rse")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _num(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


# ---------------------------------------------------------------- tables


@dataclass(frozen=True)
class Column:
    name: str
    justify: str
    cell: Callable[[Record, "Notes", bool], str]    # (record, notes, abbreviated) -> rich markup


class Notes:
    """Numbered messages under a table; records with the same message share its number."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}

    def ref(self, text: str) -> int:
        return self.items.setdefault(text, len(self.items) + 1)

    def lines(self) -> list[Text]:
        return [Text.assemble((f"[{n}] ", "bold"), text) for text, n in self.items.items()]


def _impl(r: Record, notes: Notes, short: bool) -> str:
    return f"{r.impl}*" if r.is_baseline and r.impl == r.reference_baseline else r.impl


def _dtype(r: Record, notes: Notes, short: bool) -> str:
    return DTYPE_SHORT.get(r.dtype, r.dtype) if short else r.dtype


def _noise(r: Record, notes: Notes, short: bool) -> str:
    value = record_noise(r)
    if value is None or r.status not in ("ok", "invalid"):
        return "-"
    text = f"±{value:.1%}" if value < 0.995 else "±99%+"
    return f"[yellow]{text}![/]" if value > NOISE_MARK_LIMIT else text


def _sol(r: Record, notes: Notes, short: bool) -> str:
    if r.sol is None:
        return "-"
    text = f"{r.sol * 100:.1f}"
    return f"[bold red]{text} ![/]" if r.status == "invalid" else text


def _speedup(r: Record, notes: Notes, short: bool) -> str:
    if r.speedup is None:
        return "-"
    style = "green" if r.speedup >= 1.0 else "yellow"
    return f"[{style}]{r.speedup:.2f}x[/]"


def _check(r: Record, notes: Notes, short: bool) -> str:
    style = _STATUS_STYLE.get(r.status, "")
    if r.status == "ok":
        return f"[{style}]pass[/]"
    label = f"{r.status} [{notes.ref(f'{r.status}: {r.message}')}]" if r.message else r.status
    return f"[{style}]{escape(label)}[/]"


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


COLUMNS = (
    Column("case", "left", lambda r, n, s: escape(r.case)),
    Column("dtype", "left", _dtype),
    Column("impl", "left", lambda r, n, s: escape(_impl(r, n, s))),
    Column("median", "right", lambda r, n, s: fmt_time((r.time_s or {}).get("median"))),
    Column("noise", "right", _noise),
    Column("TFLOP/s", "right", lambda r, n, s: fmt_rate(r.tflops)),
    Column("GB/s", "right", lambda r, n, s: fmt_rate(r.gbps)),
    Column("SOL %", "right", _sol),
    Column("MFU %", "right", lambda r, n, s: _num(r.mfu, ".1f", 100)),
    Column("speedup", "right", _speedup),
    Column("bound", "left", lambda r, n, s: r.bound or "-"),
    Column("check", "left", _check),
)


def op_tables(records: Iterable[Record], width: int | None = None) -> list[RenderableType]:
    """One table (and its notes) per op, each fitted to `width` columns (None: as wide as it needs)."""
    by_op: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_op[r.op].append(r)
    return [op_table(op, recs, width) for op, recs in by_op.items()]


def op_table(op: str, records: list[Record], width: int | None = None) -> RenderableType:
    short, kept, case_width = _layout(records, width)
    notes = Notes()
    table = Table(title=f"[bold]{escape(op)}[/]", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 1, 0, 0), collapse_padding=False)
    for col in kept:
        fold = col.name == "case"
        table.add_column(col.name, justify=col.justify, no_wrap=not fold, overflow="fold" if fold else "ignore",
                         width=case_width if fold else None)
    last_case = None
    for r in records:
        if last_case is not None and r.case != last_case:
            table.add_section()       # a blank line between cases
        last_case = r.case
        table.add_row(*(col.cell(r, notes, short) for col in kept))
    dropped = [c.name for c in COLUMNS if c not in kept]
    caption = "* reference baseline for speedups; SOL = T_SOL / median; noise = relative standard error of the median"
    if any(record_noise(r) is not None and record_noise(r) > NOISE_MARK_LIMIT and r.status in ("ok", "invalid")
           for r in records):
        caption += f"; ! noise above {NOISE_MARK_LIMIT:.1%}: too large to tell a 5% change between two runs"
    if dropped:
        caption += f"; left out to fit {width} columns: {', '.join(dropped)} (the results file has them)"
    table.caption = caption
    table.caption_justify = "left"
    return Group(table, *notes.lines())


def _layout(records: list[Record], width: int | None) -> tuple[bool, list[Column], int | None]:
    """(abbreviate dtypes?, the columns kept, the case column's width or None) for a terminal of `width`."""
    widths = {short: _widths(records, short) for short in (False, True)}
    kept = list(COLUMNS)
    if width is None:
        return False, kept, None

    def total(cols: list[Column], w: dict[str, int], case: int) -> int:
        return sum(case if c.name == "case" else w[c.name] for c in cols) + COLUMN_GAP * (len(cols) - 1)

    case_full = widths[False]["case"]
    for short in (False, True):
        if total(kept, widths[short], case_full) <= width:
            return short, kept, None
    w = widths[True]
    for name in DROP_ORDER:
        kept = [c for c in kept if c.name != name]
        if total(kept, w, case_full) <= width:
            return True, kept, None
    # Still too wide: the case column wraps into what is left (never below CASE_MIN).
    room = width - total([c for c in kept if c.name != "case"], w, 0) - COLUMN_GAP
    return True, kept, max(CASE_MIN, min(case_full, room))


def _widths(records: list[Record], short: bool) -> dict[str, int]:
    notes = Notes()   # a scratch numbering: references are as wide as the real ones
    out = {}
    for col in COLUMNS:
        cells = [Text.from_markup(col.cell(r, notes, short)).cell_len for r in records]
        out[col.name] = max([len(col.name), *cells])
    return out


def peaks_summary(name: str, source: str, bandwidth: float, simt: dict[str, float],
                  tensor: dict[str, float]) -> str:
    """'NAME (source): 4,800 GB/s; TFLOP/s bf16 989.4, ...': the ceilings a run is scored against."""
    compute = {f"fp32 {simt['fp32'] / 1e12:,.1f}"} if "fp32" in simt else set()
    compute |= {f"{k} {v / 1e12:,.1f}" for k, v in tensor.items() if k != "fp32"}
    return f"{name} ({source}): {bandwidth / 1e9:,.0f} GB/s; TFLOP/s " + ", ".join(sorted(compute))


def run_header(run: Run, source: str) -> list[str]:
    """Where a results file's records come from: the file, the run, its device, torch and peaks, the command."""
    peaks = run.peaks
    lines = [f"[bold]{escape(source)}[/]  run {escape(run.run_id)}  torch {escape(str(run.env.get('torch', '?')))}"]
    if peaks.get("memory_bandwidth"):
        lines.append(f"[bold]device[/] {escape(run.device)}   [bold]peaks[/] " + escape(peaks_summary(
            str(peaks.get("name", "?")), str(peaks.get("source", "?")), float(peaks["memory_bandwidth"]),
            peaks.get("simt") or {}, peaks.get("tensor") or {})))
    else:
        lines.append(f"[bold]device[/] {escape(run.device)}")
    if run.command:
        lines.append(f"[dim]{escape(run.command)}[/]")
    return lines


def summary_lines(records: list[Record]) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        counts[r.status] += 1
    lines = [", ".join(f"{n} {s}" for s, n in counts.items())]
    invalid = [r for r in records if r.status == "invalid"]
    if invalid:
        lines.append(f"[bold red]{len(invalid)} record(s) scored above the speed of light: these are bugs, "
                     f"not wins (see their notes)[/]")
    noisy = [r for r in records if r.status == "ok" and any("noise target" in w for w in r.warnings)]
    if noisy:
        lines.append(f"[yellow]{len(noisy)} record(s) did not reach the noise target within the time budget[/]")
    # clock telemetry: persistent throttling, or telemetry off altogether
    throttled = [r for r in records if any("throttling persisted" in w for w in r.warnings)]
    if throttled:
        lines.append(f"[bold yellow]{len(throttled)} record(s) measured while the GPU kept throttling "
                     f"(clock or thermal/power limit; see each record's telemetry)[/]")
    busy = [r for r in records if any("the CPU was busy" in w for w in r.warnings)]
    if busy:
        lines.append(f"[yellow]{len(busy)} record(s) were measured while other processes kept taking the CPU "
                     f"away (their medians are pessimistic; see each record's warnings)[/]")
    ties = [r for r in records if any("ties its measured" in w for w in r.warnings)]
    if ties:
        lines.append(f"{len(ties)} record(s) tie their measured ceiling within its spread: as fast as the "
                     f"code the ceiling was measured with")
    off = {r.telemetry.get("reason") for r in records if r.telemetry and r.telemetry.get("enabled") is False}
    if off:
        lines.append(f"[dim]{'; '.join(sorted(str(o) for o in off))}[/]")
    return lines
