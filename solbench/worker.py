"""One job, in one process: make inputs, check every implementation, time the correct ones, score them.

An executor (solbench/exec/) runs this in a worker process, so a kernel that crashes its CUDA
context takes down only its own worker. Everything here talks to torch; nothing here prints. What it
says goes out as typed events (solbench/job.py): `CallStarted` before each call, so a worker that dies
names its culprit, and `RecordReady` after.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from solbench import check, inputs, noise_model, preflight, sol, stats, telemetry, traps
from solbench.dtypes import matmul_precision, precision
from solbench.integrity import Guard
from solbench.job import CallStarted, Case, Event, Probe, ProbeJob, RecordReady, WorkerJob
from solbench.measure import Measurement, TimerCache, measure
from solbench.measure.nvtx import Markers
from solbench.peaks import Peaks
from solbench.registry import resolve
from solbench.results import Record
from solbench.spec import CallSpec, OpSpec
from solbench.telemetry import ClockMonitor

INPUT_SETS = 3   # fresh random inputs per case: correctness on each, timing rotates through them

@dataclass
class WorkerState:
    """What one worker carries from call to call: the timer snapshot, the clock monitor, the timer
    calibrations (the events tare is measured once per worker), a poisoned context."""

    guard: Guard
    monitor: ClockMonitor
    poisoned: str | None = None      # set once a CUDA error left the context unusable
    timer_cache: TimerCache = field(default_factory=TimerCache)

    @classmethod
    def open(cls, kind: str = "cpu", index: int = 0) -> "WorkerState":
        # Snapshot the timers and checkers before any implementation module is imported; the noise model
        # too: widening the run-to-run spread stamped on records would hide a regression from the gate.
        here = sys.modules[__name__]
        return cls(Guard.capture(here, check, stats, telemetry, inputs, traps, sol, noise_model),
                   ClockMonitor.open(kind, index))


def probe_here(job: ProbeJob) -> Probe:
    """Which device is `job.device`, and (on a CPU) its measured ceilings."""
    import torch

    from solbench import hardware, peaks
    from solbench.errors import UserError

    device = job.device
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
    cpu = peaks.cpu_peaks(job.cache_dir, info) if info.kind == "cpu" else None
    preflight.check_specs(job.specs, info, device, job.seed, job.dtypes)
    return Probe(info, device, cpu)


def iter_job(job: WorkerJob) -> Iterator[Event]:
    """Every event of the job, in order; the caller relays them (a pipe, a queue, a generator)."""
    import torch

    spec = job.spec.load()
    if job.device != "cpu":
        torch.cuda.set_device(torch.device(job.device))
    state = WorkerState.open(job.info.kind, job.info.index)
    markers = _markers(job)
    try:
        with markers.range(f"op {spec.op}"):
            for unit in job.units:
                with markers.range(f"case {unit.case.label} {unit.case.dtype}"):
                    yield from run_case(spec, unit.case, unit.calls, job, state)
    finally:
        state.monitor.close()


def _markers(job: WorkerJob) -> Markers:
    """--nvtx: ranges per op / case / implementation (and, in measure, per timed call); CUDA only."""
    return Markers(job.timing.nvtx and job.device != "cpu")


def run_case(spec: OpSpec, case: Case, names: tuple[str, ...], job: WorkerJob,
             state: WorkerState) -> Iterator[Event]:
    calls = [(c, kind) for c, kind in spec.calls if c.name in names]
    env = case.env()
    try:
        base = _base_record(spec, case, job, env)
    except Exception as exc:  # a formula that cannot be evaluated for this case
        base = dict(op=spec.op, case=case.label, params=dict(case.params), dtype=case.dtype)
        yield from _all_failed(base, calls, "error", f"counting FLOPs/bytes: {_short(exc)}")
        return
    if state.poisoned:
        yield from _all_failed(base, calls, "error", f"not run: {state.poisoned}")
        return
    try:
        data = _case_data(spec, case, job, env)
    except Exception as exc:  # the case itself cannot be set up: every call gets the same error
        yield from _all_failed(base, calls, "error", f"setting up inputs/reference: {_short(exc)}")
        return
    tol = spec.tolerance[case.dtype]
    if check.zeros_would_pass(data.refs[0], tol):
        yield from _all_failed(base, calls, "error", f"{spec.path.name}: field 'tolerance.{case.dtype}': "
                                                     f"{preflight.tolerance_text(tol)} would accept an all-zero "
                                                     f"output on this case: tighten it")
        return
    for c, kind in calls:
        yield CallStarted(case.label, case.dtype, c.name)
        if state.poisoned:
            yield RecordReady(new_record(base, c.name, kind, "error", f"not run: {state.poisoned}"))
            continue
        with _markers(job).range(f"impl {c.name}"):
            rec = run_call(spec, case, job, c, kind, data, base, state)
        if job.device != "cpu":
            _check_context(state, c.name, rec)
        yield RecordReady(rec)


def new_record(base: dict[str, Any], impl: str, kind: str, status: str = "ok", message: str = "") -> Record:
    """A record of one call from the case's shared fields; lists are copied so records never share them."""
    fields = {k: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    return Record(**fields, impl=impl, kind=kind, status=status, message=message)


def _all_failed(base: dict[str, Any], calls: list[tuple[CallSpec, str]], status: str,
                message: str) -> Iterator[Event]:
    for c, kind in calls:
        yield CallStarted(base["case"], base["dtype"], c.name)
        yield RecordReady(new_record(base, c.name, kind, status, message))


def _case_data(spec: OpSpec, case: Case, job: WorkerJob, env: dict[str, Any]) -> inputs.CaseData:
    sets = [inputs.make_inputs(spec, case, job.device, _seed(job, i)) for i in range(INPUT_SETS)]
    with matmul_precision(case.dtype):
        refs = [inputs.run_reference(spec, s, env) for s in sets]
    return inputs.CaseData(sets, refs, env)


def _seed(job: WorkerJob, i: int) -> int:
    return job.seed * 1000 + i


def _check_context(state: WorkerState, name: str, rec: Record) -> None:
    """After a CUDA error the context is sticky-broken: every later call would fail misleadingly."""
    import torch

    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception as exc:
        state.poisoned = (f"the CUDA context is unusable after '{name}' raised a CUDA error "
                          f"({_short(exc)}); the rest of this op cannot run in this worker")
        if rec.status != "error":
            rec.status, rec.message = "error", f"CUDA error after the call returned: {_short(exc)}"


def run_call(spec: OpSpec, case: Case, job: WorkerJob, c: CallSpec, kind: str, data: inputs.CaseData,
             base: dict[str, Any], state: WorkerState) -> Record:
    rec = new_record(base, c.name, kind)
    if c.device == "cuda" and job.device == "cpu":
        rec.status, rec.message = "skipped", "CUDA implementation: no CUDA device here"
        return rec
    try:
        fn = resolve(c)
    except Exception as exc:
        rec.status, rec.message = "error", f"cannot load '{c.fn}': {_short(exc)}"
        return rec
    if _tampered(rec, state, "importing it"):
        return rec
    call = traps.BoundCall(spec, case, job.device, job.seed, fn, c.resolved_kwargs(data.env))
    state.monitor.reset()
    try:
        with matmul_precision(case.dtype):
            m = _check_and_time(call, data, rec, job, state)
    except Exception as exc:
        rec.status, rec.message = "error", _short(exc, tb=True)
        return rec
    finally:
        _restore_inputs(data)
    if m is not None:
        _record_measurement(rec, m, job, state)
    return rec


def _record_measurement(rec: Record, m: Measurement, job: WorkerJob, state: WorkerState) -> None:
    rec.timer, rec.samples_s, rec.time_s = m.timer, m.samples_s, m.time_json()
    rec.warnings += m.notes
    rec.telemetry = {**state.monitor.summary(m.throttled), "flush_bytes": m.flush_bytes,
                     "flush_mode": job.timing.flush_mode if m.flush_bytes and job.info.kind == "cuda" else None,
                     "cross_check": m.cross_check, "timer_correction": m.correction,
                     "noise": m.noise.to_json() if m.noise else None}
    if m.throttled:
        rec.warnings.append("clock throttling persisted during this measurement (see telemetry)")
    if job.timing.peaks_at_clock:
        _rescore_at_clock(rec, job, state.monitor.observed_sm_mhz())
    score_record(rec, m.stats.median, job.peaks, job.info.flushed_cache_bytes)
    if m.invalid:
        rec.status, rec.message = "invalid", m.invalid


def _check_and_time(call: traps.BoundCall, data: inputs.CaseData, rec: Record, job: WorkerJob,
                    state: WorkerState) -> Measurement | None:
    """Correctness on fresh sets, timing, then the checks that catch caching; None when a check failed."""
    verdict = check.CheckResult.worst([traps.first_call(call, s, p, ref) for s, p, ref in
                                       zip(data.sets, data.pristine, data.refs)])
    rec.correct = verdict.ok
    rec.max_abs_err, rec.max_rel_err, rec.norm_rel_err = verdict.max_abs_err, verdict.max_rel_err, verdict.norm_rel_err
    if _tampered(rec, state, "its first calls"):
        return None
    if not verdict.ok:
        rec.status, rec.message = "failed", verdict.message
        return None
    m, timed = _time_call(call, data, job, state)
    if _tampered(rec, state, "timing"):
        return None
    problem = traps.after_timing(call, data, timed) or traps.stale_cache(call, data)
    if _tampered(rec, state, "the cache probes"):
        return None
    if problem:
        rec.status, rec.correct, rec.message = "failed", False, problem
        return None
    return m


def _time_call(call: traps.BoundCall, data: inputs.CaseData, job: WorkerJob,
               state: WorkerState) -> tuple[Measurement, dict[str, list[Any]]]:
    """Time the call rotating through the input sets; keep the first and last output of each set."""
    n = len(data.sets)
    timed: dict[str, list[Any]] = {"first": [None] * n, "last": [None] * n}

    def run(i: int) -> None:
        out = call.fn(*data.sets[i % n], **call.kwargs)
        k = i % n
        if timed["first"][k] is None:
            timed["first"][k] = out
        timed["last"][k] = out

    m = measure(run, job.info.kind, job.timing, job.info.flushed_cache_bytes, (job.info.clocks or {}).get("sm_max_mhz"),
                state.monitor, state.timer_cache, call.spec.output_bytes(call.case.dtype, data.env))
    return m, timed


def _restore_inputs(data: inputs.CaseData) -> None:
    try:
        data.restore()
    except Exception:  # a broken CUDA context: the next call reports it
        pass


def _tampered(rec: Record, state: WorkerState, when: str) -> bool:
    changed = state.guard.tampered()
    if not changed:
        return False
    state.guard.restore()  # later implementations in this worker are timed with the real functions again
    shown = ", ".join(changed[:5]) + (f" (+{len(changed) - 5} more)" if len(changed) > 5 else "")
    rec.status, rec.correct = "invalid", None
    rec.message = f"timer integrity: {shown} replaced while {when}; restored, this record is not a measurement"
    rec.time_s = rec.samples_s = None
    return True


def _rescore_at_clock(rec: Record, job: WorkerJob, observed_mhz: float | None) -> None:
    """--peaks at-clock: scale the compute peak by observed / datasheet SM clock (stated on the record)."""
    factor = sol.clock_factor(job.peaks.clock_mhz, observed_mhz) if rec.peak_flops else None
    if factor is None:
        rec.warnings.append("--peaks at-clock: no observed SM clock (telemetry off) or no datasheet clock: "
                            "datasheet compute peak kept")
        return
    rec.peak_flops *= factor
    rec.t_sol_s, rec.bound = sol.t_sol(rec.flops or 0.0, rec.bytes or 0.0, rec.peak_flops, rec.peak_bandwidth)
    rec.warnings.append(f"compute peak re-scored at the observed SM clock: {observed_mhz:.0f} MHz / datasheet "
                        f"{job.peaks.clock_mhz:.0f} MHz = x{factor:.3f}")


def score_record(rec: Record, median_s: float, peaks: Peaks | str = "datasheet",
                 cache_bytes: int | None = None) -> None:
    s = sol.score(rec.flops, rec.bytes, median_s, rec.peak_flops, rec.peak_bandwidth)
    rec.tflops, rec.gbps, rec.sol, rec.mfu, rec.mbu = s.tflops, s.gbps, s.sol, s.mfu, s.mbu
    reason, tie = sol_verdict(s, rec, peaks, cache_bytes)
    if reason:
        rec.status, rec.message = "invalid", reason
    elif tie:
        rec.warnings.append(tie)


def sol_verdict(s: sol.Score, rec: Record, peaks: Peaks | str,
                cache_bytes: int | None = None) -> tuple[str | None, str | None]:
    """(why the score cannot be real, or None; the note of a tie with a measured ceiling, or None)."""
    source = peaks if isinstance(peaks, str) else peaks.source
    tolerance = 0.0 if isinstance(peaks, str) else peaks.noise_of(s.bound, rec.compute_unit, rec.peak_key)
    return sol.invalid_reason(s, source, tolerance=tolerance, cache_bytes=cache_bytes), sol.tie_note(s, tolerance)


def rescore_record(rec: Record, scored: Peaks, peaks: Peaks, cache_bytes: int | None = None) -> bool:
    """Score a record that was scored against `scored` again, against `peaks` (a CPU run's re-measured
    bandwidth ceiling: ceiling_recheck.py); True if it was. Only what the score decided may change: a
    record without a timing, or one another check made invalid, is left as it is."""
    median = (rec.time_s or {}).get("median")
    if not median or rec.status not in ("ok", "invalid") or rec.flops is None or rec.bytes is None:
        return False
    before = sol.score(rec.flops, rec.bytes, median, rec.peak_flops, rec.peak_bandwidth)
    reason, tie = sol_verdict(before, rec, scored, cache_bytes)
    if rec.status == "invalid" and rec.message != reason:
        return False        # invalid for another reason (timer integrity, work outside the timed window)
    if tie in rec.warnings:
        rec.warnings.remove(tie)     # the new score decides anew whether it ties
    if rec.status == "invalid":
        rec.status, rec.message = "ok", ""
    rec.peak_bandwidth = peaks.memory_bandwidth
    rec.t_sol_s, rec.bound = sol.t_sol(rec.flops, rec.bytes, rec.peak_flops, rec.peak_bandwidth)
    score_record(rec, median, peaks, cache_bytes)
    return True


def _base_record(spec: OpSpec, case: Case, job: WorkerJob, env: dict[str, Any]) -> dict[str, Any]:
    unit = spec.compute_unit(case.dtype)
    p = precision(case.dtype)
    key = sol.peak_key(unit, p.tensor_key, p.size)
    peak = job.peaks.compute_peak(unit, key)
    flops = float(spec.flops.evaluate(env))
    nbytes = spec.bytes_for(case.dtype, env)
    tsol, bound = sol.t_sol(flops, nbytes, peak, job.peaks.memory_bandwidth)
    warnings = [] if peak or flops == 0 else [f"no {unit} {key} peak for this device: T_SOL counts bytes only"]
    return dict(op=spec.op, case=case.label, params=dict(case.params), dtype=case.dtype, compute_unit=unit,
                peak_key=key, flops=flops, bytes=nbytes, intensity=flops / nbytes if nbytes else None,
                peak_flops=peak, peak_bandwidth=job.peaks.memory_bandwidth, t_sol_s=tsol, bound=bound,
                spec_sha256=spec.sha256, warnings=warnings)


def _short(exc: BaseException, tb: bool = False) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if tb:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            f = frames[-1]
            first += f" (at {Path(f.filename).name}:{f.lineno})"
    return first[:500]
