"""The GPU worker process: the only process of a server that touches the device.

It rebuilds the server's op library from the spec texts it is given (so a request can only name an op
and one of that op's calls, never a callable), loads the kernel library, says hello, then answers
requests one at a time, in order. Messages are pickled dicts, a request's body and a reply's body follow
as raw bytes. After any failure on CUDA it checks the context: a sticky error (an illegal address)
leaves it unusable, so the worker answers that request and exits; the server starts a fresh one.
When no request has come for a while it hands cached device memory back (what NVML shows as used
returns to where it started).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from solbench.job import SpecSource
from solbench.registry import resolve
from solbench.serve import tensors
from solbench.serve.frames import read_frame
from solbench.serve.oplib import KERNELS_PREFIX, OpLibrary

IDLE_TRIM_S = 1.0          # idle this long: empty the caching allocator
EXIT_STICKY = 70           # exit code after a sticky CUDA error
MEMORY_EVERY_S = 0.25      # a reply carries memory_allocated at most this often


@dataclass(frozen=True)
class WorkerSetup:
    device: str                                   # cpu | cuda:N
    sources: tuple[tuple[SpecSource, bool], ...]  # the op library as spec texts
    load_library: bool = True                     # build/load kernels_ext on CUDA
    cpu_threads: int = 1                          # torch's intra-op threads (see _open)


@dataclass
class _State:
    setup: WorkerSetup
    library: OpLibrary
    torch: Any
    cuda: bool
    fns: dict[tuple[str, str], Callable[..., Any]] = field(default_factory=dict)
    trimmed: bool = True
    memory_at: float = 0.0          # when a reply last carried memory_allocated


def main(setup: WorkerSetup, requests: Any, replies: Any) -> None:
    """Entry point of the worker process (spawned): hello, then one reply per request until EOF."""
    # Ctrl-C reaches the whole process group; the server stops its workers itself (the pipes' EOF),
    # and a worker killed by the signal would print a traceback into the server's log on every stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        state = _open(setup)
        # torch and the op library are a few hundred thousand objects that live as long as the process: out
        # of the collector's view, a full collection no longer walks them between two requests.
        gc.freeze()
        replies.send_bytes(pickle.dumps(_hello(state)))
    except BaseException as exc:  # report what stopped the start-up, then exit
        replies.send_bytes(pickle.dumps({"type": "hello", "ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return
    while True:
        if not requests.poll(IDLE_TRIM_S):
            _trim(state)
            continue
        try:
            meta = pickle.loads(requests.recv_bytes())
            body = read_frame(requests) if meta.get("body") else b""
        except (EOFError, OSError):
            return
        reply, out = _answer(state, meta, body)
        replies.send_bytes(pickle.dumps(reply))
        if reply.get("body"):
            replies.send_bytes(out)
        if reply.get("fatal"):
            os._exit(EXIT_STICKY)


def _open(setup: WorkerSetup) -> _State:
    import dataclasses

    import torch

    # One thread by default: a server runs many small requests side by side with its own HTTP process,
    # and OpenMP threads spinning against those cost far more than they give (on a busy 2-core machine a
    # 256 x 1024 softmax served 10x slower with torch's default thread count).
    torch.set_num_threads(max(1, setup.cpu_threads))
    device = setup.device
    if device == "auto":
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    elif device == "cuda":
        device = "cuda:0"
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(torch.device(device))
        torch.zeros(1, device=device)      # make the context now, not on the first request
    setup = dataclasses.replace(setup, device=device)
    return _State(setup, OpLibrary.from_sources(setup.sources), torch, cuda)


def _hello(state: _State) -> dict[str, Any]:
    torch = state.torch
    hello: dict[str, Any] = {"type": "hello", "ok": True, "pid": os.getpid(), "device": state.setup.device,
                             "kind": "cuda" if state.cuda else "cpu", "library_ok": False, "library_error": None}
    if state.cuda:
        if state.setup.load_library:
            try:
                import kernels_ext

                kernels_ext.ensure_loaded()
                hello["library_ok"] = True
            except Exception as exc:  # served by the eager baselines instead; /readyz says why
                hello["library_error"] = f"{type(exc).__name__}: {exc}"[:500]
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        free, total = torch.cuda.mem_get_info()      # after the library: what is in use at start includes it
        hello.update(name=props.name, capability=(props.major, props.minor), total_bytes=total, free_bytes=free)
    else:
        from solbench.hardware import probe_device

        total, free = _host_memory()
        hello.update(name=probe_device("cpu").name, capability=None, total_bytes=total, free_bytes=free)
    hello.update(_memory(state))
    return hello


def _host_memory() -> tuple[int, int]:
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            fields[key] = int(rest.split()[0]) * 1024
    return fields.get("MemTotal", 0), fields.get("MemAvailable", fields.get("MemFree", 0))


def _memory(state: _State) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_bytes": _rss()}
    if state.cuda:
        torch = state.torch
        out.update(memory_allocated=torch.cuda.memory_allocated(), memory_reserved=torch.cuda.memory_reserved())
    return out


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim(state: _State) -> None:
    if state.cuda and not state.trimmed:
        state.torch.cuda.empty_cache()
    state.trimmed = True


def _answer(state: _State, meta: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
    kind = meta.get("type")
    if kind == "stats":
        if meta.get("trim"):
            _trim(state)
        return {"type": "stats", "id": meta["id"], "ok": True, **_memory(state)}, b""
    started = time.perf_counter()
    state.trimmed = False
    try:
        outputs, kernel_s = _run(state, meta, body)
        out = (tensors.encode_json(outputs, {"op": meta["op"], "impl": meta["call"]}) if meta["form"] == "json"
               else tensors.encode_safetensors(outputs))
    except _BadInput as exc:
        return {"type": "op", "id": meta["id"], "ok": False, "status": 422, "field": exc.field,
                "error": exc.message}, b""
    except Exception as exc:
        return _failure(state, meta, exc), b""
    reply = {"type": "op", "id": meta["id"], "ok": True, "body": True, "kernel_s": kernel_s,
             "worker_s": time.perf_counter() - started}
    now = time.monotonic()
    if state.cuda and now - state.memory_at >= MEMORY_EVERY_S:
        # For the server's memory gauge. memory_allocated() builds the allocator's whole statistics
        # dict: asked after every request it was 15% of this process's time at 1,000 requests/s.
        reply["memory_allocated"] = state.torch.cuda.memory_allocated()
        state.memory_at = now
    return reply, out


class _BadInput(Exception):
    def __init__(self, field_: str, message: str):
        self.field, self.message = field_, message
        super().__init__(message)


def _run(state: _State, meta: dict[str, Any], body: bytes) -> tuple[dict[str, Any], float]:
    torch = state.torch
    inputs = meta["inputs"]
    host = (tensors.tensors_from_json(meta["values"], inputs) if meta["form"] == "json"
            else tensors.tensors_from_safetensors(body, meta["metas"]))
    # Copies: the device's own (aligned) buffers on CUDA; writable ones on a CPU (in-place ops write).
    args = [host[n].to(state.setup.device) if state.cuda else host[n].clone() for n in inputs]
    _check_ranges(torch, dict(zip(inputs, args)), meta["ranges"])
    fn = _callable(state, meta["op"], meta["call"])
    if state.cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn(*args, **meta["kwargs"])
        end.record()
    else:
        t0 = time.perf_counter()
        result = fn(*args, **meta["kwargs"])
        kernel_s = time.perf_counter() - t0
    outputs = _outputs(result, meta["outputs"])
    host_out = {k: v.cpu() for k, v in outputs.items()}         # waits for the device
    if state.cuda:
        kernel_s = start.elapsed_time(end) / 1e3
    return host_out, kernel_s


def _check_ranges(torch: Any, args: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> None:
    for name, (low, high) in ranges.items():
        t = args[name]
        if t.numel() == 0:
            continue
        lo, hi = int(t.min()), int(t.max())
        if lo < low or hi >= high:
            raise _BadInput(f"inputs.{name}", f"values must lie in [{low}, {high}) (indices), found "
                                              f"{lo if lo < low else hi}")


def _callable(state: _State, op: str, call: str) -> Callable[..., Any]:
    key = (op, call)
    if key not in state.fns:
        served = state.library.get(op)
        if served is None:
            raise LookupError(f"op '{op}' is not in this worker's library")
        spec_call = next((c for c, _ in served.spec.calls if c.name == call), None)
        if spec_call is None:
            raise LookupError(f"op '{op}' has no call '{call}'")
        if spec_call.fn.startswith(KERNELS_PREFIX) and not state.cuda:
            raise LookupError(f"'{spec_call.fn}' needs a CUDA device")
        state.fns[key] = resolve(spec_call)
    return state.fns[key]


def _outputs(result: Any, names: list[tuple[str, str, tuple[int, ...]]]) -> dict[str, Any]:
    """The call's return value as the spec's named outputs, each checked for shape and dtype."""
    torch_outs = result if isinstance(result, (tuple, list)) else (result,)
    if len(torch_outs) != len(names):
        raise TypeError(f"the implementation returned {len(torch_outs)} tensors, the spec declares {len(names)} "
                        f"outputs ({', '.join(n for n, _, _ in names)})")
    out = {}
    for (name, dtype, shape), t in zip(names, torch_outs):
        if tuple(t.shape) != tuple(shape):
            raise TypeError(f"output '{name}' came back {list(t.shape)}, the spec says {list(shape)}")
        out[name] = t
    return out


def _failure(state: _State, meta: dict[str, Any], exc: Exception) -> dict[str, Any]:
    torch = state.torch
    message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    reply = {"type": "op", "id": meta["id"], "ok": False, "status": 500, "error": message}
    out_of_memory = torch.cuda.OutOfMemoryError if state.cuda else MemoryError
    if isinstance(exc, out_of_memory):
        # The estimate let it through but the allocator could not place it (fragmentation, other
        # processes): a transient refusal, not a crash.
        reply.update(status=503, error=f"out of device memory for this request right now ({message}); retry")
        if state.cuda:
            torch.cuda.empty_cache()
        return reply
    if state.cuda:
        try:
            torch.cuda.synchronize()
        except Exception as sticky:
            reply["fatal"] = True
            reply["error"] = (f"{message}; the CUDA context is now unusable ({type(sticky).__name__}: "
                              f"{str(sticky).splitlines()[0][:200]}): the GPU worker is being restarted")
    return reply
