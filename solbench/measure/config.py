"""What a measurement is asked to do (TimingConfig) and what it returns (Measurement)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from solbench.measure.l2flush import DEFAULT_FLUSH_MODE
from solbench.measure.noise import Noise
from solbench.noise_model import RunToRunModel, default_model
from solbench.stats import TimeStats

Call = Callable[[int], Any]  # call(i) runs iteration i (the caller rotates inputs by i)
T = TypeVar("T")


@dataclass(frozen=True)
class TimingConfig:
    """The timer's knobs. `timer` is a name in solbench.measure.TIMERS (checked when measuring);
    a CPU device is always timed with `wall`."""

    timer: str = "events"
    rse_target: float = 0.005
    min_samples: int = 10
    max_samples: int = 2000
    budget_s: float = 1.0
    warmup_s: float = 0.025
    flush: bool = True
    flush_mode: str = DEFAULT_FLUSH_MODE   # write | read | balanced: how the L2 is flushed (l2flush.py)
    cross_check: bool = True         # events/graph: compare with CUPTI kernel time of the same call
    max_discards: int = 5            # throttled batches re-measured before throttling is accepted (and warned)
    throttle_pause_s: float = 0.5
    peaks_at_clock: bool = False     # re-score the compute peak at the SM clock NVML observed
    run_to_run: RunToRunModel | None = None   # None: the default model of the device kind (noise_model.py)
    event_correction: bool = True    # events: subtract the calibrated per-call event overhead
    nvtx: bool = False               # NVTX ranges + cudaProfilerStart/Stop around the timed window (nvtx.py)

    def model_for(self, device_kind: str) -> RunToRunModel:
        """The run-to-run model records are stamped with: the one given, else the device kind's default."""
        return self.run_to_run if self.run_to_run is not None else default_model(device_kind)


@dataclass
class TimerCache:
    """Calibrations a timer measures once per process (the events tare, per flush size).

    A worker keeps one for its lifetime and passes it to every `measure`, so the tare is measured once.
    """

    entries: dict[tuple[str, int], Any] = field(default_factory=dict)

    def get(self, what: str, key: int, make: Callable[[], T]) -> T:
        if (what, key) not in self.entries:
            self.entries[(what, key)] = make()
        return self.entries[(what, key)]


@dataclass
class Measurement:
    samples_s: list[float]
    stats: TimeStats             # stats.rse is the reported (total) noise
    timer: str
    reached_target: bool
    rse_target: float
    flush_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    throttled: bool = False                         # throttling persisted: samples kept, record warned
    cross_check: dict[str, Any] | None = None       # events/graph vs CUPTI, when run
    invalid: str | None = None                      # a reason the time cannot be trusted
    noise: Noise | None = None
    overhead_s: float = 0.0                         # subtracted from every sample (events tare)
    correction: dict[str, Any] | None = None        # how the tare was measured, for the record

    def time_json(self) -> dict[str, Any]:
        """The record's `time_s`: the robust summary, the noise (total, within-run, run-to-run and the model
        that gave it), the target, the tare."""
        within = self.noise.within if self.noise else self.stats.rse
        run_to_run = self.noise.run_to_run if self.noise else None
        source = self.noise.source if self.noise else None
        return {**self.stats.to_json(), "rse_within": within, "run_to_run": run_to_run,
                "run_to_run_source": source, "rse_target": self.rse_target,
                "reached_target": self.reached_target, "overhead_s": self.overhead_s}


def describe(m: Measurement) -> str:
    """One line: timer, median, sample count, noise."""
    rse = m.stats.rse
    return f"{m.timer}: median {m.stats.median * 1e6:.2f} us over {m.stats.n} samples, rse " + (
        "n/a" if math.isinf(rse) else f"{rse:.2%}")
