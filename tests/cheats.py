"""Deliberately cheating implementations of y = 2x + 1. The harness must catch every one of them.

Each cheat is what a kernel author (or a code-generating model) might write to look fast or correct
without being either. The trap tests (tests/test_traps.py, tests/gpu/test_traps_gpu.py) run them
through the real CLI with a spec folder pointing here and assert the record's status and message.

Module-level mutable state is the point of several cheats; do not copy this style into solbench/.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def honest(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


# ---------------------------------------------------------------- caching

_by_pointer: dict[Any, torch.Tensor] = {}
_by_id: dict[int, torch.Tensor] = {}
_by_fingerprint: dict[Any, torch.Tensor] = {}


def cached_by_pointer(x: torch.Tensor) -> torch.Tensor:
    """Remembers the output per input address: free after the first call on each buffer."""
    key = (x.data_ptr(), tuple(x.shape))
    if key not in _by_pointer:
        _by_pointer[key] = x * 2 + 1
    return _by_pointer[key]


def cached_by_id(x: torch.Tensor) -> torch.Tensor:
    key = id(x)
    if key not in _by_id:
        _by_id[key] = x * 2 + 1
    return _by_id[key]


def cached_by_fingerprint(x: torch.Tensor) -> torch.Tensor:
    """Keys on a hash of a few elements: survives buffers being swapped, not data changing elsewhere."""
    flat = x.flatten()
    key = (tuple(x.shape), tuple(flat[:8].tolist()), tuple(flat[-8:].tolist()))
    if key not in _by_fingerprint:
        _by_fingerprint[key] = x * 2 + 1
    return _by_fingerprint[key]


# ---------------------------------------------------------------- deferred work

class LazyTensor(torch.Tensor):
    """An output whose values are computed the first time anything reads it: after the timer stopped."""

    @staticmethod
    def __new__(cls, source: torch.Tensor) -> "LazyTensor":
        t = torch.Tensor._make_subclass(cls, torch.empty_like(source))
        t._source = source
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in args:
            if isinstance(a, LazyTensor) and getattr(a, "_source", None) is not None:
                src, a._source = a._source, None
                with torch._C.DisableTorchFunctionSubclass():
                    a.copy_(src * 2 + 1)
        return super().__torch_function__(func, types, args, kwargs or {})


def lazy_output(x: torch.Tensor) -> torch.Tensor:
    return LazyTensor(x)


# ---------------------------------------------------------------- inputs

def mutates_input(x: torch.Tensor) -> torch.Tensor:
    y = x * 2 + 1
    x.view(-1)[0] += 1.0       # scribbles on its input
    return y


_mutate_calls = [0]


def mutates_input_when_timed(x: torch.Tensor) -> torch.Tensor:
    """Behaves for the first (correctness) calls, then uses its input as scratch space."""
    _mutate_calls[0] += 1
    y = x * 2 + 1
    if _mutate_calls[0] > 3:
        x.view(-1)[-1] = 0.5
    return y


# ---------------------------------------------------------------- wrong sometimes

def wrong_at_odd_sizes(x: torch.Tensor) -> torch.Tensor:
    """A boundary bug: the last column is dropped when N is odd (as with an unguarded vector load)."""
    y = x * 2 + 1
    if x.shape[-1] % 2:
        y[..., -1] = 0.0
    return y


_first_only_calls = [0]


def right_first_call_only(x: torch.Tensor) -> torch.Tensor:
    _first_only_calls[0] += 1
    return x * 2 + 1 if _first_only_calls[0] == 1 else x * 2


_first_three_calls = [0]


def right_first_three_calls(x: torch.Tensor) -> torch.Tensor:
    """Right exactly as often as a harness that checks each fresh input set once would call it."""
    _first_three_calls[0] += 1
    return x * 2 + 1 if _first_three_calls[0] <= 3 else torch.empty_like(x)


# ---------------------------------------------------------------- timers

def patches_perf_counter(x: torch.Tensor) -> torch.Tensor:
    """Halves the host clock's progress, so wall-clock timing reports half the time."""
    real = time.perf_counter
    if not getattr(real, "_cheat", False):
        origin = real()

        def slow_clock() -> float:
            return origin + (real() - origin) / 2

        slow_clock._cheat = True  # type: ignore[attr-defined]
        time.perf_counter = slow_clock
    return x * 2 + 1


def patches_event_timer(x: torch.Tensor) -> torch.Tensor:
    """Divides every CUDA event measurement by 10."""
    real = torch.cuda.Event.elapsed_time
    if not getattr(real, "_cheat", False):
        def fast(self: Any, end: Any) -> float:
            return real(self, end) / 10

        fast._cheat = True  # type: ignore[attr-defined]
        torch.cuda.Event.elapsed_time = fast
    return x * 2 + 1


# ---------------------------------------------------------------- crashes and hangs

def crash_segfault(x: torch.Tensor) -> torch.Tensor:
    os.kill(os.getpid(), signal.SIGSEGV)
    return x


def crash_exit(x: torch.Tensor) -> torch.Tensor:
    os._exit(3)


def hang(x: torch.Tensor) -> torch.Tensor:
    time.sleep(3600)
    return x


# ---------------------------------------------------------------- GPU-only cheats

_side_streams: dict[int, Any] = {}


def side_stream(x: torch.Tensor) -> torch.Tensor:
    """Does the work on a stream the timer's events do not see (and never joins it)."""
    dev = x.device.index or 0
    if dev not in _side_streams:
        _side_streams[dev] = torch.cuda.Stream()
    s = _side_streams[dev]
    s.wait_stream(torch.cuda.current_stream())   # inputs are ready; the result is never waited for
    with torch.cuda.stream(s):
        y = x
        for _ in range(20):                      # enough work to dwarf the events' own overhead
            y = y * 1.0
        y = y * 2 + 1
    return y


def illegal_memory_access(x: torch.Tensor) -> torch.Tensor:
    """A Triton kernel that stores far outside its buffer: a sticky CUDA error for the whole context."""
    import triton
    import triton.language as tl

    @triton.jit
    def bad_store(ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(ptr + offs + (1 << 40), tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)

    y = torch.empty_like(x)
    bad_store[(triton.cdiv(x.numel(), 256),)](y, x.numel(), BLOCK=256)
    torch.cuda.synchronize()
    return y


# ---------------------------------------------------------------- helpers for the trap tests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """\
op: {op}
summary: y = 2x + 1, implemented by tests.cheats:{impl}
cases: {cases}
dtypes: [float32]
inputs:
  x: {{shape: [M, N]}}
outputs:
  y: {{shape: [M, N]}}
flops: 2 * M * N
bytes: {bytes}
compute: simt
reference: {{fn: "tests.cheats:reference"}}
baselines:
  honest: {{fn: "tests.cheats:honest"{device}}}
impls:
  cheat: {{fn: "tests.cheats:{impl}"{device}}}
tolerance:
  float32: {{atol: 1.0e-6, rtol: 1.0e-6}}
"""


def write_spec(folder: Any, impl: str, op: str | None = None, cases: str = "[{M: 64, N: 48}]",
               nbytes: str = "auto", cuda: bool = False) -> str:
    """One op spec `trap_<impl>` whose `cheat` implementation is tests.cheats:<impl>; returns the op name."""
    op = op or f"trap_{impl}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{op}.yaml").write_text(SPEC.format(op=op, impl=impl, cases=cases, bytes=nbytes,
                                                   device=', device: cuda' if cuda else ""))
    return op


def seed_cpu_peaks(out_dir: Any) -> None:
    """Pre-fill the CPU ceiling cache with generous peaks (so SOL stays far below 1) instead of measuring."""
    from unittest import mock

    from solbench import hardware, peaks

    info = hardware.probe_device("cpu")
    fake = peaks.Peaks(name="test CPU", source="cpu-measured", memory_bandwidth=1e15,
                       simt={k: 1e18 for k in ("fp32", "fp16", "bf16", "fp64")},
                       tensor={k: 1e18 for k in ("fp32", "tf32", "bf16", "fp16", "fp64")}, notes="test")
    with mock.patch.object(peaks, "measure_cpu_peaks", lambda *a, **k: fake):
        peaks.cpu_peaks(out_dir / "cache", info)


def records_by_impl(results_json: Any) -> dict[tuple[str, str], dict]:
    import json

    data = json.loads(results_json.read_text())
    return {(r["case"], r["impl"]): r for r in data["records"]}
