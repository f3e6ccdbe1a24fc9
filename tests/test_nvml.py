"""The one NVML wrapper and the clock monitor built on it, driven by a stand-in pynvml module."""

from __future__ import annotations

import sys
import types

import pytest

from solbench import nvml
from solbench.telemetry import ClockMonitor, Sample, is_throttled
from tests.fake_nvml import NVMLError, fake_pynvml


@pytest.fixture
def install(monkeypatch):
    def put(module: types.ModuleType | None) -> types.ModuleType | None:
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return put


# ---------------------------------------------------------------- the vocabulary


def test_one_vocabulary_for_clock_event_reasons():
    assert nvml.decode_clock_events(0x41) == ["gpu_idle", "hw_thermal_slowdown"]
    assert nvml.decode_clock_events(0) == []
    assert nvml.slowdowns(["gpu_idle", "sw_power_cap", "user_defined_clocks"]) == ["sw_power_cap"]


def test_the_bits_are_nvmls():
    real = pytest.importorskip("pynvml")
    camel = {"gpu_idle": "GpuIdle", "user_defined_clocks": "UserDefinedClocks", "sw_power_cap": "SwPowerCap",
             "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost", "sw_thermal_slowdown": "SwThermalSlowdown",
             "hw_thermal_slowdown": "HwThermalSlowdown", "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
             "display_clock_setting": "DisplayClockSetting"}
    assert set(camel) == set(nvml.CLOCK_EVENT_BITS)
    for name, bit in nvml.CLOCK_EVENT_BITS.items():
        constant = getattr(real, f"nvmlClocksEventReason{camel[name]}", None)
        if constant is not None:
            assert constant == bit, name


# ---------------------------------------------------------------- the device


def test_open_reports_why_not(install):
    install(None)                                    # `import pynvml` fails
    with pytest.raises(nvml.NvmlUnavailable, match="pynvml not importable"):
        nvml.NvmlDevice.open(0)
    install(fake_pynvml(init_error=NVMLError("Driver Not Loaded")))
    with pytest.raises(nvml.NvmlUnavailable, match="nvmlInit failed: NVMLError: Driver Not Loaded"):
        nvml.NvmlDevice.open(0)
    lib = install(fake_pynvml())
    with pytest.raises(nvml.NvmlUnavailable, match="no NVML device 3"):
        nvml.NvmlDevice.open(3)
    assert lib.calls == {"init": 1, "shutdown": 1}  # a failed open releases NVML


def test_device_reads_every_fact(install):
    proc = types.SimpleNamespace(pid=4242, usedGpuMemory=30000 * 2**20)
    lib = install(fake_pynvml(reasons=0x44, processes=(proc,)))
    with nvml.NvmlDevice.open(0) as dev:
        assert (dev.clock_mhz("sm"), dev.clock_mhz("mem"), dev.max_clock_mhz("sm")) == (1980, 3201, 1980)
        assert dev.bus_width_bits() == 6144 and dev.temperature_c() == 45.0
        assert dev.power_w() == pytest.approx(120.5) and dev.power_limit_w() == 700.0
        assert dev.clock_events() == ["sw_power_cap", "hw_thermal_slowdown"]
        assert dev.driver_version() == "580.159.04" and dev.persistence_mode() is True
        assert dev.memory().total_bytes == 141 * 2**30
        assert [p.describe() for p in dev.processes()] == ["4242 python3 (30000 MiB)"]
        with pytest.raises(ValueError, match="clock domain"):
            dev.clock_mhz("gpu")
    assert lib.calls == {"init": 1, "shutdown": 1}


def test_optional_facts_are_none_when_not_supported(install):
    install(fake_pynvml(missing=("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
                                 "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetPersistenceMode",
                                 "nvmlDeviceGetComputeRunningProcesses")))
    with nvml.NvmlDevice.open(0) as dev:
        assert dev.power_w() is None and dev.temperature_c() is None and dev.persistence_mode() is None
        assert dev.clock_event_mask() is None and dev.clock_events() == [] and dev.processes() == []


def test_device_facts_is_all_or_nothing(install):
    install(fake_pynvml())
    assert nvml.device_facts(0) == {"driver": "580.159.04", "sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980,
                                    "mem_max_mhz": 3201, "mem_bus_bits": 6144}
    install(fake_pynvml(missing=("nvmlDeviceGetMemoryBusWidth",)))
    assert nvml.device_facts(0) == {}
    install(fake_pynvml(missing=("nvmlDeviceGetClockInfo",)))
    assert nvml.device_facts(0) == {}
    install(None)
    assert nvml.device_facts(0) == {} and nvml.driver_version() is None


# ---------------------------------------------------------------- the clock monitor


def _sample(sm: float, reasons: int = 0) -> Sample:
    return Sample(0.0, sm, 3201.0, 50.0, 300.0, reasons)


def test_throttle_rules():
    assert is_throttled(_sample(1980), 1980) is None
    assert "75%" in is_throttled(_sample(1200), 1980)
    assert "sw_thermal" in is_throttled(_sample(1980, 0x20), 1980)
    assert "sw_power_cap" in is_throttled(_sample(1980, 0x4), 1980)
    assert is_throttled(_sample(1980, 0x1), 1980) is None    # GPU idle is not throttling
    assert _sample(1980, 0x21).to_json()["throttle"] == ["sw_thermal_slowdown"]


def test_monitor_without_nvml_is_off_and_says_so(install):
    mon = ClockMonitor.open("cpu")
    assert not mon.enabled and mon.during() is None and mon.sample() is None
    assert mon.summary(False) == {"enabled": False, "reason": "telemetry off: not a CUDA device"}
    install(fake_pynvml(init_error=NVMLError("Driver Not Loaded")))
    off = ClockMonitor.open("cuda", 0)
    assert not off.enabled and "NVML unavailable (nvmlInit failed" in off.off_reason


def test_monitor_samples_discards_and_summarises(install):
    lib = install(fake_pynvml(sm=1200, reasons=0x20))
    mon = ClockMonitor.open("cuda", 0)
    assert mon.enabled and mon.sm_max_mhz == 1980.0 and mon.mem_max_mhz == 3201.0
    mon.mark_before()
    assert "sw_thermal_slowdown" in mon.during()
    mon.mark_after()
    s = mon.summary(persistent=True)
    assert s["discarded_batches"] == 1 and s["before"]["throttle"] == ["sw_thermal_slowdown"]
    assert s["during"]["power_w"]["max"] == pytest.approx(120.5) and s["throttled"] is True
    assert mon.clock_range() == {"sm_mhz_min": 1200.0, "sm_mhz_max": 1200.0, "mem_mhz_min": 3201.0,
                                 "mem_mhz_max": 3201.0, "sm_max_mhz": 1980.0, "mem_max_mhz": 3201.0}
    mon.close()
    assert not mon.enabled and mon.sample() is None and lib.calls["shutdown"] == 1


def test_clock_spread_is_a_noise_component():
    mon = ClockMonitor.open("cpu")
    assert mon.sm_rel_sd() == 0.0
    mon.sm_max_mhz = 1980.0
    mon.during_samples = [_sample(1980), _sample(1940), _sample(1960)]
    assert mon.sm_rel_sd() == pytest.approx(20 / 1960, rel=1e-6)
    mon.during_samples.append(_sample(1000))   # a throttled sample is discarded, not counted
    assert mon.sm_rel_sd() == pytest.approx(20 / 1960, rel=1e-6)
