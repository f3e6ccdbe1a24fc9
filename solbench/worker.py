"""One op, in one process: make inputs, check every implementation, time the correct ones, score them.

The runner starts this in a fresh worker process per op, so a kernel that crashes its CUDA context
takes down only its own op. Everything here talks to torch; nothing here prints.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from solbench import check, sol, timing
from solbench.dtypes import precision
from solbench.hardware import DeviceInfo, Peaks
from solbench.results import Record
from solbench.spec import CallSpec, OpSpec, TensorSpec, load_file
from solbench.telemetry import ClockMonitor

INPUT_SETS = 3   # fresh random inputs per case: correctness on each, timing rotates through them
PROBE_ELEMENTS = 16   # scattered elements changed by the fingerprint-cache probe


@dataclass(frozen=True)
class Case:
    op: str
    params: dict[str, Any]
    dtype: str

    @property
    def label(self) -> str:
        return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in self.params.items())

    def env(self) -> dict[str, Any]:
        return {**self.params, "elem": precision(self.dtype).size}


@dataclass(frozen=True)
class WorkerJob:
    spec_path: Path
    cases: tuple[Case, ...]
    calls: tuple[str, ...]          # names of the baselines and impls to run
    device: str                     # "cpu" or "cuda:N"
    info: DeviceInfo
    peaks: Peaks
    timing: timing.TimingConfig
    seed: int = 0


Emit = Callable[[str, Any], None]   # emit(kind, payload): "start" (label) or "record" (dict)


@dataclass
class WorkerState:
    """What one worker carries from call to call: the timer snapshot, the clock monitor, the timer
    calibrations (the events tare is measured once per worker), a poisoned context."""

    guard: timing.Guard
    monitor: ClockMonitor
    poisoned: str | None = None      # set once a CUDA error left the context unusable
    timer_cache: timing.TimerCache = field(default_factory=timing.TimerCache)


def run_job(job: WorkerJob, emit: Emit) -> None:
    import torch

    spec = load_file(job.spec_path)
    if job.device != "cpu":
        torch.cuda.set_device(torch.device(job.device))
    # Snapshot the timers and checkers before any implementation module is imported.
    state = WorkerState(timing.Guard.capture(), ClockMonitor.open(job.info.kind, job.info.index))
    try:
        for case in job.cases:
            for record in run_case(spec, case, job, state):
                emit("record", record.to_json())
    finally:
        state.monitor.close()


def call_specs(spec: OpSpec, names: tuple[str, ...]) -> list[tuple[CallSpec, str]]:
    out = [(c, "baseline") for c in spec.baselines] + [(c, "impl") for c in spec.impls]
    return [(c, kind) for c, kind in out if c.name in names]


def run_case(spec: OpSpec, case: Case, job: WorkerJob, state: WorkerState | None = None) -> Iterator[Record]:
    state = state or WorkerState(timing.Guard.capture(), ClockMonitor.open("cpu"))
    calls = call_specs(spec, job.calls)
    env = case.env()
    try:
        base = _base_record(spec, case, job, env)
    except Exception as exc:  # a formula that cannot be evaluated for this case
        base = dict(op=spec.op, case=case.label, params=dict(case.params), dtype=case.dtype)
        for c, kind in calls:
            yield Record(**base, impl=c.name, kind=kind, status="error", message=f"counting FLOPs/bytes: {_short(exc)}")
        return
    if state.poisoned:
        for c, kind in calls:
            yield Record(**base, impl=c.name, kind=kind, status="error", message=f"not run: {state.poisoned}")
        return
    try:
        sets = [make_inputs(spec, case, job.device, _seed(job, i)) for i in range(INPUT_SETS)]
        pristine = [tuple(t.clone() for t in s) for s in sets]
        with _precision_mode(case.dtype):
            refs = [run_reference(spec, case, s, env) for s in sets]
    except Exception as exc:  # the case itself cannot be set up: every call gets the same error
        for c, kind in calls:
            yield Record(**base, impl=c.name, kind=kind, status="error", message=f"setting up inputs/reference: {_short(exc)}")
        return
    tol = spec.tolerance[case.dtype]
    if check.zeros_would_pass(refs[0], tol):
        for c, kind in calls:
            yield Record(**base, impl=c.name, kind=kind, status="error",
                         message=f"tolerance {tol} would accept an all-zero output: tighten it in {spec.path.name}")
        return
    data = CaseData(sets, pristine, refs, env)
    for c, kind in calls:
        if state.poisoned:
            yield Record(**base, impl=c.name, kind=kind, status="error", message=f"not run: {state.poisoned}")
            continue
        rec = run_call(spec, case, job, c, kind, data, base, state)
        if job.device != "cpu":
            _check_context(state, c.name, rec)
        yield rec


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


@dataclass
class CaseData:
    """One case's input sets, untouched copies of them, and their references."""

    sets: list[tuple]
    pristine: list[tuple]
    refs: list[Any]
    env: dict[str, Any]

    def restore(self) -> None:
        for s, p in zip(self.sets, self.pristine):
            for t, orig in zip(s, p):
                t.copy_(orig)


@dataclass
class _Call:
    """An implementation bound to a case: run it, check its outputs, report problems as text."""

    spec: OpSpec
    case: Case
    job: WorkerJob
    fn: Callable[..., Any]
    kwargs: dict[str, Any]

    @property
    def tol(self) -> Any:
        return self.spec.tolerance[self.case.dtype]

    @property
    def out_names(self) -> list[str]:
        return [t.name for t in self.spec.outputs]

    def args(self, s: tuple) -> tuple:
        # An in-place op gets copies, so the shared input sets stay as their references assume.
        return tuple(t.clone() for t in s) if self.spec.inplace else s

    def run_checked(self, s: tuple, ref: Any) -> check.CheckResult:
        out = self.fn(*self.args(s), **self.kwargs)
        _sync(self.job.device)  # work on any stream is finished before the output is read
        return self.verdict(out, ref)

    def verdict(self, out: Any, ref: Any) -> check.CheckResult:
        problem = _output_type_problem(out) or _dtype_problem(self.spec, self.case, out)
        if problem:
            return _bad(problem)
        return check.compare_all(out, ref, self.tol, self.out_names)


def run_call(spec: OpSpec, case: Case, job: WorkerJob, c: CallSpec, kind: str, data: CaseData,
             base: dict[str, Any], state: WorkerState) -> Record:
    rec = Record(**base, impl=c.name, kind=kind, status="ok")
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
    call = _Call(spec, case, job, fn, c.resolved_kwargs(data.env))
    state.monitor.reset()
    try:
        with _precision_mode(case.dtype):
            m = _check_and_time(call, data, rec, state)
    except Exception as exc:
        rec.status, rec.message = "error", _short(exc, tb=True)
        return rec
    finally:
        _restore_inputs(data)
    if m is None:
        return rec
    rec.timer, rec.samples_s, rec.time_s = m.timer, m.samples_s, m.time_json()
    rec.warnings += m.notes
    rec.telemetry = {**state.monitor.summary(m.throttled), "flush_bytes": m.flush_bytes,
                     "cross_check": m.cross_check, "timer_correction": m.correction,
                     "noise": m.noise.to_json() if m.noise else None}
    if m.throttled:
        rec.warnings.append("clock throttling persisted during this measurement (see telemetry)")
    if job.timing.peaks_at_clock:
        _rescore_at_clock(rec, job, state.monitor.observed_sm_mhz())
    score_record(rec, m.stats.median, job.peaks.source)
    if m.invalid:
        rec.status, rec.message = "invalid", m.invalid
    return rec


def _check_and_time(call: _Call, data: CaseData, rec: Record, state: WorkerState) -> timing.Measurement | None:
    """Correctness on fresh sets, timing, then the checks that catch caching; None when a check failed."""
    verdict = check.CheckResult.worst([_first_call(call, s, p, ref) for s, p, ref in
                                       zip(data.sets, data.pristine, data.refs)])
    rec.correct = verdict.ok
    rec.max_abs_err, rec.max_rel_err, rec.norm_rel_err = verdict.max_abs_err, verdict.max_rel_err, verdict.norm_rel_err
    if _tampered(rec, state, "its first calls"):
        return None
    if not verdict.ok:
        rec.status, rec.message = "failed", verdict.message
        return None
    m, timed = _time_call(call, data, state)
    if _tampered(rec, state, "timing"):
        return None
    problem = _after_timing(call, data, timed) or _stale_cache_probes(call, data)
    if _tampered(rec, state, "the cache probes"):
        return None
    if problem:
        rec.status, rec.correct, rec.message = "failed", False, problem
        return None
    return m


def _first_call(call: _Call, s: tuple, pristine: tuple, ref: Any) -> check.CheckResult:
    result = call.run_checked(s, ref)
    if not call.spec.inplace and not all(torch_equal(a, b) for a, b in zip(s, pristine)):
        return _bad("modified its inputs (the spec does not say the op is in-place)")
    return result


def _time_call(call: _Call, data: CaseData, state: WorkerState) -> tuple[timing.Measurement, dict[str, list[Any]]]:
    """Time the call rotating through the input sets; keep the first and last output of each set."""
    n = len(data.sets)
    timed: dict[str, list[Any]] = {"first": [None] * n, "last": [None] * n}

    def run(i: int) -> None:
        out = call.fn(*data.sets[i % n], **call.kwargs)
        k = i % n
        if timed["first"][k] is None:
            timed["first"][k] = out
        timed["last"][k] = out

    job = call.job
    m = timing.measure(run, job.info.kind, job.timing, job.info.l2_bytes,
                       (job.info.clocks or {}).get("sm_max_mhz"), state.monitor, state.timer_cache)
    return m, timed


def _after_timing(call: _Call, data: CaseData, timed: dict[str, list[Any]]) -> str | None:
    """The timed iterations' outputs must be right and the inputs untouched, not only the first call's."""
    _sync(call.job.device)
    if call.spec.inplace:
        return None  # the timed calls rewrote their own inputs: their outputs have no fixed reference
    # Inputs first: a call that scribbled on its inputs also makes later outputs wrong, and this says why.
    for s, p in zip(data.sets, data.pristine):
        if not all(torch_equal(a, b) for a, b in zip(s, p)):
            return "modified its inputs during the timed iterations (the spec does not say the op is in-place)"
    for which in ("first", "last"):
        results = [call.verdict(o, ref) for o, ref in zip(timed[which], data.refs) if o is not None]
        worst = check.CheckResult.worst(results) if results else None
        if worst is not None and not worst.ok:
            return f"timed iterations gave wrong results ({which} timed call of a set): {worst.message}"
    return None


def _stale_cache_probes(call: _Call, data: CaseData) -> str | None:
    """Rewrite inputs in place and re-check against fresh references: results cached by pointer, by
    tensor identity or by a fingerprint of a few elements come back stale and fail."""
    job, spec, case = call.job, call.spec, call.case
    # 1. Every element rewritten in place: same pointers and objects, new data.
    s = data.sets[0]
    fresh = make_inputs(spec, case, job.device, _seed(job, 900))
    for t, f in zip(s, fresh):
        t.copy_(f)
    with _precision_mode(case.dtype):
        result = call.run_checked(s, run_reference(spec, case, s, data.env))
    if not result.ok:
        return ("wrong result after its inputs were rewritten in place with fresh random data (an output "
                f"cached by pointer or tensor identity?): {result.message}")
    # 2. A few scattered elements changed: a cache keyed on a fingerprint of some elements misses it.
    s = data.sets[1 % len(data.sets)]
    _perturb(spec, case, job.device, s, data.env, _seed(job, 901))
    with _precision_mode(case.dtype):
        result = call.run_checked(s, run_reference(spec, case, s, data.env))
    if not result.ok:
        return (f"wrong result after {PROBE_ELEMENTS} scattered input elements were changed in place (an output "
                f"cached by an input fingerprint?): {result.message}")
    return None


def _perturb(spec: OpSpec, case: Case, device: str, s: tuple, env: dict[str, Any], seed: int) -> None:
    """Replace PROBE_ELEMENTS random elements of each input with fresh draws from its own distribution."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    fresh = make_inputs(spec, case, device, seed, boost=3.0)
    for t, f in zip(s, fresh):
        flat, src = t.view(-1), f.view(-1)
        idx = torch.randint(0, flat.numel(), (PROBE_ELEMENTS,), generator=gen).to(flat.device)
        flat[idx] = src[idx]


def _restore_inputs(data: CaseData) -> None:
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
    ref_mhz = job.peaks.clock_mhz
    if not rec.peak_flops or not ref_mhz or not observed_mhz:
        rec.warnings.append("--peaks at-clock: no observed SM clock (telemetry off) or no datasheet clock: "
                            "datasheet compute peak kept")
        return
    factor = observed_mhz / ref_mhz
    rec.peak_flops *= factor
    rec.t_sol_s, rec.bound = sol.t_sol(rec.flops or 0.0, rec.bytes or 0.0, rec.peak_flops, rec.peak_bandwidth)
    rec.warnings.append(f"compute peak re-scored at the observed SM clock: {observed_mhz:.0f} MHz / datasheet "
                        f"{ref_mhz:.0f} MHz = x{factor:.3f}")


def _sync(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def _bad(message: str) -> check.CheckResult:
    return check.CheckResult(False, math.inf, math.inf, math.inf, message)


def _output_type_problem(out: Any) -> str | None:
    """Outputs must be plain tensors: a subclass can compute its value lazily, after the timer stopped."""
    import torch

    for o in check.as_tuple(out):
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
            return (f"returned a {type(o).__name__} (a torch.Tensor subclass): outputs must be plain tensors, "
                    f"a subclass can defer its work past the timer")
    return None


def score_record(rec: Record, median_s: float, peaks_source: str = "datasheet") -> None:
    s = sol.score(rec.flops, rec.bytes, median_s, rec.peak_flops, rec.peak_bandwidth)
    rec.tflops, rec.gbps, rec.sol, rec.mfu, rec.mbu = s.tflops, s.gbps, s.sol, s.mfu, s.mbu
    reason = sol.invalid_reason(s)
    if reason:
        if peaks_source in ("measured", "cpu-measured"):
            # A measured ceiling is only as good as its measurement (a busy machine, too few shapes).
            reason += (f"; the peaks are {peaks_source}: if the ceiling was measured on a busy machine, "
                       f"measure it again (`solbench calibrate`, or delete results/cache/ for CPU ceilings)")
        rec.status, rec.message = "invalid", reason


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b)) if isinstance(a, torch.Tensor) else a == b


def _base_record(spec: OpSpec, case: Case, job: WorkerJob, env: dict[str, Any]) -> dict[str, Any]:
    unit = spec.compute_unit(case.dtype)
    p = precision(case.dtype)
    key = p.tensor_key if unit == "tensor" else "fp32" if p.size <= 4 else p.tensor_key
    peak = job.peaks.compute_peak(unit, key)
    flops = float(spec.flops.evaluate(env))
    nbytes = float(spec.bytes.evaluate(env)) if spec.bytes is not None else fused_bytes(spec, case.dtype, env)
    tsol, bound = sol.t_sol(flops, nbytes, peak, job.peaks.memory_bandwidth)
    warnings = [] if peak or flops == 0 else [f"no {unit} {key} peak for this device: T_SOL counts bytes only"]
    return dict(op=spec.op, case=case.label, params=dict(case.params), dtype=case.dtype, compute_unit=unit,
                peak_key=key, flops=flops, bytes=nbytes, intensity=flops / nbytes if nbytes else None,
                peak_flops=peak, peak_bandwidth=job.peaks.memory_bandwidth, t_sol_s=tsol, bound=bound,
                warnings=warnings)


def fused_bytes(spec: OpSpec, dtype: str, env: dict[str, Any]) -> float:
    """Each input read once and each output written once, at each tensor's own element size."""
    total = 0
    for t in spec.inputs + spec.outputs:
        total += math.prod(t.shape_for(env)) * precision(t.dtype_for(dtype)).size
    return float(total)


def make_inputs(spec: OpSpec, case: Case, device: str, seed: int, boost: float = 1.0) -> tuple:
    """Random inputs, never degenerate: no exact zeros in float data, no constant tensors.

    `boost` widens randn inputs (the fingerprint probe wants its changed elements to show in the output).
    """
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    env = case.env()
    out = tuple(_make_tensor(t, env, case.dtype, device, gen, boost) for t in spec.inputs)
    for t, x in zip(spec.inputs, out):
        if x.numel() > 1:
            f = x.float()
            if bool(f.max() == f.min()):
                raise ValueError(f"input '{t.name}' came out constant ({float(f.flatten()[0]):g} everywhere): "
                                 f"widen its init range in {spec.path.name}")
    return out


def _make_tensor(t: TensorSpec, env: dict[str, Any], case_dtype: str, device: str, gen: Any,
                 boost: float = 1.0) -> Any:
    import torch

    shape = t.shape_for(env)
    dtype = getattr(torch, precision(t.dtype_for(case_dtype)).storage)
    low, high = t.low.evaluate(env), t.high.evaluate(env)
    if t.init == "randint":
        return torch.randint(int(low), int(high), shape, generator=gen, device=device).to(dtype)
    if t.init == "uniform":
        x = torch.rand(shape, generator=gen, device=device) * (high - low) + low
        eps = (high - low) * 2e-3 if low < 0 < high else 0.0
    else:
        x = torch.randn(shape, generator=gen, device=device) * (t.scale * boost)
        eps = abs(t.scale) * 1e-2
    if eps:
        # Zeros hide indexing bugs (0 * anything) and fp8 rounds tiny values to zero: keep every value
        # at least eps away from zero, large enough to survive the narrowest storage format.
        x = torch.where(x.abs() < eps, torch.where(x < 0, -eps, eps), x)
    return x.to(dtype)


def run_reference(spec: OpSpec, case: Case, inputs: tuple, env: dict[str, Any]) -> Any:
    import torch

    fn = resolve(spec.reference)
    ref_dtype = getattr(torch, precision(spec.reference.dtype or "float64").storage)
    upcast = tuple(x.to(ref_dtype) if x.is_floating_point() else x for x in inputs)
    return fn(*upcast, **spec.reference.resolved_kwargs(env))


def _dtype_problem(spec: OpSpec, case: Case, out: Any) -> str | None:
    outs = check.as_tuple(out)
    for t, o in zip(spec.outputs, outs):
        want = precision(t.dtype_for(case.dtype)).storage
        got = str(getattr(o, "dtype", "")).removeprefix("torch.")
        if got and got != want:
            return f"{t.name}: returned dtype {got}, the spec counts bytes for {want}"
    return None


def resolve(c: CallSpec) -> Callable[..., Any]:
    """'pkg.mod:attr' or 'pkg.mod.attr' -> the callable (compiled with torch.compile if asked)."""
    fn = import_callable(c.fn)
    if c.compile:
        import torch

        fn = torch.compile(fn)
    return fn


def import_callable(path: str) -> Callable[..., Any]:
    if ":" in path:
        module_name, attr_path = path.split(":", 1)
    else:
        module_name, _, attr_path = path.rpartition(".")
        # Walk back until a prefix imports: torch.nn.functional.gelu -> module torch.nn.functional
        while module_name:
            try:
                importlib.import_module(module_name)
                break
            except ImportError:
                module_name, _, head = module_name.rpartition(".")
                attr_path = f"{head}.{attr_path}"
    if not module_name:
        raise ImportError(f"no importable module in '{path}'")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"'{path}' is not callable")
    return obj


@contextlib.contextmanager
def _precision_mode(dtype: str) -> Iterator[None]:
    """TF32 on only for the tfloat32 precision, so float32 means true float32 everywhere else."""
    import torch

    allow = precision(dtype).allow_tf32
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _short(exc: BaseException, tb: bool = False) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if tb:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            f = frames[-1]
            first += f" (at {Path(f.filename).name}:{f.lineno})"
    return first[:500]
