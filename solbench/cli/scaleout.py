"""The scale-out flags of `solbench run` (--gpus, --executor, --ray-address, --accelerators, --retries,
--resume) and the run --accelerators makes, one results file per GPU model: parsing and printing only."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from solbench import console as ui
from solbench import fleet, pipeline, results
from solbench.cli.app import csv_list, err, out
from solbench.errors import UserError
from solbench.exec import Placement
from solbench.spec import OpSpec

GPUS_HELP = "Spread the work over this machine's GPUs: all, or nvidia-smi indices like 0,2,3 (a worker per GPU)."
EXECUTOR_HELP = "local (this machine) or ray (a Ray cluster; pip install 'solbench\\[ray]')."   # \\[ : rich markup would eat [ray]
RAY_ADDRESS_HELP = ("Ray cluster: auto (the one started on this machine, or $RAY_ADDRESS) or HOST:PORT of its head "
                    "node; without it, a private Ray instance on this machine.")
ACCELERATORS_HELP = ("Ray: run the sweep on each of these GPU models (Ray accelerator types, e.g. H100,A100); one "
                     "results file per model under --out.")
RETRIES_HELP = "Ray: how often a task whose worker or node was lost runs again before its records are errors."
RESUME_HELP = ("Results file of an earlier or killed run: its records of the same spec and device are not measured "
               "again; the output merges them and goes back into that file (unless --json names another).")


def with_placement(config: pipeline.RunConfig, gpus: Optional[str], executor: str, ray_address: Optional[str],
                   accelerators: Optional[str], retries: int, resume: Optional[Path]) -> pipeline.RunConfig:
    """The request with its scale-out flags, checked (before any spec is loaded or worker started)."""
    models = csv_list(accelerators) or ()
    if accelerators is not None and not models:
        raise UserError(f"expected GPU models like H100,A100, got '{accelerators}'", field="--accelerators")
    placement = Placement(executor=executor.strip().lower(), gpus=gpus, ray_address=ray_address,
                          accelerators=models, retries=retries)
    placement.check(config.device, config.isolate)
    if resume is not None and not models and not resume.is_file():
        raise UserError(f"'{resume}' is not a results file", field="--resume")
    return dataclasses.replace(config, placement=placement, resume=resume)


def describe_resume(prepared: pipeline.Prepared) -> None:
    if prepared.resumed is not None:
        out.print(f"[bold]resume[/] {prepared.config.resume}: {prepared.resumed.describe()}; "
                  f"{sum(p.size for p in prepared.plans)} to measure")


def run_fleet(config: pipeline.RunConfig, specs: dict[str, OpSpec], out_dir: Path, json_path: Optional[Path],
              csv_path: Optional[Path]) -> None:
    """--accelerators: every model's sweep at once, each to <out>/<model>.json."""
    for flag, given in (("--json", json_path), ("--csv", csv_path)):
        if given is not None:
            raise UserError(f"'{given}': with --accelerators each model's results go to <out>/<model>.json "
                            f"(--out {out_dir})", field=flag)
    with err.status("probing a node of each GPU model..."):
        members = fleet.prepare(config, specs, out_dir)
    for m in members:
        info, peaks = m.prepared.info, m.prepared.peaks
        out.print(f"[bold]{m.model}[/]: {info.name} on {info.host}, peaks {peaks.name} ({peaks.source}); "
                  f"{m.prepared.total} records -> {m.path}")
        for w in m.prepared.warnings:
            out.print(f"[bold yellow]WARNING[/] {m.model}: {w}")
        describe_resume(m.prepared)
    command = " ".join(["solbench"] + [shlex.quote(a) for a in sys.argv[1:]])
    with ui.make_progress(err) as progress:
        task = progress.add_task("measuring", total=sum(m.prepared.total for m in members), last="")

        def on_record(model: str, r: results.Record) -> None:
            progress.update(task, advance=1, last=f"{model} {r.op} {r.case} {r.dtype} {r.impl}: {r.status}")

        runs = fleet.execute(members, on_record, command)
    for m, run in runs:
        out.print(f"[bold]{m.model}[/] ({run.device})")
        for table in ui.op_tables(run.records):
            out.print(table)
        for line in ui.summary_lines(run.records):
            out.print(line)
    out.print("results: " + ", ".join(str(m.path) for m, _ in runs))
    if any(r.status in ("failed", "error") for _, run in runs for r in run.records):
        raise typer.Exit(1)
