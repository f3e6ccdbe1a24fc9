"""The `solbench` command line: parse flags, call the modules that do the work, print, exit.

Exit codes: 0 all ran, 1 a case failed or errored (or a check failed), 2 bad input.
"""

from __future__ import annotations

import functools
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from solbench import console as ui
from solbench import hardware, results, runner, spec
from solbench.errors import UserError
from solbench.timing import TimingConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="How close is this kernel to the hardware's speed of light, and is it faster than PyTorch?")
out = ui.make_console()
err = ui.make_console(stderr=True)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a UserError into one red line and exit code 2: no tracebacks for user mistakes."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def _csv(value: Optional[str]) -> Optional[tuple[str, ...]]:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    return items or None


def parse_shape(value: Optional[str]) -> Optional[dict[str, int]]:
    """'M=4096,N=8192' -> {'M': 4096, 'N': 8192}."""
    if not value:
        return None
    shape = {}
    for item in value.split(","):
        name, sep, number = item.partition("=")
        if not sep or not name.strip():
            raise UserError(f"expected NAME=VALUE, got '{item}'", field="--shape")
        try:
            shape[name.strip()] = int(number)
        except ValueError:
            raise UserError(f"'{number}' is not an integer (in '{item}')", field="--shape") from None
        if shape[name.strip()] < 0:
            raise UserError(f"'{item}' is negative", field="--shape")
    return shape


def _load_specs(specs_dirs: Optional[List[Path]]) -> dict[str, spec.OpSpec]:
    return spec.load_all(specs_dirs or [])


@app.command()
@user_errors
def run(
    ops: str = typer.Option("all", "--ops", help="Comma-separated ops, or 'all'."),
    dtypes: Optional[str] = typer.Option(None, "--dtypes", help="Only these dtypes, e.g. bfloat16,float32."),
    shape: Optional[str] = typer.Option(None, "--shape", help="One case instead of the sweep, e.g. M=4096,N=8192."),
    impls: Optional[str] = typer.Option(None, "--impls", help="Only these implementations (the reference baseline always runs)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline that speedups are measured against."),
    quick: bool = typer.Option(False, "--quick", help="Only the first (small) case of each op."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    peaks: str = typer.Option("datasheet", "--peaks", help="datasheet, measured, at-clock (datasheet compute peak "
                              "scaled by the SM clock NVML observed), or a peak-table YAML file."),
    specs_dirs: Optional[List[Path]] = typer.Option(None, "--specs", help="Extra folder of op specs (repeatable; also $SOLBENCH_SPECS)."),
    out_dir: Path = typer.Option(runner.DEFAULT_RESULTS_DIR, "--out", help="Folder for the results file."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results file here."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Also write a flat CSV table here."),
    rse: float = typer.Option(0.005, "--rse", help="Stop sampling when the median's relative standard error is below this."),
    budget: float = typer.Option(1.0, "--budget", help="Seconds of sampling per implementation and case, at most."),
    min_samples: int = typer.Option(10, "--min-samples", help="Fewest timed samples per measurement."),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds an op's worker may take before it is killed."),
    fail_fast: bool = typer.Option(False, "--fail-fast", help="Stop after the first failing op."),
    no_isolate: bool = typer.Option(False, "--no-isolate", help="Run ops in this process (faster start, no crash isolation)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the random inputs."),
    # --timer picks the CUDA timer; a CPU run always uses the wall clock.
    timer: str = typer.Option("events", "--timer", help="CUDA timer: events (default), graph or cupti."),
) -> None:
    """Check, time and score each op's implementations and baselines; write a results file."""
    if rse <= 0 or budget <= 0 or min_samples < 1:
        raise UserError("--rse and --budget must be positive and --min-samples at least 1")
    # validate --timer; `--peaks at-clock` = datasheet peaks re-scored at the observed SM clock
    from solbench.timing import TIMERS
    if timer not in TIMERS:
        raise UserError(f"unknown timer '{timer}' (use {', '.join(TIMERS)})", field="--timer")
    config = runner.RunConfig(
        ops=_csv(ops) or ("all",), dtypes=_canonical_dtypes(_csv(dtypes)), shape=parse_shape(shape),
        impls=_csv(impls), baseline=baseline, quick=quick, device=device, peaks=peaks,
        timing=TimingConfig(timer=timer, rse_target=rse, budget_s=budget, min_samples=min_samples,
                            peaks_at_clock=peaks == "at-clock"),
        timeout_s=timeout, fail_fast=fail_fast, isolate=not no_isolate, seed=seed,
        cache_dir=out_dir / "cache",
    )
    selected = runner.select_ops(_load_specs(specs_dirs), config.ops)
    with err.status("probing the device..."):
        probe = runner.probe(config)
    info = probe.info
    runner.check_flags(selected, config, info)
    peaks_used, warnings = runner.resolve_peaks(probe, config.peaks, config.cache_dir)
    _print_header(info, peaks_used, warnings)
    plans = runner.plan_ops(selected, config, info)
    records = _execute(plans, config, probe, peaks_used)
    records += runner.skipped_records(plans, config, info)
    results.fill_speedups(records, config.baseline)
    run_ = results.Run(env=_env_json(info), peaks=peaks_used.to_json(), config=config.to_json(), records=records,
                       command=" ".join(["solbench"] + [shlex.quote(a) for a in sys.argv[1:]]))
    path = results.write_run(run_, out_dir / f"{run_.run_id}.json")
    if json_path:
        results.write_run(run_, json_path)
    if csv_path:
        results.write_csv(records, csv_path)
    for table in ui.op_tables(records):
        out.print(table)
    for line in ui.summary_lines(records):
        out.print(line)
    if info.kind == "cpu":
        out.print("[bold yellow]No CUDA device: CUDA implementations were SKIPPED; PyTorch baselines ran on the "
                  "CPU and are scored against this CPU's measured ceilings.[/]")
    out.print(f"results: {path}" + (f", {json_path}" if json_path else "") + (f", {csv_path}" if csv_path else ""))
    if any(r.status in ("failed", "error") for r in records):
        raise typer.Exit(1)


def _canonical_dtypes(names: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
    from solbench.dtypes import precision

    if names is None:
        return None
    try:
        return tuple(precision(n).name for n in names)
    except UserError as exc:
        raise UserError(exc.detail, field="--dtypes") from None


def _execute(plans: list[runner.OpPlan], config: runner.RunConfig, probe: runner.Probe,
             peaks: hardware.Peaks) -> list[results.Record]:
    total = sum(p.units for p in plans)
    with ui.make_progress(err) as progress:
        task = progress.add_task("measuring", total=total, last="")

        def on_event(kind: str, data: Any) -> None:
            if kind == "record":
                progress.update(task, advance=1, last=f"{data.op} {data.case} {data.dtype} {data.impl}: {data.status}")

        return runner.execute(plans, config, probe, peaks, on_event)


def _print_header(info: hardware.DeviceInfo, peaks: hardware.Peaks, warnings: list[str]) -> None:
    from rich.markup import escape

    compute = {f"fp32 {peaks.simt['fp32'] / 1e12:,.1f}"} if "fp32" in peaks.simt else set()
    compute |= {f"{k} {v / 1e12:,.1f}" for k, v in peaks.tensor.items() if k != "fp32"}
    out.print(f"[bold]device[/] {escape(info.name)} ({info.kind})   [bold]peaks[/] {escape(peaks.name)} "
              f"({peaks.source}): {peaks.memory_bandwidth / 1e9:,.0f} GB/s; TFLOP/s " + ", ".join(sorted(compute)))
    for w in warnings:
        out.print(f"[bold yellow]WARNING[/] {escape(w)}")


def _env_json(info: hardware.DeviceInfo) -> dict[str, Any]:
    env = info.to_json()
    env.update(solbench=results.solbench_version(), git_sha=results.git_sha(),
               telemetry=info.clocks is not None, cuda_skipped=info.kind == "cpu")
    return env


@app.command("list")
@user_errors
def list_ops(specs_dirs: Optional[List[Path]] = typer.Option(None, "--specs", help="Extra folder of op specs.")) -> None:
    """Ops with their baselines and implementations; known GPUs."""
    from rich.table import Table

    table = Table(title="ops")
    for col in ("op", "summary", "dtypes", "baselines", "impls", "cases"):
        table.add_column(col)
    for s in _load_specs(specs_dirs).values():
        table.add_row(s.op, s.summary, ", ".join(s.dtypes), ", ".join(c.name for c in s.baselines),
                      ", ".join(c.name for c in s.impls) or "-", str(len(s.cases)))
    out.print(table)
    gpus = Table(title="known GPUs (specs/gpus)")
    for col in ("table", "name", "SMs", "GB/s", "fp32", "tf32", "bf16", "fp8"):
        gpus.add_column(col)
    for t in hardware.load_gpu_tables():
        p = t.peaks()
        tf = lambda d, k: f"{d[k] / 1e12:,.0f}" if k in d else "-"  # noqa: E731
        gpus.add_row(t.key, t.name, str(t.sm_count), f"{p.memory_bandwidth / 1e9:,.0f}", tf(p.simt, "fp32"),
                     tf(p.tensor, "tf32"), tf(p.tensor, "bf16"), tf(p.tensor, "fp8"))
    out.print(gpus)


@app.command()
@user_errors
def show(op: str = typer.Argument(..., help="Op name."),
         specs_dirs: Optional[List[Path]] = typer.Option(None, "--specs", help="Extra folder of op specs.")) -> None:
    """One op's spec: sweep, formulas, tolerances, implementations."""
    specs = _load_specs(specs_dirs)
    s = runner.select_ops(specs, [op])[0]
    out.print(f"[bold]{s.op}[/]: {s.summary}\n  file: {s.path}")
    out.print(f"  cases: {list(s.cases)}\n  cpu cases: {list(s.cpu_cases)}\n  dtypes: {', '.join(s.dtypes)}")
    for t in s.inputs:
        out.print(f"  input  {t.name}: shape [{', '.join(f.source for f in t.shape)}], init {t.init}, dtype {t.dtype or '(case dtype)'}")
    for t in s.outputs:
        out.print(f"  output {t.name}: shape [{', '.join(f.source for f in t.shape)}], dtype {t.dtype or '(case dtype)'}")
    out.print(f"  flops: {s.flops.source}\n  bytes: {s.bytes.source if s.bytes else 'auto (each input read once, each output written once)'}")
    out.print(f"  compute: {s.compute}")
    out.print(f"  reference: {s.reference.fn} in {s.reference.dtype or 'float64'}")
    for c in s.baselines:
        out.print(f"  baseline {c.name}: {c.fn}{' (torch.compile)' if c.compile else ''} {c.kwargs or ''}")
    for c in s.impls:
        out.print(f"  impl {c.name}: {c.fn}{' [cuda]' if c.device else ''} {c.kwargs or ''}")
    for d, t in s.tolerance.items():
        out.print(f"  tolerance {d}: " + ", ".join(f"{k}={v:g}" for k, v in vars(t).items() if v is not None))


@app.command()
@user_errors
def env(device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
        peaks: str = typer.Option("datasheet", "--peaks", help="datasheet, measured, or a peak-table YAML file."),
        out_dir: Path = typer.Option(runner.DEFAULT_RESULTS_DIR, "--out", help="Where cached CPU ceilings live.")) -> None:
    """Device, the peaks in use, torch/CUDA versions."""
    config = runner.RunConfig(device=device, peaks=peaks, cache_dir=out_dir / "cache")
    probe = runner.probe(config)
    peaks_used, warnings = runner.resolve_peaks(probe, config.peaks, config.cache_dir)
    for key, value in _env_json(probe.info).items():
        out.print(f"  {key:>20}: {value}")
    _print_header(probe.info, peaks_used, warnings)
    if peaks_used.notes:
        out.print(f"  peak source: {peaks_used.notes}")


# ---- report commands (roofline, plot, report, compare) ----
# (owned by the reports helper: thin wrappers over solbench.roofline / report / compare)

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
    from solbench import roofline as rl

    summary = rl.run_sol_plot(results_files, output, ops=ops, dtypes=dtypes, impls=impls)
    out.print(f"sol chart: {output} ({summary.n_bars} bars over {len(summary.ops)} ops)")
    _print_chart_notes([f"{n}: invalid" for n in summary.invalid], [f"{n}: failed" for n in summary.failed])


@app.command("report")
@user_errors
def report_cmd(
    results_file: Path = typer.Argument(..., help="A results file."),
    output: Path = typer.Option(Path("report.md"), "-o", "--output", help="report.md (charts written next to it) "
                                "or report.html (self-contained)."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Tables only."),
) -> None:
    """Markdown or HTML report: summary, per-op tables, environment, charts."""
    from solbench import report as rep

    path = rep.run_report(results_file, output, charts=not no_charts)
    out.print(f"report: {path}")


@app.command("compare")
@user_errors
def compare_cmd(
    base: Path = typer.Argument(..., help="Results file to compare against (e.g. main's)."),
    new: Path = typer.Argument(..., help="Results file of the change."),
    metric: str = typer.Option("time", "--metric", help="time (same GPU) or sol (comparable across GPUs)."),
    threshold: float = typer.Option(0.05, "--threshold", help="Smallest relative change that counts."),
    alpha: float = typer.Option(0.01, "--alpha", help="Significance level of the Mann-Whitney U test."),
    allow_cross_device: bool = typer.Option(False, "--allow-cross-device", help="Compare times across devices."),
    fail_on: str = typer.Option("slower", "--fail-on", help="Exit 1 on any of: slower, missing, failed."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a pull-request comment here."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the verdicts as JSON here."),
    github_benchmark: Optional[Path] = typer.Option(None, "--github-benchmark",
                                                    help="github-action-benchmark customSmallerIsBetter file."),
    bencher: Optional[Path] = typer.Option(None, "--bencher", help="Bencher Metric Format file."),
) -> None:
    """Pair BASE and NEW records; verdict per pair from raw samples; exit 1 on regressions."""
    from solbench import compare as cmp

    code = cmp.run_compare(base, new, metric=metric, threshold=threshold, alpha=alpha,
                           allow_cross_device=allow_cross_device, fail_on=fail_on, markdown=markdown,
                           json_path=json_out, github_benchmark=github_benchmark, bencher=bencher)
    raise typer.Exit(code)

# ---- end of report commands ----


# ---- hardware commands (calibrate, doctor) ----
# (owned by the hardware helper: thin wrappers over solbench.calibrate / solbench.doctor)

@app.command("calibrate")
@user_errors
def calibrate_cmd(
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    out_dir: Path = typer.Option(runner.DEFAULT_RESULTS_DIR, "--out",
                                 help="Results folder; the calibration goes to <out>/calibration/<fingerprint>.json."),
    quick: bool = typer.Option(False, "--quick", help="Small sizes: a smoke test, not a ceiling."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the calibration here."),
) -> None:
    """Measure this device's ceilings (DRAM, L2, matmul per dtype) and compare them with the datasheet."""
    from solbench import calibrate as cal

    cal.calibrate_command(device, Path(out_dir) / "calibration", quick=quick, json_out=json_path, console=out)


@app.command("doctor")
@user_errors
def doctor_cmd(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    no_build: bool = typer.Option(False, "--no-build", help="Skip the C++ extension and kernel-library builds."),
    build_timeout: float = typer.Option(900.0, "--build-timeout", help="Seconds the kernel-library build may take."),
) -> None:
    """Is this machine ready? CUDA, driver, nvcc, arch list, compiler, kernel build, clocks. Exit 1 on any FAIL."""
    from solbench import doctor as doc

    raise typer.Exit(doc.doctor_command(as_json=as_json, build=not no_build, build_timeout_s=build_timeout,
                                        console=out))


# ---- kernel commands (build) ----

@app.command("build")
@user_errors
def build_kernels(verbose: bool = typer.Option(False, "--verbose", help="Show the compiler's commands and output.")) -> None:
    """Build the CUDA kernel library ahead of time (otherwise it builds on first use)."""
    import kernels_ext

    with err.status("building kernels_ext...") as status:
        try:
            path = kernels_ext.build(verbose=verbose, progress=lambda msg: status.update(msg))
        except kernels_ext.KernelBuildError as exc:
            err.print(f"[bold red]build failed:[/] {exc}", highlight=False)
            raise typer.Exit(1) from None
    out.print(f"kernels_ext: {path}")



def main() -> None:
    app()
