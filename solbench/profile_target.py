"""The process Nsight Compute profiles: each requested call run once, inside its own NVTX range.

    python -m solbench.profile_target REQUEST.json

counting.py writes the request (specs as text, and the calls: spec, case, dtype, implementation) and
launches this module under ncu. For each case the inputs are made as a timed run makes them
(solbench.inputs, the same seed); each call is warmed up (compilation, autotuning, the allocator,
cuBLAS's heuristics) outside any range, then run once between a synchronize and the end of the range
`solbench_measured_<index>`, also bracketed by cudaProfilerStart/Stop. ncu's filter selects only kernels
in those ranges, so input generation and warm-up are never counted. Nothing is checked or timed here:
the timed run already did that, and the counters never touch its numbers.

Each call's outcome is appended to the request's progress file as one JSON line as soon as it is known,
so a process that dies mid-way still says which calls finished. A CUDA error that leaves the context
unusable ends the process (exit code 3); the caller runs the remaining calls in a fresh one.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

from solbench import inputs
from solbench.dtypes import matmul_precision
from solbench.job import Case, SpecSource
from solbench.measure.nvtx import Markers
from solbench.ncu import range_name
from solbench.registry import resolve
from solbench.spec import OpSpec

REQUEST_SCHEMA = "solbench.profile-request/1"
POISONED_EXIT = 3


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m solbench.profile_target REQUEST.json", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text())
    if request.get("schema") != REQUEST_SCHEMA:
        print(f"{argv[0]}: not a {REQUEST_SCHEMA} file", file=sys.stderr)
        return 2
    return run_request(request)


def run_request(request: dict[str, Any]) -> int:
    import torch

    device = request["device"]
    cuda = device != "cpu"
    if cuda:
        torch.cuda.set_device(torch.device(device))
    specs = [SpecSource(**s).load() for s in request["specs"]]
    progress = Path(request["progress"])
    markers = Markers(cuda)
    for group in _by_case(request["calls"]):
        first = group[0]
        spec = specs[first["spec"]]
        case = Case(spec.op, dict(first["params"]), first["dtype"])
        try:
            data = inputs.make_inputs(spec, case, device, int(request.get("seed", 0)))
        except Exception as exc:
            for call in group:
                _report(progress, call["index"], "error", f"setting up inputs: {_short(exc)}")
            continue
        for call in group:
            status, message = _run_one(spec, case, call, data, device, markers, int(request.get("warmup", 1)))
            _report(progress, call["index"], status, message)
            if cuda and not _context_ok():
                _report(progress, call["index"], "poisoned", "the CUDA context is unusable after this call")
                return POISONED_EXIT
        del data
        if cuda:
            torch.cuda.empty_cache()
    return 0


def _by_case(calls: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive calls of one (spec, case, dtype) share their inputs."""
    groups: list[list[dict[str, Any]]] = []
    for call in calls:
        key = (call["spec"], json.dumps(call["params"], sort_keys=True), call["dtype"])
        if groups and groups[-1][0]["_key"] == key:
            groups[-1].append({**call, "_key": key})
        else:
            groups.append([{**call, "_key": key}])
    return groups


def _run_one(spec: OpSpec, case: Case, call: dict[str, Any], data: tuple, device: str, markers: Markers,
             warmup: int) -> tuple[str, str]:
    import torch

    c = next((c for c, _ in spec.calls if c.name == call["impl"]), None)
    if c is None:
        return "error", f"{spec.op} has no implementation '{call['impl']}'"
    if c.device == "cuda" and device == "cpu":
        return "skipped", "CUDA implementation: no CUDA device here"
    try:
        fn = resolve(c)
        kwargs = c.resolved_kwargs(case.env())
        with matmul_precision(case.dtype):
            for _ in range(max(warmup, 0)):
                fn(*_args(spec, data), **kwargs)
            args = _args(spec, data)       # an in-place op's copies are made outside the range
            _sync(device)
            with markers.range(range_name(int(call["index"]))):
                if device != "cpu":
                    torch.cuda.profiler.start()
                fn(*args, **kwargs)
                _sync(device)
                if device != "cpu":
                    torch.cuda.profiler.stop()
    except Exception as exc:
        return "error", _short(exc)
    return "ok", ""


def _args(spec: OpSpec, data: tuple) -> tuple:
    return tuple(t.clone() for t in data) if spec.inplace else data


def _sync(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def _context_ok() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def _report(progress: Path, index: int, status: str, message: str) -> None:
    with open(progress, "a") as f:
        f.write(json.dumps({"index": index, "status": status, "message": message}) + "\n")
        f.flush()


def _short(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return ((text[0] if text else type(exc).__name__) + where)[:500]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
