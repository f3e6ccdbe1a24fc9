"""A stand-in pynvml module with one H200-like device, for tests of the NVML wrapper and its users."""

from __future__ import annotations

import types


class NVMLError(Exception):
    pass


def fake_pynvml(*, init_error: Exception | None = None, sm: int = 1980, mem: int = 3201, reasons: int = 0x1,
                missing: tuple[str, ...] = (), processes: tuple = ()) -> types.ModuleType:
    """A pynvml with one H200-like device; `missing` names functions that raise (not supported)."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU, m.NVML_FEATURE_ENABLED = 1, 2, 0, 1
    m.calls = {"init": 0, "shutdown": 0}

    def init():
        if init_error:
            raise init_error
        m.calls["init"] += 1

    def shutdown():
        m.calls["shutdown"] += 1

    def handle(index):
        if index != 0:
            raise NVMLError("Invalid Argument")
        return "h0"

    funcs = {
        "nvmlInit": init, "nvmlShutdown": shutdown, "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetClockInfo": lambda h, d: sm if d == 1 else mem,
        "nvmlDeviceGetMaxClockInfo": lambda h, d: 1980 if d == 1 else 3201,
        "nvmlDeviceGetApplicationsClock": lambda h, d: 1980,
        "nvmlDeviceGetDefaultApplicationsClock": lambda h, d: 1980,
        "nvmlDeviceGetMemoryBusWidth": lambda h: 6144,
        "nvmlDeviceGetTemperature": lambda h, s: 45,
        "nvmlDeviceGetPowerUsage": lambda h: 120_500,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: reasons,
        "nvmlSystemGetDriverVersion": lambda: b"580.159.04",
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(total=141 * 2**30, used=2**30, free=140 * 2**30),
        "nvmlDeviceGetPersistenceMode": lambda h: 1,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: list(processes),
        "nvmlSystemGetProcessName": lambda pid: b"/usr/bin/python3",
    }
    for name, fn in funcs.items():
        if name in missing:
            def unsupported(*a, _name=name):
                raise NVMLError(f"Not Supported ({_name})")
            fn = unsupported
        setattr(m, name, fn)
    return m
