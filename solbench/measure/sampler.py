"""Collecting batches of samples until the stopping rule (or the budget) says enough.

A batch seen while the GPU throttled is thrown away and measured again after a pause; once
throttling has persisted for `max_discards` batches it is accepted and the record says so, rather
than measuring forever on a card that cannot cool down.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from solbench.measure.config import Measurement, TimingConfig
from solbench.measure.noise import Batches, Noise, NoiseTarget, StoppingRule, noise_of
from solbench.noise_model import RunToRunModel
from solbench.stats import summarize
from solbench.telemetry import ClockMonitor


@dataclass
class Sampler:
    """Keeps batches (dropping throttled ones) until `rule` is met, the budget or max_samples runs out."""

    config: TimingConfig
    monitor: ClockMonitor
    device_kind: str = "cuda"             # picks the default run-to-run model
    overhead_se_s: float = 0.0            # events tare's standard error
    rule: StoppingRule | None = None      # None: NoiseTarget from the config
    batches: Batches = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    discards: int = 0
    throttled: bool = False
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self._rule: StoppingRule = self.rule or NoiseTarget(self.config.rse_target, self.config.min_samples)

    @property
    def run_to_run_model(self) -> RunToRunModel:
        return self.config.model_for(self.device_kind)

    @property
    def samples(self) -> list[float]:
        return [x for b in self.batches for x in b]

    def noise(self) -> Noise:
        return noise_of(self.batches, self.monitor.sm_rel_sd(), self.overhead_se_s, self.run_to_run_model)

    def add(self, batch: list[float], throttle: str | None) -> bool:
        """Keep (or drop) one batch; True when sampling should stop."""
        if throttle and self.discards < self.config.max_discards:
            self.discards += 1
            time.sleep(self.config.throttle_pause_s)   # let the GPU cool down / the clock recover
            self.started += self.config.throttle_pause_s
            return False
        if throttle and not self.throttled:
            self.throttled = True
            self.notes.append(f"throttled: {throttle} persisted after {self.discards} re-measured batches; "
                              f"samples kept, the time is pessimistic")
        self.batches.append(list(batch))
        n = sum(len(b) for b in self.batches)
        out_of_budget = time.perf_counter() - self.started > self.config.budget_s and n >= min(self.config.min_samples, 3)
        return self._done() or out_of_budget or n >= self.config.max_samples

    def _done(self) -> bool:
        return self._rule.done(self.batches)

    def result(self, timer: str, flush_bytes: int) -> Measurement:
        samples = self.samples
        reached = self._done()
        nz = self.noise()
        notes = list(self.notes)
        if not reached:
            notes.append(f"noise target {self.config.rse_target:.2%} not reached "
                         f"({self._rule.shortfall(self.batches)} after {len(samples)} samples)")
        stats = dataclasses.replace(summarize(samples), rse=nz.total)
        return Measurement(samples, stats, timer, reached, self.config.rse_target, flush_bytes, notes,
                           self.throttled, noise=nz)
