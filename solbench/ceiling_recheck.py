"""A CPU run's cached bandwidth ceiling, measured again in this process before a record is called
faster than light because of it (issue 11 #2).

Why: on a VM a CPU's memory bandwidth depends on where a buffer's pages land, so one measurement reads
55 GB/s and the next 87 GB/s, while the windows of one measurement, over the same buffers, agree within
2%. A ceiling cached from a slow draw then makes a PyTorch baseline whose buffers got fast pages look
faster than light. So when any record of a CPU run is invalid for beating the cached memory ceiling,
the ceiling is measured again here, once per run, by calibrate's own code at the calibrated sizes, and
every record scored against the cached figure is scored again against the higher of the two. A higher
figure also raises the cache, so the next run starts from it. The run's `peaks.bandwidth_recheck` and
the records that asked for it say what happened.

It runs after the run's last record, when no worker is running: a measurement beside a timed kernel
would slow both.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solbench import peaks as peaks_mod
from solbench import sol
from solbench.calibration import best_measurement
from solbench.hardware import DeviceInfo
from solbench.peaks import Peaks
from solbench.results import Record
from solbench.worker import rescore_record, sol_verdict


@dataclass(frozen=True)
class Figure:
    """One measurement of the CPU's bandwidth ceiling."""

    rate: float                  # bytes/s: the best of copy/read/write, as the calibration takes it
    spread: float | None         # how far its second-best window fell behind the best (cpu_ceilings)
    busy: bool = False           # its windows never agreed: measured while other work took the CPU


Measure = Callable[[DeviceInfo], Figure]     # tests inject one; the run uses measure_here
NOT_MEASURED = Figure(0.0, None, busy=True)  # the re-measurement failed: the cached figure stands alone


def measure_here(info: DeviceInfo) -> Figure:
    """The bandwidth ceiling measured in this process, as `solbench calibrate --device cpu` measures it
    (cpu_ceilings.measure_cpu_bandwidth over buffers sized past this CPU's caches)."""
    from solbench import cpu_ceilings

    cache = info.cache_bytes
    try:
        ms = cpu_ceilings.measure_cpu_bandwidth(cpu_ceilings.cpu_bandwidth_bytes(cache),
                                                cpu_ceilings.cpu_chunk_bytes(cache))
    except (RuntimeError, MemoryError):   # no memory for the buffers now: a finished run is not lost for it
        return NOT_MEASURED
    best = best_measurement(ms, "copy", "read", "write")
    if best is None:
        return NOT_MEASURED
    return Figure(best.rate, best.spread, cpu_ceilings.BUSY in best.note)


@dataclass(frozen=True)
class Recheck:
    """The cached ceiling, the one measured again, and what the run was scored against."""

    cached: Figure
    fresh: Figure
    cached_file: str
    over_cached: int             # records that beat the cached ceiling and asked for the re-measurement
    cache_updated: bool = False

    @property
    def ceiling(self) -> float:
        # Each figure is the best a measurement reached, so each is a rate the memory did reach (a busy
        # machine only slows calls down): the higher one is the ceiling.
        return max(self.cached.rate, self.fresh.rate)

    @property
    def between(self) -> float:
        """How far the two measurements differ, relative to the higher (as a figure's own spread is)."""
        if self.fresh.busy or self.ceiling <= 0:
            return 0.0      # a busy figure measures the neighbours: its distance is no spread of the ceiling
        return abs(self.cached.rate - self.fresh.rate) / self.ceiling

    @property
    def own_spread(self) -> float:
        """The between-window spread of the figure scored against."""
        chosen = self.fresh if self.fresh.rate > self.cached.rate else self.cached
        return chosen.spread or 0.0

    @property
    def tolerance(self) -> float:
        # The tie tolerance is the chosen figure's own spread, not the gap between the two figures: the
        # lower figure was a slow draw (pages that landed badly), not an uncertainty of the higher one,
        # and a tolerance as wide as that gap (28% on this VM) would pass a byte formula 28% too small.
        return self.own_spread

    def note(self) -> str:
        if self.fresh.rate <= 0:
            return (f"CPU bandwidth ceiling could not be measured again in this process: scored against the "
                    f"cached calibration, {_gbps(self.cached.rate)} from {self.cached_file}")
        text = (f"CPU bandwidth ceiling re-measured in this process: {_gbps(self.fresh.rate)} (cached calibration: "
                f"{_gbps(self.cached.rate)} from {self.cached_file}); scored against the higher, "
                f"{_gbps(self.ceiling)}, tie tolerance {self.tolerance:.1%} (that figure's own spread; the two "
                f"measurements differ by {self.between:.1%})")
        if self.fresh.busy:
            text += "; the re-measurement was disturbed by other work (its windows never agreed)"
        if self.cache_updated:
            text += f"; the cache now starts from {_gbps(self.fresh.rate)}"
        return text

    def peaks(self, cached: Peaks) -> Peaks:
        """The run's peaks after the recheck: the higher ceiling, its tolerance, and this record of both."""
        noise = {**cached.noise, "memory_bandwidth": self.tolerance}
        return dataclasses.replace(cached, memory_bandwidth=self.ceiling, noise=noise,
                                   bandwidth_recheck=self.to_json())

    def to_json(self) -> dict[str, Any]:
        """`peaks.bandwidth_recheck` (docs/RESULTS.md)."""
        return {"cached": self.cached.rate, "cached_spread": self.cached.spread, "cached_file": self.cached_file,
                "fresh": self.fresh.rate, "fresh_spread": self.fresh.spread, "fresh_busy": self.fresh.busy,
                "ceiling": self.ceiling, "between": self.between, "tolerance": self.tolerance,
                "over_cached": self.over_cached, "cache_updated": self.cache_updated, "note": self.note()}


def beats_memory_ceiling(rec: Record, peaks: Peaks, cache_bytes: int | None = None) -> bool:
    """Whether `rec` is invalid because it beat its memory-bandwidth ceiling in `peaks` (the SOL verdict
    of a memory-bound score), not for another reason."""
    median = (rec.time_s or {}).get("median")
    if rec.status != "invalid" or not median or rec.flops is None or rec.bytes is None:
        return False
    s = sol.score(rec.flops, rec.bytes, median, rec.peak_flops, rec.peak_bandwidth)
    return s.bound == "memory" and rec.message == sol_verdict(s, rec, peaks, cache_bytes)[0]


def recheck_run(records: Iterable[Record], peaks: Peaks, info: DeviceInfo, cache_file: Path,
                measure: Measure | None = None) -> Peaks | None:
    """Measure the bandwidth ceiling again (once) if a record beat the cached one, and score the run's
    records against the higher figure; the run's new peaks, or None when no record asked for it."""
    if info.kind != "cpu" or peaks.source != "cpu-measured":
        return None
    cache_bytes = info.flushed_cache_bytes
    # Only records scored against this figure on this host (a cluster's other hosts have their own).
    mine = [r for r in records if r.peak_bandwidth == peaks.memory_bandwidth and r.host in (None, info.host)]
    over = [r for r in mine if beats_memory_ceiling(r, peaks, cache_bytes)]
    if not over:
        return None
    fresh = (measure or measure_here)(info)        # the one re-measurement of the run
    cached = Figure(peaks.memory_bandwidth, peaks.noise.get("memory_bandwidth"))
    # A figure from a busy machine is used for this run but never kept (as peaks.cpu_peaks does).
    updated = (not fresh.busy and fresh.rate > cached.rate
               and peaks_mod.raise_cpu_bandwidth(cache_file, fresh.rate, fresh.spread, _now()))
    recheck = Recheck(cached, fresh, str(cache_file), len(over), updated)
    rechecked = recheck.peaks(peaks)
    for r in mine:
        rescore_record(r, peaks, rechecked, cache_bytes)
    for r in over:
        r.warnings.append(recheck.note())
    return rechecked


def _gbps(rate: float) -> str:
    return f"{rate / 1e9:,.1f} GB/s"


def _now() -> str:
    return "measured " + _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
