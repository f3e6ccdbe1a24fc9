"""`solbench run` and the commands that describe what it would run: list, show, env."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer

from solbench import console as ui
from solbench import hardware, pipeline, plan, results
from solbench import peaks as peaks_mod
from solbench.cli.app import (CUDA_TIMERS, app, csv_list, err, load_specs, out, parse_shape, user_errors,
                              writable_file, writable_folder)
from solbench.cli import scaleout
from solbench.cli.audit import counters_table
from solbench.errors import UserError
from solbench.measure import TimingConfig
from solbench.measure.l2flush import DEFAULT_FLUSH_MODE, FLUSH_MODES


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
    peaks: Optional[str] = typer.Option(None, "--peaks", help="datasheet (the default on a GPU), measured, at-clock "
                                        "(datasheet compute peak scaled by the SM clock NVML observed), or a "
                                        "peak-table YAML file. A CPU is always scored against its measured ceilings."),
    specs_dirs: Optional[List[Path]] = typer.Option(None, "--specs", help="Extra folder of op specs (repeatable; also $SOLBENCH_SPECS)."),
    out_dir: Path = typer.Option(pipeline.DEFAULT_RESULTS_DIR, "--out", help="Folder for the results file."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results file here."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Also write a flat CSV table here."),
    rse: float = typer.Option(0.005, "--rse", help="Stop sampling when the median's relative standard error is below this."),
    budget: float = typer.Option(1.0, "--budget", help="Seconds of sampling per implementation and case, at most."),
    min_samples: int = typer.Option(10, "--min-samples", help="Fewest timed samples per measurement."),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds one call (an implementation on one case) may "
                                  "take before its worker is killed; the run goes on in a fresh worker."),
    fail_fast: bool = typer.Option(False, "--fail-fast", help="Stop after the first failing op."),
    no_isolate: bool = typer.Option(False, "--no-isolate", help="Run ops in this process (faster start, no crash isolation)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the random inputs."),
    timer: str = typer.Option("events", "--timer", help="CUDA timer: " + ", ".join(CUDA_TIMERS) +
                              " (events is the default); a CPU run always uses the wall clock."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help=scaleout.GPUS_HELP),
    executor: str = typer.Option("local", "--executor", help=scaleout.EXECUTOR_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help=scaleout.RAY_ADDRESS_HELP),
    accelerators: Optional[str] = typer.Option(None, "--accelerators", help=scaleout.ACCELERATORS_HELP),
    retries: int = typer.Option(2, "--retries", help=scaleout.RETRIES_HELP),
    resume: Optional[Path] = typer.Option(None, "--resume", help=scaleout.RESUME_HELP),
    remote: Optional[str] = typer.Option(None, "--remote", help="Run on the solbench serve at this URL (API key in "
                                         "$SOLBENCH_API_KEY); its results file is saved and printed here."),
    counters: bool = typer.Option(False, "--counters", help="After timing, a separate Nsight Compute pass adds each "
                                  "record's DRAM bytes, FLOPs and throughputs (`counters`); needs ncu and a GPU."),
    nvtx: bool = typer.Option(False, "--nvtx", help="NVTX ranges per op / case / impl and per timed call, and "
                              "cudaProfilerStart/Stop around each timed window (for nsys; README)."),
    ncu: Optional[str] = typer.Option(None, "--ncu", help="The ncu for --counters (default: $SOLBENCH_NCU, PATH, "
                                      "/usr/local/cuda/bin, /opt/nvidia/nsight-compute/*)."),
    flush: str = typer.Option(DEFAULT_FLUSH_MODE, "--flush", help="How the L2 is flushed before each timed call: "
                              "balanced (the default: read a buffer of twice the L2, then rewrite as much of it as "
                              "the case's outputs, so the call writes back about as many dirty lines as it leaves), "
                              "read (only read it: the call meets no dirty lines) or write (rewrite all of it: the "
                              "call meets an L2 of dirty lines; the default before 2026-12-01)."),
) -> None:
    """Check, time and score each op's implementations and baselines; write a results file."""
    config = _run_config(ops, dtypes, shape, impls, baseline, quick, device, peaks or "datasheet", out_dir, rse,
                         budget, min_samples, timeout, fail_fast, no_isolate, seed, timer)
    if flush not in FLUSH_MODES:
        raise UserError(f"unknown flush mode '{flush}' (use {', '.join(FLUSH_MODES)})", field="--flush")
    config = dataclasses.replace(config, counters=counters, ncu=ncu,
                                 timing=dataclasses.replace(config.timing, nvtx=nvtx, flush_mode=flush))
    if remote:
        from solbench.cli.remote import remote_request, run_remote

        request = remote_request(ops, dtypes, shape, impls, baseline, quick, timer, peaks, rse, budget, min_samples,
                                 timeout, fail_fast, seed)
        local = {"--device": device != "auto", "--specs": bool(specs_dirs), "--no-isolate": no_isolate,
                 "--gpus": gpus is not None, "--executor": executor != "local", "--resume": resume is not None,
                 "--counters": counters, "--nvtx": nvtx, "--ncu": ncu is not None, "--flush": flush != DEFAULT_FLUSH_MODE}
        raise typer.Exit(run_remote(remote, request, out_dir, json_path, csv_path, local))
    config = scaleout.with_placement(config, gpus, executor, ray_address, accelerators, retries, resume)
    if config.placement.accelerators:
        return scaleout.run_fleet(config, load_specs(specs_dirs), out_dir, json_path, csv_path)
    json_path = json_path or resume      # resuming writes back into the file it resumes
    writable_file(json_path, "--json")
    writable_file(csv_path, "--csv")
    specs = load_specs(specs_dirs)
    with err.status("probing the device..."):
        prepared = pipeline.prepare(config, specs)
    _print_header(prepared.info, prepared.peaks, list(prepared.warnings))
    scaleout.describe_resume(prepared)
    if prepared.info.kind == "cpu" and timer != "events":
        out.print(f"[yellow]--timer {timer} is a CUDA timer: this CPU run uses the wall clock[/]")
    if prepared.info.kind == "cpu" and peaks is not None and peaks != "measured":
        out.print(f"[yellow]--peaks {peaks}: a CPU has no datasheet; this run is scored against this CPU's "
                  f"measured ceilings[/]")
    run_ = _execute(prepared, lambda partial: pipeline.write(partial, out_dir, json_path))
    paths = pipeline.write(run_, out_dir, json_path, csv_path)
    _print_results(run_, prepared.info.kind == "cpu", counters, nvtx)
    out.print("results: " + ", ".join(str(p) for p in paths))
    if any(r.status in ("failed", "error") for r in run_.records):
        raise typer.Exit(1)


def _print_results(run_: results.Run, on_cpu: bool, counters: bool, nvtx: bool) -> None:
    """The tables and notes a finished run prints, all rendered from its records."""
    for table in ui.op_tables(run_.records, out.width):
        out.print(table)
    for line in ui.summary_lines(run_.records):
        out.print(line)
    if recheck := run_.peaks.get("bandwidth_recheck"):     # the CPU ceiling was measured again (ceiling_recheck.py)
        from rich.markup import escape

        out.print(f"[yellow]{escape(recheck['note'])}[/]", highlight=False)
    if counters and (table := counters_table(run_.records)) is not None:
        out.print(table)
    if nvtx and on_cpu:
        out.print("[yellow]--nvtx: no CUDA device, so no NVTX ranges were emitted[/]")
    if on_cpu:
        out.print("[bold yellow]No CUDA device: CUDA implementations were SKIPPED; PyTorch baselines ran on the "
                  "CPU and are scored against this CPU's measured ceilings.[/]")


def _run_config(ops: str, dtypes: Optional[str], shape: Optional[str], impls: Optional[str],
                baseline: Optional[str], quick: bool, device: str, peaks: str, out_dir: Path, rse: float,
                budget: float, min_samples: int, timeout: float, fail_fast: bool, no_isolate: bool, seed: int,
                timer: str) -> pipeline.RunConfig:
    """The flags of `solbench run` as a pipeline request; every flag is checked here, by name."""
    if rse <= 0:
        raise UserError(f"must be positive, got {rse}", field="--rse")
    if budget <= 0:
        raise UserError(f"must be positive, got {budget}", field="--budget")
    if min_samples < 1:
        raise UserError(f"must be at least 1, got {min_samples}", field="--min-samples")
    if timeout <= 0:
        raise UserError(f"must be positive, got {timeout}", field="--timeout")
    if timer not in CUDA_TIMERS:
        raise UserError(f"unknown timer '{timer}' (use {', '.join(CUDA_TIMERS)})", field="--timer")
    peaks_mod.check_mode(peaks)
    writable_folder(out_dir, "--out")
    selection = plan.Selection(ops=tuple(v.strip() for v in ops.split(",")), dtypes=_canonical_dtypes(csv_list(dtypes)),
                               shape=parse_shape(shape), impls=csv_list(impls), baseline=baseline, quick=quick)
    timing = TimingConfig(timer=timer, rse_target=rse, budget_s=budget, min_samples=min_samples,
                          peaks_at_clock=peaks == "at-clock")
    return pipeline.RunConfig(selection=selection, device=device, peaks=peaks, timing=timing, timeout_s=timeout,
                              fail_fast=fail_fast, isolate=not no_isolate, seed=seed, cache_dir=out_dir / "cache")


def _canonical_dtypes(names: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
    from solbench.dtypes import precision

    if names is None:
        return None
    try:
        return tuple(precision(n).name for n in names)
    except UserError as exc:
        raise UserError(exc.detail, field="--dtypes") from None


def _execute(prepared: pipeline.Prepared,
             checkpoint: Optional[Callable[[results.Run], object]] = None) -> results.Run:
    """Measure with a progress bar; `checkpoint(run)` writes the results so far after every record."""
    with ui.make_progress(err) as progress:
        task = progress.add_task("measuring", total=prepared.total, last="")

        def on_record(r: results.Record) -> None:
            progress.update(task, advance=1, last=f"{r.op} {r.case} {r.dtype} {r.impl}: {r.status}")

        command = " ".join(["solbench"] + [shlex.quote(a) for a in sys.argv[1:]])
        return pipeline.execute(prepared, on_record, command, checkpoint)


def _print_header(info: hardware.DeviceInfo, peaks: peaks_mod.Peaks, warnings: list[str]) -> None:
    from rich.markup import escape

    summary = ui.peaks_summary(peaks.name, peaks.source, peaks.memory_bandwidth, peaks.simt, peaks.tensor)
    out.print(f"[bold]device[/] {escape(info.name)} ({info.kind})   [bold]peaks[/] {escape(summary)}")
    for w in warnings:
        out.print(f"[bold yellow]WARNING[/] {escape(w)}")


@app.command("list")
@user_errors
def list_ops(specs_dirs: Optional[List[Path]] = typer.Option(None, "--specs", help="Extra folder of op specs.")) -> None:
    """Ops with their baselines and implementations; known GPUs."""
    from rich.table import Table

    table = Table(title="ops")
    for col in ("op", "summary", "dtypes", "baselines", "impls", "cases"):
        table.add_column(col)
    for s in load_specs(specs_dirs).values():
        table.add_row(s.op, s.summary, ", ".join(s.dtypes), ", ".join(c.name for c in s.baselines),
                      ", ".join(c.name for c in s.impls) or "-", str(len(s.cases)))
    out.print(table)
    gpus = Table(title="known GPUs (specs/gpus)")
    for col in ("table", "name", "SMs", "GB/s", "fp32", "tf32", "bf16", "fp8"):
        gpus.add_column(col)
    for t in peaks_mod.load_gpu_tables():
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
    specs = load_specs(specs_dirs)
    s = plan.select_ops(specs, [op])[0]
    out.print(f"[bold]{s.op}[/]: {s.summary}\n  file: {s.path}")
    out.print(f"  cases: {list(s.cases)}\n  cpu cases: {list(s.cpu_cases)}\n  dtypes: {', '.join(s.dtypes)}")
    for t in s.inputs:
        out.print(f"  input  {t.name}: shape [{', '.join(f.source for f in t.shape)}], init {t.init}, dtype {t.dtype or '(case dtype)'}")
    for t in s.outputs:
        out.print(f"  output {t.name}: shape [{', '.join(f.source for f in t.shape)}], dtype {t.dtype or '(case dtype)'}")
    out.print(f"  flops: {s.flops.source}\n  bytes: {s.bytes.source if s.bytes else 'auto (each input read once, each output written once)'}",
              soft_wrap=True, highlight=False)   # a formula is copied as one line
    out.print(f"  compute: {s.compute}")
    out.print(f"  reference: {s.reference.fn} in {s.reference.dtype or 'float64'}")
    for c in s.baselines:
        out.print(f"  baseline {c.name}: {c.fn}{' (torch.compile)' if c.compile else ''} {_kwargs(c.kwargs)}",
                  highlight=False)
    for c in s.impls:
        out.print(f"  impl {c.name}: {c.fn}{' [cuda]' if c.device else ''} {_kwargs(c.kwargs)}", highlight=False)
    for d, t in s.tolerance.items():
        out.print(f"  tolerance {d}: " + ", ".join(f"{k}={v:g}" for k, v in vars(t).items() if v is not None))


def _kwargs(kwargs: dict) -> str:
    """Keyword arguments as the spec writes them: a formula as `"=expr"`, not as a Python object."""
    from rich.markup import escape

    from solbench.expr import Formula

    shown = {k: f"={v.source}" if isinstance(v, Formula) else v for k, v in kwargs.items()}
    return escape(str(shown)) if shown else ""


@app.command()
@user_errors
def env(device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
        peaks: str = typer.Option("datasheet", "--peaks", help="datasheet, measured, or a peak-table YAML file."),
        out_dir: Path = typer.Option(pipeline.DEFAULT_RESULTS_DIR, "--out", help="Where cached CPU ceilings live.")) -> None:
    """Device, the peaks in use, torch/CUDA versions."""
    from solbench.exec import make_executor
    from solbench.job import ProbeJob

    peaks_mod.check_mode(peaks)
    writable_folder(out_dir, "--out")
    probe = make_executor(True, 600.0).probe(ProbeJob(device, out_dir / "cache"))
    peaks_used, warnings = peaks_mod.resolve(probe.info, peaks, out_dir / "cache", probe.cpu_peaks)
    for key, value in pipeline.environment(probe.info).items():
        out.print(f"  {key:>20}: {value}")
    _print_header(probe.info, peaks_used, warnings)
    if peaks_used.notes:
        out.print(f"  peak source: {peaks_used.notes}")
