"""Which device is this? `DeviceInfo`, everything a results file records about where it ran.

`probe_device` initialises CUDA, so the executors call it in a worker process, never in the CLI's.
The device's ceilings are peaks.py's business.
"""

from __future__ import annotations

import platform
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from solbench.nvml import device_facts


@dataclass(frozen=True)
class DeviceInfo:
    """Everything a results file records about where it ran."""

    kind: str                      # cuda | cpu
    name: str
    index: int = 0
    sm_count: int | None = None
    compute_capability: tuple[int, int] | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str = ""
    python: str = field(default_factory=platform.python_version)
    host: str = field(default_factory=socket.gethostname)
    clocks: dict[str, float] | None = None   # sm_mhz, mem_mhz, sm_max_mhz, mem_max_mhz, mem_bus_bits
    cpu_threads: int | None = None
    cache_bytes: int | None = None           # CPU: all its L2 and L3 caches, each counted once (what a flush evicts)

    @property
    def flushed_cache_bytes(self) -> int | None:
        """The cache a timer evicts before each call: the GPU's L2, or all of a CPU's caches."""
        return self.l2_bytes if self.kind == "cuda" else self.cache_bytes

    @property
    def memory_gib(self) -> float | None:
        return self.memory_bytes / 2**30 if self.memory_bytes else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["device_kind"] = d.pop("kind")
        d["device"] = d.pop("name")
        d["device_index"] = d.pop("index")
        cc = self.compute_capability
        d["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
        return d


# ---------------------------------------------------------------- probing (call in a worker for CUDA)

def probe_device(device: str) -> DeviceInfo:
    import torch

    common = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if device == "cpu":
        return DeviceInfo(kind="cpu", name=_cpu_name(), cpu_threads=torch.get_num_threads(),
                          cache_bytes=cpu_cache_bytes(), **common)
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    nvml = device_facts(index)
    return DeviceInfo(
        kind="cuda", name=props.name, index=index, sm_count=props.multi_processor_count,
        compute_capability=(props.major, props.minor), l2_bytes=getattr(props, "L2_cache_size", None),
        memory_bytes=props.total_memory, driver=nvml.pop("driver", None), clocks=nvml or None, **common,
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_cache_bytes(root: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """Bytes of this machine's L2 and L3 caches, each physical cache counted once; None if unknown.

    Linux lists every cache once per CPU that shares it (index*/shared_cpu_list); elsewhere the C
    library's sysconf figures (one L2 per CPU, one L3) are the fallback.
    """
    seen: dict[tuple[str, str, str], int] = {}
    for index in sorted(root.glob("cpu[0-9]*/cache/index[0-9]*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            shared = (index / "shared_cpu_list").read_text().strip()
            size = _cache_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if level in ("2", "3") and kind in ("Unified", "Data") and size:
            seen[(level, kind, shared)] = size
    if seen:
        return sum(seen.values())
    return _sysconf_cache_bytes()


def _cache_size(text: str) -> int:
    """'1024K' / '32M' / '512' -> bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def _sysconf_cache_bytes() -> int | None:
    import os

    def conf(name: str) -> int:
        try:
            return max(int(os.sysconf(name)), 0)
        except (ValueError, OSError):
            return 0

    total = conf("SC_LEVEL2_CACHE_SIZE") * (os.cpu_count() or 1) + conf("SC_LEVEL3_CACHE_SIZE")
    return total or None
