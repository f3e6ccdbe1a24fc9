"""Plan a run (ops x cases x implementations) and execute it, one worker process per op.

The runner never initialises CUDA itself: device probing and every op run in spawned workers, so a
kernel that crashes or poisons its CUDA context fails its own op's records and the run goes on.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from solbench import hardware
from solbench.dtypes import precision, supported_on
from solbench.errors import UserError
from solbench.hardware import DeviceInfo, Peaks
from solbench.results import Record
from solbench.spec import OpSpec
from solbench.timing import TimingConfig
from solbench.worker import Case, WorkerJob, call_specs, run_job

DEFAULT_RESULTS_DIR = Path("results")


@dataclass(frozen=True)
class RunConfig:
    ops: tuple[str, ...] = ("all",)
    dtypes: tuple[str, ...] | None = None
    shape: dict[str, int] | None = None
    impls: tuple[str, ...] | None = None
    baseline: str | None = None
    quick: bool = False
    device: str = "auto"                 # auto | cpu | cuda | cuda:N
    peaks: str = "datasheet"             # datasheet | measured | path to a table
    timing: TimingConfig = field(default_factory=TimingConfig)
    timeout_s: float = 900.0             # per op
    fail_fast: bool = False
    isolate: bool = True                 # one worker process per op
    seed: int = 0
    cache_dir: Path = DEFAULT_RESULTS_DIR / "cache"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cache_dir"] = str(self.cache_dir)
        d.update(d.pop("timing"))
        return d


@dataclass(frozen=True)
class OpPlan:
    spec: OpSpec
    cases: tuple[Case, ...]
    calls: tuple[str, ...]

    @property
    def units(self) -> int:
        return len(self.cases) * len(self.calls)


@dataclass(frozen=True)
class Probe:
    info: DeviceInfo
    device: str                          # resolved: cpu or cuda:N
    cpu_peaks: Peaks | None = None


# ---------------------------------------------------------------- planning (pure)

def select_ops(specs: dict[str, OpSpec], names: Iterable[str]) -> list[OpSpec]:
    names = [n.strip() for n in names if n.strip()]
    if not names or names == ["all"]:
        return list(specs.values())
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise UserError(f"unknown op '{unknown[0]}' (known: {', '.join(sorted(specs))})", field="--ops")
    return [specs[n] for n in dict.fromkeys(names)]


def expand_cases(spec: OpSpec, config: RunConfig, info: DeviceInfo) -> list[Case]:
    cases = list(spec.cpu_cases if info.kind == "cpu" else spec.cases)
    if config.shape:
        overrides = {k: v for k, v in config.shape.items() if k in spec.params}
        cases = [{**cases[0], **overrides}]
    elif config.quick:
        cases = cases[:1]
    dtypes = [d for d in spec.dtypes if config.dtypes is None or d in config.dtypes]
    cc = info.compute_capability
    runnable = [d for d in dtypes if supported_on(precision(d), info.kind, cc) is None]
    return [Case(spec.op, dict(c), d) for c in cases for d in runnable]


def unsupported_dtypes(spec: OpSpec, config: RunConfig, info: DeviceInfo) -> list[tuple[str, str]]:
    dtypes = [d for d in spec.dtypes if config.dtypes is None or d in config.dtypes]
    reasons = [(d, supported_on(precision(d), info.kind, info.compute_capability)) for d in dtypes]
    return [(d, r) for d, r in reasons if r]


def check_flags(specs: list[OpSpec], config: RunConfig, info: DeviceInfo) -> None:
    """Flags that name things no selected op has are user errors, caught before anything runs."""
    if config.dtypes:
        for d in config.dtypes:
            reason = supported_on(precision(d), info.kind, info.compute_capability)
            if reason:
                raise UserError(f"dtype '{d}' cannot run on {info.name}: {reason}", field="--dtypes")
        if not any(d in s.dtypes for s in specs for d in config.dtypes):
            raise UserError(f"no selected op has dtypes {list(config.dtypes)}", field="--dtypes")
    if config.shape:
        known = {p for s in specs for p in s.params}
        unknown = sorted(set(config.shape) - known)
        if unknown:
            raise UserError(f"no selected op has parameter '{unknown[0]}' (have: {', '.join(sorted(known))})",
                            field="--shape")
    names = {c.name for s in specs for c in s.baselines + s.impls}
    for flag, wanted in (("--impls", config.impls or ()), ("--baseline", (config.baseline,) if config.baseline else ())):
        for w in wanted:
            if w not in names:
                raise UserError(f"no selected op has an implementation named '{w}' (have: {', '.join(sorted(names))})",
                                field=flag)


def plan_ops(specs: list[OpSpec], config: RunConfig, info: DeviceInfo) -> list[OpPlan]:
    plans = []
    for spec in specs:
        names = [c.name for c, _ in call_specs(spec, tuple(c.name for c in spec.baselines + spec.impls))]
        if config.impls:
            # The reference baseline always runs: without it there is no speedup to report.
            keep = set(config.impls) | {config.baseline or spec.baselines[0].name}
            names = [n for n in names if n in keep]
        plans.append(OpPlan(spec, tuple(expand_cases(spec, config, info)), tuple(names)))
    return plans


def skipped_records(plans: list[OpPlan], config: RunConfig, info: DeviceInfo) -> list[Record]:
    """Records for dtypes this device cannot run, so the results file says what was left out."""
    out = []
    for p in plans:
        for dtype, reason in unsupported_dtypes(p.spec, config, info):
            for c, kind in call_specs(p.spec, p.calls):
                out.append(Record(op=p.spec.op, case="*", params={}, dtype=dtype, impl=c.name, kind=kind,
                                  status="skipped", message=reason))
    return out


def resolve_peaks(probe: Probe, mode: str, cache_dir: Path) -> tuple[Peaks, list[str]]:
    info = probe.info
    if info.kind == "cpu":
        if probe.cpu_peaks is None:
            raise RuntimeError("CPU peaks were not measured")
        return probe.cpu_peaks, []
    # at-clock = datasheet peaks; each record's compute peak is rescaled in the worker
    mode = "datasheet" if mode == "at-clock" else mode
    if mode not in ("datasheet", "measured"):
        return hardware.load_peaks_file(Path(mode)), []
    if mode == "measured":
        from solbench.calibrate import measured_peaks  # noqa: PLC0415 (only needed on request)

        return measured_peaks(info, cache_dir), []
    table = hardware.match_table(info, hardware.load_gpu_tables())
    if table is not None:
        return table.peaks(), []
    peaks = hardware.derived_peaks(info)
    return peaks, [f"'{info.name}' ({info.sm_count} SMs) is in no peak table: peaks DERIVED from NVML clocks "
                   f"({peaks.notes}). Add a table under specs/gpus/ or pass --peaks FILE."]


# ---------------------------------------------------------------- execution

def _worker_main(target: str, payload: Any, q: Any) -> None:
    """Entry point of every worker process: run `target` and send its messages back."""
    def emit(kind: str, data: Any) -> None:
        q.put((kind, data))

    try:
        if target == "probe":
            emit("probe", probe_here(*payload))
        else:
            run_job(payload, emit)
        emit("done", None)
    except BaseException as exc:  # report, then die: the parent turns this into error records
        emit("fatal", f"{type(exc).__name__}: {exc}")


def probe_here(device: str, cache_dir: Path) -> Probe:
    import torch

    if device == "auto":
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    elif device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"device '{device}' asked for, but torch sees no CUDA device", field="--device")
        device = device if ":" in device else "cuda:0"
        index = int(device.split(":")[1])
        if index >= torch.cuda.device_count():
            raise UserError(f"device '{device}' does not exist ({torch.cuda.device_count()} CUDA devices)",
                            field="--device")
    elif device != "cpu":
        raise UserError(f"unknown device '{device}' (use auto, cpu, cuda or cuda:N)", field="--device")
    info = hardware.probe_device(device)
    cpu = hardware.cpu_peaks(cache_dir, info) if info.kind == "cpu" else None
    return Probe(info, device, cpu)


def probe(config: RunConfig) -> Probe:
    messages = _run_in_worker("probe", (config.device, config.cache_dir), config.isolate, 600.0, lambda *_: None)
    for kind, data in messages:
        if kind == "probe":
            return data
        if kind == "fatal":
            raise UserError(f"probing the device failed: {data}")
    raise UserError("probing the device failed: the worker died without an answer")


def execute(plans: list[OpPlan], config: RunConfig, probe_result: Probe, peaks: Peaks,
            on_event: Callable[[str, Any], None]) -> list[Record]:
    """Run each op's plan; on_event('start'|'record'|'op_done', ...) drives the progress display."""
    records: list[Record] = []
    for p in plans:
        if not p.cases:
            continue
        job = WorkerJob(p.spec.path, p.cases, p.calls, probe_result.device, probe_result.info, peaks,
                        config.timing, config.seed)
        got: list[Record] = []

        def relay(kind: str, data: Any) -> None:
            if kind == "record":
                rec = Record.from_json(data)
                got.append(rec)
                on_event("record", rec)

        messages = _run_in_worker("job", job, config.isolate, config.timeout_s, relay)
        failure = next((d for k, d in messages if k in ("fatal", "died", "timeout")), None)
        records += got + _missing_records(p, got, failure)
        on_event("op_done", p.spec.op)
        if config.fail_fast and any(r.status in ("failed", "error") for r in records):
            break
    return records


def _missing_records(p: OpPlan, got: list[Record], failure: str | None) -> list[Record]:
    done = {(r.case, r.dtype, r.impl) for r in got}
    message = f"worker stopped before this ran: {failure or 'no reason given'}"
    out = []
    for case in p.cases:
        for c, kind in call_specs(p.spec, p.calls):
            if (case.label, case.dtype, c.name) not in done:
                out.append(Record(op=p.spec.op, case=case.label, params=dict(case.params), dtype=case.dtype,
                                  impl=c.name, kind=kind, status="error", message=message))
    return out


def _run_in_worker(target: str, payload: Any, isolate: bool, timeout_s: float,
                   relay: Callable[[str, Any], None]) -> list[tuple[str, Any]]:
    messages: list[tuple[str, Any]] = []

    def keep(kind: str, data: Any) -> None:
        messages.append((kind, data))
        relay(kind, data)

    if not isolate:
        _worker_main(target, payload, _ListQueue(keep))
        return messages
    ctx = mp.get_context("spawn")
    # a pipe, not a Queue: Connection.send has written the message when it returns, while
    # Queue.put leaves it to a feeder thread that a crashing worker (SIGSEGV) kills first, losing records
    # measured before the crash.
    reader, writer = ctx.Pipe(duplex=False)
    q = _PipeReader(reader)
    proc = ctx.Process(target=_worker_main, args=(target, payload, _PipeWriter(writer)), daemon=True)
    proc.start()
    writer.close()
    deadline = time.monotonic() + timeout_s
    finished = False
    while not finished:
        try:
            kind, data = q.get(timeout=0.2)
            keep(kind, data)
            finished = kind in ("done", "fatal")
        except queue_mod.Empty:
            if not proc.is_alive():
                _drain(q, keep)
                if not any(k in ("done", "fatal") for k, _ in messages):
                    keep("died", _exit_reason(proc.exitcode))
                finished = True
            elif time.monotonic() > deadline:
                proc.kill()
                keep("timeout", f"timed out after {timeout_s:.0f} s (--timeout)")
                finished = True
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()
    return messages


def _drain(q: Any, keep: Callable[[str, Any], None]) -> None:
    while True:
        try:
            keep(*q.get(timeout=0.5))
        except queue_mod.Empty:
            return


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        import signal

        try:
            return f"worker process killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"worker process killed by signal {-code}"
    return f"worker process exited with code {code}"


class _PipeWriter:
    """The worker's end of the pipe, with the queue interface _worker_main uses."""

    def __init__(self, conn: Any):
        self.conn = conn

    def put(self, item: tuple[str, Any]) -> None:
        self.conn.send(item)


class _PipeReader:
    """The parent's end: get(timeout) like a queue; raises queue.Empty on no data or EOF."""

    def __init__(self, conn: Any):
        self.conn = conn

    def get(self, timeout: float) -> tuple[str, Any]:
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):  # the worker is gone and everything it sent has been read
            time.sleep(min(timeout, 0.05))
        raise queue_mod.Empty


class _ListQueue:
    """The queue interface _worker_main needs, delivering straight to a callback (no isolation)."""

    def __init__(self, sink: Callable[[str, Any], None]):
        self.sink = sink

    def put(self, item: tuple[str, Any]) -> None:
        self.sink(*item)

