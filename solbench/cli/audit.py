"""`solbench audit`: check each spec's FLOP and byte formulas against Nsight Compute's counters; and the
counters table `run --counters` prints."""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from solbench import audit as audit_mod
from solbench import pipeline
from solbench.cli.app import app, csv_list, err, load_specs, out, parse_shape, user_errors
from solbench.errors import UserError
from solbench.results import Record

_STYLE = {"ok": "green", "cache": "yellow", "explained": "yellow", "impl": "yellow", "formula": "bold red", "counter": "bold red",
          "not-judged": "dim", "n/a": "dim"}


@app.command()
@user_errors
def audit(
    ops: str = typer.Option("all", "--ops", help="Comma-separated ops, or 'all'."),
    dtypes: Optional[str] = typer.Option(None, "--dtypes", help="These dtypes, or 'all' (default: one per op, "
                                         "bfloat16 where it has it)."),
    quick: bool = typer.Option(False, "--quick", help="The small first case of each op (default: its large case, "
                               "the one its formula says moves the most bytes)."),
    shape: Optional[str] = typer.Option(None, "--shape", help="One case instead, e.g. M=4096,N=8192."),
    impls: Optional[str] = typer.Option(None, "--impls", help="Only these implementations (and the reference baseline)."),
    compiled: bool = typer.Option(False, "--compiled", help="Also the torch.compile baselines (compiled under ncu: slow)."),
    device: str = typer.Option("auto", "--device", help="auto, cuda or cuda:N (Nsight Compute needs a CUDA device)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the random inputs."),
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds the Nsight Compute pass may take."),
    ncu: Optional[str] = typer.Option(None, "--ncu", help="The ncu to use (default: $SOLBENCH_NCU, PATH, "
                                      "/usr/local/cuda/bin, /opt/nvidia/nsight-compute/*)."),
    specs_dirs: Optional[List[Path]] = typer.Option(None, "--specs", help="Extra folder of op specs (repeatable)."),
    out_dir: Path = typer.Option(pipeline.DEFAULT_RESULTS_DIR, "--out", help="Folder for the audit file (under audit/)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the audit file here."),
    reports: Optional[Path] = typer.Option(None, "--reports", help="Keep the ncu reports, logs and requests here."),
) -> None:
    """Check each spec's FLOP and byte formulas against Nsight Compute's hardware counters."""
    if timeout <= 0:
        raise UserError(f"must be positive, got {timeout}", field="--timeout")
    names = csv_list(dtypes)
    config = audit_mod.AuditConfig(
        ops=tuple(v.strip() for v in ops.split(",")), dtypes=_dtypes(names), quick=quick, shape=parse_shape(shape),
        impls=csv_list(impls), compiled=compiled, device=device, seed=seed, timeout_s=timeout, ncu=ncu,
        reports_dir=reports, cache_dir=out_dir / "cache")
    specs = load_specs(specs_dirs)
    command = " ".join(["solbench"] + [shlex.quote(a) for a in sys.argv[1:]])
    with err.status("auditing under Nsight Compute...") as status, _sigterm_interrupts():
        try:
            result = audit_mod.run(config, specs, command, on_note=lambda m: status.update(escape(m)))
        except KeyboardInterrupt:
            err.print("[red]audit interrupted before anything was counted[/]: no audit file written")
            raise typer.Exit(130) from None
    created = result.created.replace("-", "").replace(":", "")
    paths = [audit_mod.write(result, out_dir / "audit" / f"{created}.json")]
    if json_path:
        paths.append(audit_mod.write(result, json_path))
    out.print(audit_table(result))
    for line in reasons(result):
        out.print(line, highlight=False)
    for note in result.session.get("notes", []):
        out.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    s = result.to_json()["summary"]
    out.print(f"[bold]{s['passed']}/{s['ops']} ops pass[/]: bytes within {audit_mod.TOLERANCE:.0%} (or a cache "
              f"reason) for {s['bytes_ok']}, explained by the spec for {s['bytes_explained']}; FLOPs judged for "
              f"{s['flops_judged']} compute-bound, {s['flops_ok']} within {audit_mod.TOLERANCE:.0%}"
              f"{_explained(s['flops_explained'])}; {s['errors']} calls not counted", highlight=False)
    out.print("audit: " + ", ".join(str(p) for p in paths))
    if result.session.get("interrupted"):
        err.print("[yellow]audit interrupted[/]: the file holds the calls counted before it; the rest say so")
        raise typer.Exit(130)
    if result.failed:
        raise typer.Exit(1)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a job runner's timeout) stops the audit as Ctrl-C does: what was counted is written."""
    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt
    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:        # not the main thread: signals stay as they are
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _dtypes(names: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
    from solbench.dtypes import precision

    if names is None or names == ("all",):
        return names
    try:
        return tuple(precision(n).name for n in names)
    except UserError as exc:
        raise UserError(exc.detail, field="--dtypes") from None


def audit_table(result: audit_mod.Audit) -> Table:
    table = Table(title="formulas vs Nsight Compute (DRAM bytes read+written; executed FLOPs)", title_justify="left")
    for col, justify in (("op", "left"), ("case", "left"), ("dtype", "left"), ("impl", "left"),
                         ("spec bytes", "right"), ("DRAM bytes", "right"), ("ratio", "right"), ("bytes", "left"),
                         ("spec FLOPs", "right"), ("counted", "right"), ("ratio", "right"), ("FLOPs", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for f in result.findings:
        c = f.counters
        table.add_row(f.op, escape(f.case), f.dtype, f.impl, _qty(f.spec_bytes, "B"),
                      _qty(c.dram_bytes, "B") if c else "-", _r(f.bytes_ratio), _verdict(f.bytes, f.error),
                      _qty(f.spec_flops, ""), _qty(c.flops, "") if c else "-", _r(f.flops_ratio),
                      _verdict(f.flops, None))
    return table


def reasons(result: audit_mod.Audit) -> list[str]:
    """One line per flagged formula (the op's verdict), then per call that was not counted."""
    lines = []
    for o in result.ops:
        for what, v in (("bytes", o.bytes), ("FLOPs", o.flops)):
            if v.flagged or v.verdict == "n/a" and v.reason.startswith("no implementation"):
                style = _STYLE.get(v.verdict, "")
                lines.append(f"[{style}]{o.op} {what}: {v.verdict}[/] ({escape(o.case)}, {o.dtype}): {escape(v.reason)}"
                             + (f" [dim]({o.spec_file})[/]" if v.verdict == "formula" else ""))
    for f in result.findings:
        if f.error:
            lines.append(f"[red]{f.op} {escape(f.case)} {f.dtype} {f.impl}: not counted[/]: {escape(f.error)}")
    return lines


def counters_table(records: list[Record]) -> Table | None:
    """`run --counters`: each counted record's DRAM bytes and FLOPs next to its spec's, and throughputs."""
    rows = [r for r in records if r.counters]
    if not rows:
        return None
    table = Table(title="counters (Nsight Compute, a separate pass after timing)", title_justify="left")
    for col in ("op", "case", "dtype", "impl", "DRAM bytes", "vs spec", "FLOPs", "vs spec", "DRAM GB/s", "SM %"):
        table.add_column(col, justify="left" if col in ("op", "case", "dtype", "impl") else "right")
    for r in rows:
        c: dict[str, Any] = r.counters or {}
        if "error" in c:
            table.add_row(r.op, escape(r.case), r.dtype, r.impl, f"[red]{escape(str(c['error'])[:60])}[/]",
                          "", "", "", "", "")
            continue
        table.add_row(r.op, escape(r.case), r.dtype, r.impl, _qty(c.get("dram_bytes"), "B"), _r(c.get("bytes_ratio")),
                      _qty(c.get("flops"), ""), _r(c.get("flops_ratio")),
                      f"{c['dram_gbps']:,.0f}" if c.get("dram_gbps") else "-",
                      f"{c['sm_throughput_pct']:.0f}" if c.get("sm_throughput_pct") is not None else "-")
    return table


def _explained(n: int) -> str:
    return f", explained by the spec for {n}" if n else ""


def _verdict(v: audit_mod.Verdict, error: str | None) -> str:
    if error:
        return "[red]error[/]"
    return f"[{_STYLE.get(v.verdict, '')}]{v.verdict}[/]"


def _r(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "-"


def _qty(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:,.2f} {prefix}{unit}".rstrip()
    return f"{x:,.0f} {unit}".rstrip()
