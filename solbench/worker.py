"""One op, in one process: make inputs, check every implementation, time the correct ones, score them.

The runner starts this in a fresh worker process per op, so a kernel that crashes its CUDA context
takes down only its own op. Everything here talks to torch; nothing here prints.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from solbench import check, sol, timing
from solbench.dtypes import precision
from solbench.hardware import DeviceInfo, Peaks
from solbench.results import Record
from solbench.spec import CallSpec, OpSpec, TensorSpec, load_file

INPUT_SETS = 3   # fresh random inputs per case: correctness on each, timing rotates through them


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


def run_job(job: WorkerJob, emit: Emit) -> None:
    import torch

    spec = load_file(job.spec_path)
    if job.device != "cpu":
        torch.cuda.set_device(torch.device(job.device))
    for case in job.cases:
        for record in run_case(spec, case, job):
            emit("record", record.to_json())


def call_specs(spec: OpSpec, names: tuple[str, ...]) -> list[tuple[CallSpec, str]]:
    out = [(c, "baseline") for c in spec.baselines] + [(c, "impl") for c in spec.impls]
    return [(c, kind) for c, kind in out if c.name in names]


def run_case(spec: OpSpec, case: Case, job: WorkerJob) -> Iterator[Record]:
    import torch

    calls = call_specs(spec, job.calls)
    env = case.env()
    try:
        base = _base_record(spec, case, job, env)
    except Exception as exc:  # a formula that cannot be evaluated for this case
        base = dict(op=spec.op, case=case.label, params=dict(case.params), dtype=case.dtype)
        for c, kind in calls:
            yield Record(**base, impl=c.name, kind=kind, status="error", message=f"counting FLOPs/bytes: {_short(exc)}")
        return
    try:
        sets = [make_inputs(spec, case, job.device, job.seed * 1000 + i) for i in range(INPUT_SETS)]
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
    for c, kind in calls:
        yield run_call(spec, case, job, c, kind, sets, refs, base, env)
        if job.device != "cpu":
            torch.cuda.empty_cache()


def run_call(spec: OpSpec, case: Case, job: WorkerJob, c: CallSpec, kind: str, sets: list[tuple],
             refs: list[Any], base: dict[str, Any], env: dict[str, Any]) -> Record:
    rec = Record(**base, impl=c.name, kind=kind, status="ok")
    if c.device == "cuda" and job.device == "cpu":
        rec.status, rec.message = "skipped", "CUDA implementation: no CUDA device here"
        return rec
    try:
        fn = resolve(c)
    except Exception as exc:
        rec.status, rec.message = "error", f"cannot load '{c.fn}': {_short(exc)}"
        return rec
    kwargs = c.resolved_kwargs(env)
    out_names = [t.name for t in spec.outputs]
    tol = spec.tolerance[case.dtype]
    try:
        with _precision_mode(case.dtype):
            results = []
            for s, ref in zip(sets, refs):
                snapshot = [t.clone() for t in s] if not spec.inplace else None
                out = fn(*s, **kwargs)
                results.append(check.compare_all(out, ref, tol, out_names))
                dtype_problem = _dtype_problem(spec, case, out)
                if dtype_problem:
                    results.append(check.CheckResult(False, math.inf, math.inf, math.inf, dtype_problem))
                if snapshot is not None and any(not torch_equal(a, b) for a, b in zip(s, snapshot)):
                    results.append(check.CheckResult(False, math.inf, math.inf, math.inf,
                                                     "modified its inputs (the spec does not say the op is in-place)"))
                del snapshot, out
            verdict = check.CheckResult.worst(results)
            rec.correct = verdict.ok
            rec.max_abs_err, rec.max_rel_err, rec.norm_rel_err = (
                verdict.max_abs_err, verdict.max_rel_err, verdict.norm_rel_err)
            if not verdict.ok:
                rec.status, rec.message = "failed", verdict.message
                return rec
            last_out: dict[int, Any] = {}

            def call(i: int) -> None:
                last_out[i % len(sets)] = fn(*sets[i % len(sets)], **kwargs)

            m = timing.measure(call, job.info.kind, job.timing, job.info.l2_bytes,
                               (job.info.clocks or {}).get("sm_max_mhz"))
            # The outputs of the timed iterations must be right too, not only the first call's.
            timed = [check.compare_all(last_out[k], refs[k], tol, out_names) for k in sorted(last_out)]
            timed_verdict = check.CheckResult.worst(timed)
            if not timed_verdict.ok:
                rec.status, rec.correct = "failed", False
                rec.message = f"timed iterations gave wrong results: {timed_verdict.message}"
                return rec
    except Exception as exc:
        rec.status, rec.message = "error", _short(exc, tb=True)
        return rec
    rec.timer, rec.samples_s, rec.time_s = m.timer, m.samples_s, m.stats.to_json()
    rec.warnings += m.notes
    score_record(rec, m.stats.median)
    return rec


def score_record(rec: Record, median_s: float) -> None:
    s = sol.score(rec.flops, rec.bytes, median_s, rec.peak_flops, rec.peak_bandwidth)
    rec.tflops, rec.gbps, rec.sol, rec.mfu, rec.mbu = s.tflops, s.gbps, s.sol, s.mfu, s.mbu
    reason = sol.invalid_reason(s)
    if reason:
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


def make_inputs(spec: OpSpec, case: Case, device: str, seed: int) -> tuple:
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    env = case.env()
    return tuple(_make_tensor(t, env, case.dtype, device, gen) for t in spec.inputs)


def _make_tensor(t: TensorSpec, env: dict[str, Any], case_dtype: str, device: str, gen: Any) -> Any:
    import torch

    shape = t.shape_for(env)
    dtype = getattr(torch, precision(t.dtype_for(case_dtype)).storage)
    low, high = t.low.evaluate(env), t.high.evaluate(env)
    if t.init == "randint":
        return torch.randint(int(low), int(high), shape, generator=gen, device=device).to(dtype)
    if t.init == "uniform":
        x = torch.rand(shape, generator=gen, device=device) * (high - low) + low
    else:
        x = torch.randn(shape, generator=gen, device=device) * t.scale
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
