"""The one NVML wrapper: what the driver says about a GPU (clocks, power, heat, throttling, processes).

Everything in solbench that reads NVML goes through `NvmlDevice`: the clock monitor that watches
each measurement (telemetry.py), the calibration, the doctor, and the device probe
(`device_facts`). One vocabulary names the clock-event ("throttle") reasons everywhere, and a
results file, the doctor and a calibration therefore agree on what "hw_thermal_slowdown" means.

Contract: opening a device raises `NvmlUnavailable` with a one-line reason (no pynvml, no driver,
no such device); the clocks raise pynvml's error when unreadable, because a device whose clock
cannot be read tells nothing else either; every other fact is None (or empty) when this device or
driver does not report it, since many are optional (power on some boards, app clocks on consumer cards).
pynvml is imported only when a device is opened, so importing this module costs nothing.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T")

# NVML's clock-event reason bits (nvml.h, nvmlClocksEventReason*). They are part of NVML's ABI, so
# masks decode without pynvml. Names are NVML's, snake-cased; bit 0x2 is "user defined clocks" in
# current NVML (locked clocks and application clocks both set it; older headers call it
# ApplicationsClocksSetting).
CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "user_defined_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
# The reasons that mean "slowed down by heat or power". Idleness, user-set clocks, sync boost and
# display clocks describe configuration or load, not throttling.
SLOWDOWN_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake_slowdown"})


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why in one line."""


def decode_clock_events(mask: int) -> list[str]:
    """Names of the clock-event reasons set in an NVML mask, in bit order."""
    return [name for name, bit in CLOCK_EVENT_BITS.items() if mask & bit]


def slowdowns(reasons: list[str]) -> list[str]:
    """The reasons among `reasons` that mean heat or power is slowing the GPU down."""
    return [r for r in reasons if r in SLOWDOWN_REASONS]


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_bytes: int | None

    def describe(self) -> str:
        """'pid name (N MiB)', as the doctor prints it."""
        mem = f" ({self.used_bytes / 2**20:.0f} MiB)" if self.used_bytes else ""
        return f"{self.pid} {os.path.basename(self.name)}{mem}"


@dataclass(frozen=True)
class MemoryInfo:
    total_bytes: int
    used_bytes: int
    free_bytes: int


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def optional(fn: Callable[[], T], default: T | None = None) -> T | None:
    """fn(), or `default` when NVML cannot answer (not supported, no permission, an old pynvml)."""
    try:
        return fn()
    except Exception:
        return default


class NvmlDevice:
    """An open NVML handle for one GPU; close it (or use `with`) to release NVML."""

    def __init__(self, lib: Any, handle: Any, index: int) -> None:
        self._lib = lib
        self._handle = handle
        self.index = index
        self._open = True

    @classmethod
    def open(cls, index: int = 0) -> "NvmlDevice":
        """Initialise NVML and take the handle of device `index`; NvmlUnavailable says why not."""
        try:
            lib = importlib.import_module("pynvml")
        except ImportError as exc:
            raise NvmlUnavailable(f"pynvml not importable: {exc}") from None
        try:
            lib.nvmlInit()
        except Exception as exc:
            raise NvmlUnavailable(f"nvmlInit failed: {type(exc).__name__}: {exc}") from None
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            optional(lib.nvmlShutdown)
            raise NvmlUnavailable(f"no NVML device {index}: {type(exc).__name__}: {exc}") from None
        return cls(lib, handle, index)

    def close(self) -> None:
        if self._open:
            self._open = False
            optional(self._lib.nvmlShutdown)   # NVML counts inits: one shutdown per open

    def __enter__(self) -> "NvmlDevice":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _domain(self, domain: str) -> Any:
        if domain not in ("sm", "mem"):
            raise ValueError(f"clock domain must be 'sm' or 'mem', got {domain!r}")
        return self._lib.NVML_CLOCK_SM if domain == "sm" else self._lib.NVML_CLOCK_MEM

    # Clocks: raise when unreadable.
    def clock_mhz(self, domain: str = "sm") -> int:
        """The clock now, MHz (domain 'sm' or 'mem')."""
        return int(self._lib.nvmlDeviceGetClockInfo(self._handle, self._domain(domain)))

    def max_clock_mhz(self, domain: str = "sm") -> int:
        return int(self._lib.nvmlDeviceGetMaxClockInfo(self._handle, self._domain(domain)))

    # Optional facts: None when not reported.
    def app_clock_mhz(self, domain: str = "sm") -> int | None:
        """The application clock: the target under load unless clocks are locked."""
        return optional(lambda: int(self._lib.nvmlDeviceGetApplicationsClock(self._handle, self._domain(domain))))

    def default_app_clock_mhz(self, domain: str = "sm") -> int | None:
        return optional(lambda: int(self._lib.nvmlDeviceGetDefaultApplicationsClock(self._handle,
                                                                                    self._domain(domain))))

    def bus_width_bits(self) -> int | None:
        return optional(lambda: int(self._lib.nvmlDeviceGetMemoryBusWidth(self._handle)))

    def temperature_c(self) -> float | None:
        return optional(lambda: float(self._lib.nvmlDeviceGetTemperature(self._handle,
                                                                         self._lib.NVML_TEMPERATURE_GPU)))

    def power_w(self) -> float | None:
        return optional(lambda: self._lib.nvmlDeviceGetPowerUsage(self._handle) / 1e3)

    def power_limit_w(self) -> float | None:
        return optional(lambda: self._lib.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1e3)

    def clock_event_mask(self) -> int | None:
        """The raw clock-event reasons mask (the newer NVML name first, the deprecated one otherwise)."""
        lib = self._lib
        fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        return optional(lambda: int(fn(self._handle))) if fn is not None else None

    def clock_events(self) -> list[str]:
        """The clock-event reasons set now, by name (empty when unreadable)."""
        return decode_clock_events(self.clock_event_mask() or 0)

    def driver_version(self) -> str | None:
        return optional(lambda: _text(self._lib.nvmlSystemGetDriverVersion()))

    def memory(self) -> MemoryInfo | None:
        def read() -> MemoryInfo:
            m = self._lib.nvmlDeviceGetMemoryInfo(self._handle)
            return MemoryInfo(int(m.total), int(m.used), int(m.free))

        return optional(read)

    def persistence_mode(self) -> bool | None:
        mode = optional(lambda: self._lib.nvmlDeviceGetPersistenceMode(self._handle))
        return None if mode is None else bool(mode == self._lib.NVML_FEATURE_ENABLED)

    def processes(self) -> list[GpuProcess]:
        """Compute processes on this GPU (empty when unreadable)."""
        out = []
        for p in optional(lambda: list(self._lib.nvmlDeviceGetComputeRunningProcesses(self._handle))) or []:
            name = optional(lambda p=p: _text(self._lib.nvmlSystemGetProcessName(p.pid))) or "?"
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(int(p.pid), name, int(used) if isinstance(used, int) else None))
        return out


def driver_version() -> str | None:
    """The NVIDIA driver version, or None without NVML."""
    try:
        dev = NvmlDevice.open(0)
    except NvmlUnavailable:
        return None
    with dev:
        return dev.driver_version()


def device_facts(index: int) -> dict[str, Any]:
    """What a results file records of the device: driver, clocks now and max, memory bus width.

    All or nothing: {} when NVML or any of these facts is unreadable (the run goes on without clocks,
    and an unknown GPU's derived peaks need all of them).
    """
    try:
        dev = NvmlDevice.open(index)
    except NvmlUnavailable:
        return {}
    with dev:
        try:
            clocks = {"sm_mhz": dev.clock_mhz("sm"), "mem_mhz": dev.clock_mhz("mem"),
                      "sm_max_mhz": dev.max_clock_mhz("sm"), "mem_max_mhz": dev.max_clock_mhz("mem")}
        except Exception:
            return {}
        driver, bus = dev.driver_version(), dev.bus_width_bits()
    if driver is None or bus is None:
        return {}
    return {"driver": driver, **clocks, "mem_bus_bits": bus}
