"""One run, start to end: plan -> execute -> a Run, written as a results file.

`solbench run`, `solbench serve` and scripts all go through here, so a run asked for over HTTP is
planned, validated and measured exactly as one typed at the terminal. Nothing here prints; callers
pass callbacks to follow progress.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from solbench import peaks as peaks_mod
from solbench import plan, results
from solbench.exec import Executor, make_executor
from solbench.hardware import DeviceInfo
from solbench.peaks import Peaks
from solbench.job import Probe, ProbeJob, RecordReady, SpecSource, WorkerJob
from solbench.measure import TimingConfig
from solbench.results import Record, Run
from solbench.spec import OpSpec

DEFAULT_RESULTS_DIR = Path("results")


@dataclass(frozen=True)
class RunConfig:
    selection: plan.Selection = field(default_factory=plan.Selection)
    device: str = "auto"                 # auto | cpu | cuda | cuda:N
    peaks: str = "datasheet"             # datasheet | measured | at-clock | path to a table
    timing: TimingConfig = field(default_factory=TimingConfig)
    timeout_s: float = 900.0             # per call (check + time one implementation on one case)
    fail_fast: bool = False
    isolate: bool = True                 # worker processes (crash and hang isolation)
    seed: int = 0
    cache_dir: Path = DEFAULT_RESULTS_DIR / "cache"

    def to_json(self) -> dict[str, Any]:
        """The results file's `config`: the request's fields, flat (docs/RESULTS.md)."""
        d = dataclasses.asdict(self)
        d.update(d.pop("selection"))
        d.update(d.pop("timing"))
        d["cache_dir"] = str(self.cache_dir)
        return d


@dataclass(frozen=True)
class Prepared:
    """A planned run: the device found, the peaks chosen, every record it will produce decided."""

    config: RunConfig
    probe: Probe
    peaks: Peaks
    warnings: tuple[str, ...]            # about the peaks (e.g. an unknown GPU)
    plans: tuple[plan.OpPlan, ...]
    executor: Executor

    @property
    def info(self) -> DeviceInfo:
        return self.probe.info

    @property
    def total(self) -> int:
        return sum(p.size for p in self.plans)


def prepare(config: RunConfig, specs: dict[str, OpSpec], executor: Executor | None = None) -> Prepared:
    """Probe the device, check the request against what it can run, resolve the peaks, plan."""
    selected = plan.select_ops(specs, config.selection.ops)
    executor = executor or make_executor(config.isolate, config.timeout_s)
    probe = executor.probe(ProbeJob(config.device, config.cache_dir))
    plan.check_flags(selected, config.selection, probe.info)
    peaks, warnings = peaks_mod.resolve(probe.info, config.peaks, config.cache_dir, probe.cpu_peaks)
    plans = plan.plan_ops(selected, config.selection, probe.info)
    return Prepared(config, probe, peaks, tuple(warnings), tuple(plans), executor)


def execute(prepared: Prepared, on_record: Callable[[Record], None] | None = None, command: str = "") -> Run:
    """Run every plan through the executor; a Run with speedups filled in."""
    config = prepared.config
    records: list[Record] = []
    for p in prepared.plans:
        if not p.units:
            continue
        job = WorkerJob(SpecSource.of(p.spec), p.units, prepared.probe.device, prepared.info, prepared.peaks,
                        config.timing, config.seed)
        for event in prepared.executor.run(job):
            if isinstance(event, RecordReady):
                records.append(event.record)
                if on_record:
                    on_record(event.record)
        if config.fail_fast and any(r.status in ("failed", "error") for r in records):
            break
    records += plan.skipped_records(list(prepared.plans), config.selection, prepared.info)
    results.fill_speedups(records, config.selection.baseline)
    return Run(env=environment(prepared.info), peaks=prepared.peaks.to_json(), config=config.to_json(),
               records=records, command=command)


def environment(info: DeviceInfo) -> dict[str, Any]:
    env = info.to_json()
    env.update(solbench=results.solbench_version(), git_sha=results.git_sha(),
               telemetry=info.clocks is not None, cuda_skipped=info.kind == "cpu")
    return env


def write(run: Run, out_dir: Path, json_path: Path | None = None, csv_path: Path | None = None) -> list[Path]:
    """The results file under out_dir (named by run id), plus the copies asked for."""
    paths = [results.write_run(run, out_dir / f"{run.run_id}.json")]
    if json_path:
        paths.append(results.write_run(run, json_path))
    if csv_path:
        paths.append(results.write_csv(run.records, csv_path))
    return paths
