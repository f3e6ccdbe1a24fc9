"""Clocks, temperature, power and throttle reasons from NVML, sampled around and during each measurement.

A GPU that throttles while it is being timed gives times that say more about its cooling than about the
kernel. The timer asks `ClockMonitor.during()` once per batch of timed iterations (while the GPU is busy
with that batch); a batch seen with the SM clock below `MIN_CLOCK_FRACTION` of its maximum, or with a
thermal or power throttle reason set, is discarded and measured again after a pause. Persistent
throttling becomes a warning on the record.

Without NVML (no driver access, a CPU run) the monitor is a no-op that says telemetry is off.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from solbench.nvml import NvmlDevice, NvmlUnavailable, decode_clock_events, optional, slowdowns

MIN_CLOCK_FRACTION = 0.75   # nvbench's rule: below 75% of the max SM clock the sample is not representative


@dataclass(frozen=True)
class Sample:
    t: float                  # seconds since the monitor opened
    sm_mhz: float
    mem_mhz: float
    temp_c: float | None
    power_w: float | None
    reasons: int              # raw NVML clock-event reasons bitmask

    def throttle_reasons(self) -> list[str]:
        """The reasons set that mean heat or power (solbench.nvml's vocabulary)."""
        return slowdowns(decode_clock_events(self.reasons))

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t, 4), "sm_mhz": self.sm_mhz, "mem_mhz": self.mem_mhz, "temp_c": self.temp_c,
                "power_w": self.power_w, "throttle": self.throttle_reasons()}


def is_throttled(s: Sample, sm_max_mhz: float | None) -> str | None:
    """Why this sample must not count, or None."""
    reasons = s.throttle_reasons()
    if reasons:
        return "throttle reason " + "+".join(reasons)
    if sm_max_mhz and s.sm_mhz < MIN_CLOCK_FRACTION * sm_max_mhz:
        return f"SM clock {s.sm_mhz:.0f} MHz < {MIN_CLOCK_FRACTION:.0%} of max {sm_max_mhz:.0f} MHz"
    return None


@dataclass
class ClockMonitor:
    """NVML sampler for one device. `enabled` is False (and every call a no-op) when NVML is unavailable."""

    device_index: int = 0
    enabled: bool = False
    off_reason: str = ""
    sm_max_mhz: float | None = None
    before: Sample | None = None
    after: Sample | None = None
    during_samples: list[Sample] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)   # why each discarded batch was thrown away
    mem_max_mhz: float | None = None
    _device: NvmlDevice | None = None
    _t0: float = 0.0

    @classmethod
    def open(cls, device_kind: str, device_index: int = 0) -> "ClockMonitor":
        if device_kind != "cuda":
            return cls(device_index, False, "telemetry off: not a CUDA device")
        try:
            dev = NvmlDevice.open(device_index)
        except NvmlUnavailable as exc:  # no driver access, no library: measure anyway, say so
            return cls(device_index, False, f"telemetry off: NVML unavailable ({exc})")
        try:
            sm_max = float(dev.max_clock_mhz("sm"))
        except Exception as exc:
            dev.close()
            return cls(device_index, False, f"telemetry off: NVML unavailable ({type(exc).__name__}: {exc})")
        mem_max = optional(lambda: float(dev.max_clock_mhz("mem")))
        return cls(device_index, True, "", sm_max, mem_max_mhz=mem_max, _device=dev, _t0=time.perf_counter())

    def close(self) -> None:
        if self._device is not None:
            self._device.close()
            self._device = None
        self.enabled = False

    def reset(self) -> None:
        """Start a fresh record (one per measured implementation and case)."""
        self.before = self.after = None
        self.during_samples = []
        self.discarded = []

    def sample(self) -> Sample | None:
        dev = self._device
        if not self.enabled or dev is None:
            return None
        try:
            sm, mem = float(dev.clock_mhz("sm")), float(dev.clock_mhz("mem"))
        except Exception:
            return None
        return Sample(time.perf_counter() - self._t0, sm, mem, dev.temperature_c(), dev.power_w(),
                      dev.clock_event_mask() or 0)

    def mark_before(self) -> None:
        self.before = self.sample()

    def mark_after(self) -> None:
        self.after = self.sample()

    def during(self) -> str | None:
        """Sample now (the GPU is busy with a timed batch); the reason to discard the batch, or None."""
        s = self.sample()
        if s is None:
            return None
        self.during_samples.append(s)
        why = is_throttled(s, self.sm_max_mhz)
        if why:
            self.discarded.append(why)
        return why

    def observed_sm_mhz(self) -> float | None:
        """Median SM clock over the batches that were kept."""
        kept = [s.sm_mhz for s in self.during_samples if is_throttled(s, self.sm_max_mhz) is None]
        return statistics.median(kept) if kept else None

    def sm_rel_sd(self) -> float:
        """Relative standard deviation of the SM clock over the kept batches (0 without NVML or with < 2).

        A kernel's time is at most inversely proportional to the SM clock, so this bounds how much the
        clock this run happened to settle at can move its median: one of the noise components.
        """
        kept = [s.sm_mhz for s in self.during_samples if is_throttled(s, self.sm_max_mhz) is None]
        if len(kept) < 2 or statistics.fmean(kept) <= 0:
            return 0.0
        return statistics.stdev(kept) / statistics.fmean(kept)

    def clock_range(self) -> dict[str, float]:
        """Lowest and highest SM/memory clocks over every during-sample, and the maxima (what a calibration records)."""
        out: dict[str, float] = {}
        sm = [s.sm_mhz for s in self.during_samples]
        mem = [s.mem_mhz for s in self.during_samples]
        if sm:
            out.update(sm_mhz_min=min(sm), sm_mhz_max=max(sm))
        if mem:
            out.update(mem_mhz_min=min(mem), mem_mhz_max=max(mem))
        if self.sm_max_mhz is not None and self.mem_max_mhz is not None:
            out.update(sm_max_mhz=self.sm_max_mhz, mem_max_mhz=self.mem_max_mhz)
        return out

    def summary(self, persistent: bool) -> dict[str, Any]:
        if not self.enabled:
            return {"enabled": False, "reason": self.off_reason}
        d = self.during_samples
        out: dict[str, Any] = {
            "enabled": True, "sm_max_mhz": self.sm_max_mhz,
            "before": self.before.to_json() if self.before else None,
            "after": self.after.to_json() if self.after else None,
            "during": _spread(d), "discarded_batches": len(self.discarded),
            "discard_reasons": sorted(set(self.discarded)), "throttled": persistent,
            "observed_sm_mhz": self.observed_sm_mhz(), "sm_rel_sd": self.sm_rel_sd(),
        }
        return out


def _spread(samples: list[Sample]) -> dict[str, Any]:
    """min / median / max of each quantity over the during-samples (the full list would bloat the file)."""
    if not samples:
        return {"n": 0}
    out: dict[str, Any] = {"n": len(samples)}
    for key in ("sm_mhz", "mem_mhz", "temp_c", "power_w"):
        vals = [getattr(s, key) for s in samples if getattr(s, key) is not None]
        if vals:
            out[key] = {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}
    out["throttle"] = sorted({r for s in samples for r in s.throttle_reasons()})
    return out

