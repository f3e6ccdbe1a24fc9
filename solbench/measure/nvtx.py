"""NVTX ranges and the profiler window: what Nsight Systems and Nsight Compute see of a measurement.

Off by default, and then every method does nothing (no torch call, nothing on the timed path). On
(`solbench run --nvtx`, TimingConfig.nvtx, CUDA only) the worker names each op / case / implementation
with an NVTX range, each timed call runs in a range of its own, and the timed window of a measurement
(after the warm-up, until the timer returns) is bracketed by cudaProfilerStart/Stop, so
`nsys profile --capture-range=cudaProfilerApi` records exactly the measured calls. The ranges cost
the host about a microsecond a call; the events timer's queue-holding spin hides that from the GPU.

It lives in the measure package so the integrity guard covers it: the timed call goes through `wrap`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Markers:
    """NVTX ranges and profiler windows, or nothing at all when not enabled."""

    enabled: bool = False

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        """A push/pop range around the block."""
        if not self.enabled:
            yield
            return
        import torch

        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()

    def wrap(self, call: Callable[[int], Any], name: str) -> Callable[[int], Any]:
        """`call` itself when off; else a call that runs iteration i inside the range '<name> <i>'."""
        if not self.enabled:
            return call

        def ranged(i: int) -> Any:
            with self.range(f"{name} {i}"):
                return call(i)

        return ranged

    def window(self, name: str) -> "Window":
        """A profiler window (and an NVTX range of that name) to open once and close once."""
        return Window(self, name)


class Window:
    """cudaProfilerStart + a range when opened, the reverse when closed; both idempotent, so a timer that
    raises before its first timed batch closes nothing it did not open."""

    def __init__(self, markers: Markers, name: str) -> None:
        self.markers = markers
        self.name = name
        self.is_open = False

    def open(self) -> None:
        if not self.markers.enabled or self.is_open:
            return
        import torch

        torch.cuda.nvtx.range_push(self.name)
        torch.cuda.profiler.start()
        self.is_open = True

    def close(self) -> None:
        if not self.is_open:
            return
        import torch

        torch.cuda.synchronize()      # the window ends when the GPU finished the measured work
        torch.cuda.profiler.stop()
        torch.cuda.nvtx.range_pop()
        self.is_open = False


OFF = Markers(False)
