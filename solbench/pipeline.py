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
from solbench import ceiling_recheck, noise_model, plan, results, resume
from solbench import counting
from solbench.exec import Executor, Placement, device_infos, make_executor, run_all
from solbench.exec.base import device_fingerprint
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
    placement: Placement = field(default_factory=Placement)   # --gpus, --executor ray, ... (exec/placement.py)
    resume: Path | None = None           # --resume: a results file whose records are not measured again
    counters: bool = False               # --counters: after all timing, an Nsight Compute pass per record
    ncu: str | None = None               # --ncu: that ncu (default: PATH, /usr/local/cuda/bin, ...)

    def to_json(self) -> dict[str, Any]:
        """The results file's `config`: the request's fields, flat (docs/RESULTS.md)."""
        d = dataclasses.asdict(self)
        d.update(d.pop("selection"))
        d.update(d.pop("timing"))
        d.update(d.pop("placement"))
        d["cache_dir"] = str(self.cache_dir)
        d["resume"] = str(self.resume) if self.resume else None
        return d


@dataclass(frozen=True)
class Prepared:
    """A planned run: the device found, the peaks chosen, every record it will produce decided."""

    config: RunConfig
    probe: Probe
    peaks: Peaks
    warnings: tuple[str, ...]            # about the peaks (e.g. an unknown GPU)
    plans: tuple[plan.OpPlan, ...]       # what will be measured (less what --resume reuses)
    executor: Executor
    devices: tuple[DeviceInfo, ...] = ()             # every device it measures on (--gpus: one per GPU)
    resumed: resume.Resumed | None = None
    order: tuple[resume.Key, ...] = ()               # every planned record, in plan order

    @property
    def info(self) -> DeviceInfo:
        return self.probe.info

    @property
    def total(self) -> int:
        """How many records `execute` reports (and writes): the measured ones and the skipped dtypes."""
        return sum(p.size for p in self.plans) + len(self.skipped())

    def skipped(self) -> list[Record]:
        return plan.skipped_records(list(self.plans), self.config.selection, self.info)


def prepare(config: RunConfig, specs: dict[str, OpSpec], executor: Executor | None = None) -> Prepared:
    """Probe the device, check the request against what it can run, resolve the peaks, plan; with
    --resume, leave out what the earlier run already measured on the same kind of device."""
    selected = plan.select_ops(specs, config.selection.ops)
    config.placement.check(config.device, config.isolate)
    counting.require_ncu(config.counters, config.ncu)     # before anything starts: say how to get ncu
    prior = resume.load(config.resume, config.to_json()) if config.resume else None
    executor = executor or make_executor(config.isolate, config.timeout_s, config.placement, config.peaks)
    probe = executor.probe(ProbeJob(config.device, config.cache_dir, tuple(SpecSource.of(s) for s in selected),
                                    config.seed, config.selection.dtypes))
    plan.check_flags(selected, config.selection, probe.info)
    counting.require_cuda(config.counters, probe.info)
    peaks, warnings = peaks_mod.resolve(probe.info, config.peaks, config.cache_dir, probe.cpu_peaks)
    warnings = list(getattr(executor, "warnings", None) or warnings)   # one per GPU, where there are several
    plans = plan.plan_ops(selected, config.selection, probe.info)
    devices = device_infos(executor, probe)
    order = tuple(resume.planned_keys(plans))
    resumed = None
    if prior is not None:
        plans, resumed = resume.split(plans, prior, {device_fingerprint(d) for d in devices})
    return Prepared(with_noise_model(config, probe.info), probe, peaks, tuple(warnings), tuple(plans), executor,
                    devices, resumed, order)


def with_noise_model(config: RunConfig, info: DeviceInfo) -> RunConfig:
    """The request with the device's run-to-run noise model (measured by `solbench noise` and stored beside
    the calibrations, else the default of its kind), unless the caller already chose one."""
    if config.timing.run_to_run is not None:
        return config
    model = noise_model.model_for(info, peaks_mod.calibration_dir_for(config.cache_dir))
    return dataclasses.replace(config, timing=dataclasses.replace(config.timing, run_to_run=model))


def execute(prepared: Prepared, on_record: Callable[[Record], None] | None = None, command: str = "",
            checkpoint: Callable[[Run], None] | None = None) -> Run:
    """Run every plan through the executor as one batch; a Run with speedups filled in.

    `checkpoint(run)` gets the run so far after every record (measured, reused and kept by --resume),
    so a results file written there loses nothing already measured when this process dies.
    """
    config = prepared.config
    jobs = [WorkerJob(SpecSource.of(p.spec), p.units, prepared.probe.device, prepared.info, prepared.peaks,
                      config.timing, config.seed) for p in prepared.plans if p.units]
    sizes = [p.size for p in prepared.plans if p.units]
    skipped = prepared.skipped()
    shell = _shell(prepared, command)
    measured: list[Record] = []
    counts = [0] * len(jobs)
    stream = run_all(prepared.executor, jobs)
    try:
        for index, event in stream:
            if not isinstance(event, RecordReady):
                continue
            measured.append(event.record)
            counts[index] += 1
            if on_record:
                on_record(event.record)
            if checkpoint:
                checkpoint(_assemble(shell, prepared, measured, skipped))
            if config.fail_fast and counts[index] == sizes[index] and _failing(measured):
                break   # once the failing job is complete, as a sequential run stops after the op
    finally:
        close = getattr(stream, "close", None)
        if close:
            close()     # a scale-out executor stops its workers
    if config.counters:                  # a second pass, after every timed measurement has finished
        counting.attach(measured, {p.spec.op: p.spec for p in prepared.plans},
                        counting.require_ncu(True, config.ncu), prepared.probe.device, config.seed,
                        config.timeout_s * max(1, len(measured)))
    shell = _recheck_cpu_ceiling(shell, prepared, measured)
    for r in skipped:                    # reported too, so a progress bar ends at the records written
        if on_record:
            on_record(r)
    return _assemble(shell, prepared, measured, skipped)


def _recheck_cpu_ceiling(shell: Run, prepared: Prepared, measured: list[Record]) -> Run:
    """A CPU run: before a record stays invalid for beating the cached bandwidth ceiling, that ceiling is
    measured again in this process, once, and the records are scored against the higher figure
    (ceiling_recheck.py). Here, after every worker has finished, the measurement competes with none."""
    cache_file = peaks_mod.cpu_peaks_path(prepared.config.cache_dir, prepared.info)
    rechecked = ceiling_recheck.recheck_run(measured, prepared.peaks, prepared.info, cache_file)
    return shell if rechecked is None else dataclasses.replace(shell, peaks=rechecked.to_json())


def _failing(records: list[Record]) -> bool:
    return any(r.status in ("failed", "error") for r in records)


def _shell(prepared: Prepared, command: str) -> Run:
    """The run without records; a resumed run keeps the id and creation time of the file it resumes."""
    prior = prepared.resumed.prior if prepared.resumed else None
    stamp = {"created": prior.created, "run_id": prior.run_id} if prior else {}
    return Run(env=environment(prepared.info, prepared.devices), peaks=prepared.peaks.to_json(),
               config=config_json(prepared), records=[], command=command, **stamp)


def _assemble(shell: Run, prepared: Prepared, measured: list[Record], skipped: list[Record]) -> Run:
    """Records in plan order whatever order they finished in, then the skipped ones, then those kept."""
    rank = {k: i for i, k in enumerate(prepared.order)}
    reused = list(prepared.resumed.reused) if prepared.resumed else []
    done = sorted(measured + reused, key=lambda r: rank.get(r.key, len(rank)))
    skipped_keys = {r.key for r in skipped}
    kept = [r for r in prepared.resumed.kept if r.key not in skipped_keys] if prepared.resumed else []
    records = done + skipped + kept
    results.fill_speedups(records, prepared.config.selection.baseline)
    return dataclasses.replace(shell, records=records)


def config_json(prepared: Prepared) -> dict[str, Any]:
    """The results file's `config`: `peaks` is the source really used (a CPU's measured ceilings even when
    --peaks said datasheet), `peaks_requested` what was asked for when that differs."""
    out = prepared.config.to_json()
    if prepared.peaks.source != out["peaks"]:
        out["peaks_requested"], out["peaks"] = out["peaks"], prepared.peaks.source
    return out


def environment(info: DeviceInfo, devices: tuple[DeviceInfo, ...] = ()) -> dict[str, Any]:
    env = info.to_json()
    env.update(solbench=results.solbench_version(), git_sha=results.git_sha(),
               telemetry=info.clocks is not None, cuda_skipped=info.kind == "cpu")
    if len(devices) > 1:   # --gpus: the first describes the run, each record names its own
        env["devices"] = [{"device": d.name, "device_index": d.index, "device_fingerprint": device_fingerprint(d),
                           "host": d.host} for d in devices]
    return env


def write(run: Run, out_dir: Path, json_path: Path | None = None, csv_path: Path | None = None) -> list[Path]:
    """The results file under out_dir (named by run id), plus the copies asked for."""
    paths = [results.write_run(run, out_dir / f"{run.run_id}.json")]
    if json_path:
        paths.append(results.write_run(run, json_path))
    if csv_path:
        paths.append(results.write_csv(run.records, csv_path))
    return paths
