"""How precise is a median? The within-run noise, the run-to-run part, and the rule that says when sampling may stop.

The within-run estimate from the samples (IQR-based standard error of the median) assumes independent
samples and sees nothing that differs between processes: boost clock and power state, memory
placement, the events timer's tare. Two runs of the same case differed by 2.6-3.2% on an H200 where
that estimate said 0.3-0.6%. The reported noise (`time_s.rse`, the relative standard error of the
reported median) is therefore

    rse = sqrt(within^2 + run_to_run^2),   run_to_run = sqrt(clock^2 + overhead^2 + modelled^2)

- within = max(sampling, batches): `sampling` is the IQR estimate over all samples; `batches` is the
  standard error from the medians of >= MIN_BATCHES independent batches taken one after another (slow
  drift and batch-to-batch correlation show up here, not in the pooled estimate);
- clock = relative standard deviation of the SM clock NVML saw during the kept batches (a time is at
  most inversely proportional to the clock, so this bounds the clock's share);
- overhead = the event tare's standard error over the median (events timer only): the tare is measured
  once per worker process, so its error is the same for every sample of a run and differs between runs;
- modelled = the device's run-to-run noise model at this median (solbench/noise_model.py: measured by
  `solbench noise`, or the conservative default of the device kind): the process-to-process spread that
  no single run can observe.

`run_to_run` (`time_s.run_to_run`, with `time_s.run_to_run_source` naming the model) is what
`solbench compare` requires a change to exceed. Only `within` shrinks with more samples, so the
stopping rule (and `reached_target`) compares `within` (`time_s.rse_within`) with the target and needs
>= MIN_BATCHES batches.

The stopping rule is a protocol (`StoppingRule`) so that another criterion (a fixed sample count, a
confidence interval on a ratio) can replace today's `NoiseTarget` without touching the timers.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Protocol

from solbench.noise_model import RunToRunModel
from solbench.stats import median_rse

MIN_BATCHES = 5             # independent batches before the between-batch noise counts (and the target can be met)
GROUP_MIN = 5               # batches smaller than this (wall: one sample) are pooled into groups of >= 5

Batches = list[list[float]]


@dataclass(frozen=True)
class Noise:
    """Components of the reported relative standard error of the median (see the module docstring)."""

    sampling: float
    batches: float | None        # None: fewer than MIN_BATCHES batches
    clock: float = 0.0
    overhead: float = 0.0
    modelled: float = 0.0        # the run-to-run model's spread at this median
    source: str = ""             # which model: "measured:<fingerprint>" or "default:<kind>"

    @property
    def within(self) -> float:
        return max(self.sampling, self.batches or 0.0)

    @property
    def run_to_run(self) -> float:
        return math.sqrt(self.clock ** 2 + self.overhead ** 2 + self.modelled ** 2)

    @property
    def total(self) -> float:
        return math.sqrt(self.within ** 2 + self.run_to_run ** 2)

    def to_json(self) -> dict[str, Any]:
        return {"rse": self.total, "within": self.within, "sampling": self.sampling, "batches": self.batches,
                "clock": self.clock, "overhead": self.overhead, "modelled": self.modelled,
                "run_to_run": self.run_to_run, "run_to_run_source": self.source}


def batch_rse(batches: Batches) -> float | None:
    """Relative standard error of the location from the spread of batch medians (None: too few batches).

    Batches smaller than GROUP_MIN are pooled with their successors, so one-sample batches (wall) become
    groups of consecutive samples.
    """
    groups: list[list[float]] = []
    cur: list[float] = []
    for b in batches:
        cur = cur + list(b)
        if len(cur) >= GROUP_MIN:
            groups.append(cur)
            cur = []
    if len(groups) < MIN_BATCHES:
        return None
    meds = [statistics.median(g) for g in groups]
    center = statistics.median(meds)
    if center <= 0:
        return math.inf
    return statistics.stdev(meds) / math.sqrt(len(meds)) / center


def noise_of(batches: Batches, clock: float = 0.0, overhead_s: float = 0.0,
             model: RunToRunModel | None = None) -> Noise:
    """The reported noise of the median of all samples in `batches` (overhead_s: the tare's error, absolute;
    model: the device's run-to-run model, None for the within-run parts only)."""
    samples = [x for b in batches for x in b]
    med = statistics.median(samples) if samples else 0.0
    rel_overhead = overhead_s / med if med > 0 else (math.inf if overhead_s else 0.0)
    modelled = model.spread(med) if model is not None else 0.0
    return Noise(median_rse(samples), batch_rse(batches), clock, rel_overhead, modelled,
                 model.source if model is not None else "")


class StoppingRule(Protocol):
    """Decides when the kept batches measure the location precisely enough."""

    def done(self, batches: Batches) -> bool:
        """True once sampling may stop because the measurement is precise enough."""
        ...

    def shortfall(self, batches: Batches) -> str:
        """Why `done` is still False, for the record's notes."""
        ...


@dataclass(frozen=True)
class NoiseTarget:
    """Today's rule: at least `min_samples` samples in MIN_BATCHES batches and within-run noise <= target."""

    rse_target: float
    min_samples: int

    def done(self, batches: Batches) -> bool:
        n = sum(len(b) for b in batches)
        if n < max(self.min_samples, 3):
            return False
        nz = noise_of(batches)
        return nz.batches is not None and nz.within <= self.rse_target

    def shortfall(self, batches: Batches) -> str:
        nz = noise_of(batches)
        return (f"only {len(batches)} batches (need {MIN_BATCHES} for the between-batch noise)"
                if nz.batches is None else f"within-run rse {nz.within:.2%}")
