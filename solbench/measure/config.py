"""What a measurement is asked to do (TimingConfig) and what it returns (Measurement)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from solbench.measure.noise import Noise, floor_for
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
    cross_check: bool = True         # events/graph: compare with CUPTI kernel time of the same call
    max_discards: int = 5            # throttled batches re-measured before throttling is accepted (and warned)
    throttle_pause_s: float = 0.5
    peaks_at_clock: bool = False     # re-score the compute peak at the SM clock NVML observed
    rse_floor: float | None = None   # run-to-run floor; None: RUN_TO_RUN_FLOOR of the device kind
    event_correction: bool = True    # events: subtract the calibrated per-call event overhead

    def __post_init__(self) -> None:
        if self.rse_floor is not None and not 0 <= self.rse_floor < 1:
            raise ValueError(f"rse_floor must be in [0, 1), got {self.rse_floor}")

    def floor_for(self, device_kind: str) -> float:
        return floor_for(device_kind, self.rse_floor)


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
        """The record's `time_s`: the robust summary, the noise (total and within-run), the target, the tare."""
        within = self.noise.within if self.noise else self.stats.rse
        return {**self.stats.to_json(), "rse_within": within, "rse_target": self.rse_target,
                "reached_target": self.reached_target, "overhead_s": self.overhead_s}


def describe(m: Measurement) -> str:
    """One line: timer, median, sample count, noise."""
    rse = m.stats.rse
    return f"{m.timer}: median {m.stats.median * 1e6:.2f} us over {m.stats.n} samples, rse " + (
        "n/a" if math.isinf(rse) else f"{rse:.2%}")
