"""What a run shows in the terminal: a progress bar while it runs, then one table per op."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from solbench.results import Record

_STATUS_STYLE = {"ok": "green", "failed": "red", "invalid": "bold red", "error": "red", "skipped": "dim"}


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


def _num(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


def op_tables(records: Iterable[Record]) -> list[Table]:
    by_op: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_op[r.op].append(r)
    return [op_table(op, recs) for op, recs in by_op.items()]


def op_table(op: str, records: list[Record]) -> Table:
    table = Table(title=f"[bold]{op}[/]", title_justify="left", show_lines=False)
    for col, justify in (("case", "left"), ("dtype", "left"), ("impl", "left"), ("median", "right"),
                         ("TFLOP/s", "right"), ("GB/s", "right"), ("SOL %", "right"), ("MFU %", "right"),
                         ("speedup", "right"), ("bound", "left"), ("check", "left")):
        table.add_column(col, justify=justify, no_wrap=col != "check")
    last_case = None
    for r in records:
        case = (r.case, r.dtype)
        if last_case is not None and case != last_case:
            table.add_section()
        last_case = case
        impl = f"{r.impl}*" if r.is_baseline and r.impl == r.reference_baseline else r.impl
        status = _status_cell(r)
        table.add_row(r.case, r.dtype, impl, fmt_time((r.time_s or {}).get("median")), _num(r.tflops, ".1f"),
                      _num(r.gbps, ".0f"), _sol_cell(r), _num(r.mfu, ".1f", 100), _speedup_cell(r),
                      r.bound or "-", status)
    table.caption = "* reference baseline for speedup; SOL = T_SOL / median time"
    return table


def _sol_cell(r: Record) -> str:
    if r.sol is None:
        return "-"
    text = f"{r.sol * 100:.1f}"
    if r.status == "invalid":
        return f"[bold red]{text} ![/]"
    return text


def _speedup_cell(r: Record) -> str:
    if r.speedup is None:
        return "-"
    style = "green" if r.speedup >= 1.0 else "yellow"
    return f"[{style}]{r.speedup:.2f}x[/]"


def _status_cell(r: Record) -> str:
    style = _STATUS_STYLE.get(r.status, "")
    label = {"ok": "pass"}.get(r.status, r.status)
    if r.status == "ok" and r.warnings:
        label += " (!)"
    detail = f": {r.message}" if r.message and r.status != "ok" else ""
    if len(detail) > 120:
        detail = detail[:117] + "..."
    return f"[{style}]{label}[/]{detail}"


def summary_lines(records: list[Record]) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        counts[r.status] += 1
    lines = [", ".join(f"{n} {s}" for s, n in counts.items())]
    invalid = [r for r in records if r.status == "invalid"]
    if invalid:
        lines.append(f"[bold red]{len(invalid)} record(s) scored above the speed of light: these are bugs, "
                     f"not wins (see their messages)[/]")
    noisy = [r for r in records if r.status == "ok" and any("noise target" in w for w in r.warnings)]
    if noisy:
        lines.append(f"[yellow]{len(noisy)} record(s) did not reach the noise target within the time budget[/]")
    # clock telemetry: persistent throttling, or telemetry off altogether
    throttled = [r for r in records if any("throttling persisted" in w for w in r.warnings)]
    if throttled:
        lines.append(f"[bold yellow]{len(throttled)} record(s) measured while the GPU kept throttling "
                     f"(clock or thermal/power limit; see each record's telemetry)[/]")
    off = {r.telemetry.get("reason") for r in records if r.telemetry and r.telemetry.get("enabled") is False}
    if off:
        lines.append(f"[dim]{'; '.join(sorted(str(o) for o in off))}[/]")
    return lines
