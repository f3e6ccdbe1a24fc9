"""Commands that read results files only: table, roofline, plot, report, compare (never re-run anything)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from solbench.cli.app import app, csv_list, out, parse_shape, user_errors



plot_app = typer.Typer(no_args_is_help=True, help="Charts drawn from results files.")
app.add_typer(plot_app, name="plot")


# Filters shared by the chart commands.
_ONLY_OPS = typer.Option(None, "--ops", help="Only these ops (comma-separated).")
_ONLY_DTYPES = typer.Option(None, "--dtypes", help="Only these dtypes.")
_ONLY_IMPLS = typer.Option(None, "--impls", help="Only these implementations.")


def _print_chart_notes(error_points: list[str], skipped: list[str]) -> None:
    for e in error_points:
        out.print(f"[bold red]not a win[/] (SOL > 1 or invalid): {e}", highlight=False)
    for s in skipped:
        out.print(f"[yellow]not plotted[/]: {s}", highlight=False)


MIN_TABLE_WIDTH = 80     # the narrowest terminal the tables are laid out for (README)


@app.command("table")
@user_errors
def table_cmd(
    results_files: List[Path] = typer.Argument(..., help="One or more results files."),
    ops: Optional[str] = _ONLY_OPS,
    dtypes: Optional[str] = _ONLY_DTYPES,
    impls: Optional[str] = _ONLY_IMPLS,
    shape: Optional[str] = typer.Option(None, "--shape", help="Only cases with these parameters, e.g. "
                                        "M=8192,N=8192 or SQ=4096,D=128,causal=1."),
    width: Optional[int] = typer.Option(None, "--width", help="Lay the tables out for this many columns "
                                        "(default: the terminal's)."),
) -> None:
    """The tables `solbench run` prints, rendered again from results files (every status, every note)."""
    from solbench import console as ui
    from solbench.errors import UserError
    from solbench.results import load_run, select_records

    if width is not None and width < MIN_TABLE_WIDTH:
        raise UserError(f"must be at least {MIN_TABLE_WIDTH}, got {width}", field="--width")
    runs = [load_run(p) for p in results_files]
    wanted = parse_shape(shape)
    selected = select_records(runs, ops=csv_list(ops), dtypes=csv_list(dtypes), impls=csv_list(impls),
                              shape=wanted)
    for path, run in zip(results_files, runs):
        records = [rec for r, rec in selected if r is run]
        if not records:
            continue
        for line in ui.run_header(run, str(path)):
            out.print(line, highlight=False, soft_wrap=True)
        for table in ui.op_tables(records, width or out.width):
            out.print(table, width=width)
        for line in ui.summary_lines(records):
            out.print(line, highlight=False, width=width)


@app.command("roofline")
@user_errors
def roofline_cmd(
    results_files: List[Path] = typer.Argument(..., help="One or more results files."),
    output: Path = typer.Option(Path("roofline.png"), "-o", "--output", help="Image file: .png, .svg or .pdf."),
    ops: Optional[str] = _ONLY_OPS,
    dtypes: Optional[str] = _ONLY_DTYPES,
    impls: Optional[str] = _ONLY_IMPLS,
) -> None:
    """Roofline chart (FLOP/byte vs FLOP/s) with one roof per precision present."""
    from solbench import roofline as rl

    summary = rl.run_roofline(results_files, output, ops=ops, dtypes=dtypes, impls=impls)
    out.print(f"roofline: {output} ({summary.n_points} points, roofs: {', '.join(summary.roofs)})")
    _print_chart_notes(summary.error_points, summary.skipped)


@plot_app.command("sol")
@user_errors
def plot_sol_cmd(
    results_files: List[Path] = typer.Argument(..., help="One or more results files."),
    output: Path = typer.Option(Path("sol.png"), "-o", "--output", help="Image file: .png, .svg or .pdf."),
    ops: Optional[str] = _ONLY_OPS,
    dtypes: Optional[str] = _ONLY_DTYPES,
    impls: Optional[str] = _ONLY_IMPLS,
) -> None:
    """Per-op bars of SOL per implementation, baselines included."""
    from solbench import solchart

    summary = solchart.run_sol_plot(results_files, output, ops=ops, dtypes=dtypes, impls=impls)
    out.print(f"sol chart: {output} ({summary.n_bars} bars over {len(summary.ops)} ops)")
    _print_chart_notes([f"{n}: invalid" for n in summary.invalid],
                       [f"{n}: failed" for n in summary.failed] + [f"{n}: error" for n in summary.errors])


@app.command("report")
@user_errors
def report_cmd(
    results_file: Path = typer.Argument(..., help="A results file."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="X.md (charts in a folder X-charts/ beside "
                                          "it) or X.html (self-contained). Default: <results>-report.html beside "
                                          "the results file."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Tables only."),
) -> None:
    """Markdown or HTML report: summary, per-op tables, environment, charts."""
    from solbench import report as rep

    path = rep.run_report(results_file, output, charts=not no_charts)
    out.print(f"report: {path}")


@app.command("compare")
@user_errors
def compare_cmd(
    files: List[Path] = typer.Argument(..., help="BASE NEW (e.g. main's results, then the change's); with --aa, "
                                       "two or more runs of the same code."),
    aa: bool = typer.Option(False, "--aa", help="A/A check: compare every pair of the runs given (same code) and "
                            "count false alarms; exit 1 on any."),
    metric: str = typer.Option("time", "--metric", help="time (same GPU) or sol (comparable across GPUs)."),
    threshold: float = typer.Option(0.05, "--threshold", help="Smallest relative change that counts."),
    alpha: float = typer.Option(0.01, "--alpha", help="Significance level of the Mann-Whitney U test."),
    confidence: float = typer.Option(0.999, "--confidence", help="Confidence a change must exceed the run-to-run "
                                     "spread of both records at (0.999: 3.29 spreads)."),
    noise_model: Optional[Path] = typer.Option(None, "--noise-model", help="A `solbench noise` file to use instead "
                                               "of the run-to-run model the records carry."),
    allow_cross_device: bool = typer.Option(False, "--allow-cross-device", help="Compare times across devices."),
    allow_mixed_methods: bool = typer.Option(False, "--allow-mixed-methods",
                                             help="Compare runs timed with different timers or scored against "
                                                  "different peak sources."),
    fail_on: str = typer.Option("slower", "--fail-on", help="Exit 1 on any of: slower, missing, failed."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a pull-request comment here."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the verdicts as JSON here."),
    github_benchmark: Optional[Path] = typer.Option(None, "--github-benchmark",
                                                    help="github-action-benchmark customSmallerIsBetter file."),
    bencher: Optional[Path] = typer.Option(None, "--bencher", help="Bencher Metric Format file."),
) -> None:
    """Pair BASE and NEW records; verdict per pair from raw samples and run-to-run noise; exit 1 on regressions."""
    from solbench import compare_aa, compare_render
    from solbench.errors import UserError

    judged = dict(metric=metric, threshold=threshold, alpha=alpha, confidence=confidence, noise_model=noise_model,
                  allow_mixed_methods=allow_mixed_methods)
    if aa:
        raise typer.Exit(compare_aa.run_aa(files, json_path=json_out, markdown=markdown, **judged))
    if len(files) != 2:
        raise UserError(f"expected BASE and NEW (2 results files), got {len(files)}; pass --aa to compare "
                        f"several runs of the same code", field="FILES")
    code = compare_render.run_compare(files[0], files[1], allow_cross_device=allow_cross_device, fail_on=fail_on,
                                      markdown=markdown, json_path=json_out, github_benchmark=github_benchmark,
                                      bencher=bencher, **judged)
    raise typer.Exit(code)
