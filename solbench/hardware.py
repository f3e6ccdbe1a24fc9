"""Which device is this, and what are its ceilings?

Peaks come from one of four places, and every results file says which:
- `datasheet`: a table in specs/gpus/ matched on device name and SM count;
- `derived`: an unknown GPU, peaks computed from NVML clocks and SM count (with a loud warning);
- `file:<path>`: a table the user gave with --peaks FILE;
- `cpu-measured`: on a machine without CUDA, a large copy and a large matmul measured here.
`probe_device` initialises CUDA, so the runner calls it in a worker process, never in the CLI's.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from solbench.errors import UserError
from solbench.paths import specs_root


_TABLE_KEYS = {"name", "match", "compute_capability", "sm_count", "l2_bytes", "memory_gib",
               "boost_clock_mhz", "peak_clock_mhz", "memory_bandwidth_gbps", "memory_clock_mhz",
               "memory_bus_bits", "simt_tflops", "tensor_tflops", "sources", "notes",
               "simt_clock_mhz"}  # (gpu-tables helper) clock the CUDA-core figures assume, when not peak_clock_mhz
_TABLE_REQUIRED = ("name", "match", "sm_count", "l2_bytes", "peak_clock_mhz", "memory_bandwidth_gbps",
                   "simt_tflops", "tensor_tflops", "sources")
_MATCH_KEYS = {"names", "sm_count", "exclude", "memory_gib_min", "memory_gib_max"}

# FP32 lanes per SM by compute capability major.minor: used only to derive peaks for unknown GPUs.
_FP32_LANES = {(7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
               (9, 0): 128, (10, 0): 128, (12, 0): 128}


@dataclass(frozen=True)
class Peaks:
    """The ceilings a run is scored against. FLOP/s and bytes/s."""

    name: str
    source: str
    memory_bandwidth: float
    simt: dict[str, float]
    tensor: dict[str, float]
    clock_mhz: float | None = None
    l2_bytes: int | None = None
    notes: str = ""

    def compute_peak(self, unit: str, key: str) -> float | None:
        """Peak FLOP/s for `key` (fp32, bf16, ...) on `unit` (simt, tensor); None if not known."""
        table = self.tensor if unit == "tensor" else self.simt
        return table.get(key)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuTable:
    key: str
    path: Path
    name: str
    names: tuple[str, ...]
    exclude: tuple[str, ...]
    sm_count: int
    memory_gib_min: float | None
    memory_gib_max: float | None
    raw: dict[str, Any]

    def matches(self, device_name: str, sm_count: int | None, memory_gib: float | None) -> bool:
        lowered = device_name.lower()
        if not any(n.lower() in lowered for n in self.names):
            return False
        if any(x.lower() in lowered for x in self.exclude):
            return False
        if sm_count is not None and sm_count != self.sm_count:
            return False
        if memory_gib is not None:
            if self.memory_gib_min is not None and memory_gib < self.memory_gib_min:
                return False
            if self.memory_gib_max is not None and memory_gib > self.memory_gib_max:
                return False
        return True

    def peaks(self) -> Peaks:
        r = self.raw
        sources = r["sources"]
        return Peaks(
            name=self.name,
            source="datasheet",
            memory_bandwidth=float(r["memory_bandwidth_gbps"]) * 1e9,
            simt={k: float(v) * 1e12 for k, v in r["simt_tflops"].items()},
            tensor={k: float(v) * 1e12 for k, v in (r["tensor_tflops"] or {}).items()},
            clock_mhz=float(r["peak_clock_mhz"]),
            l2_bytes=int(r["l2_bytes"]),
            notes=f"{self.path.name}: compute: {sources.get('compute', '?')}; memory: {sources.get('memory', '?')}",
        )


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


# ---------------------------------------------------------------- GPU tables

def load_gpu_tables(folder: Path | None = None) -> list[GpuTable]:
    folder = folder if folder is not None else specs_root() / "gpus"
    tables = []
    for path in sorted(folder.glob("*.yaml")):
        tables.append(load_gpu_table(path))
    return tables


def load_gpu_table(path: Path) -> GpuTable:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read peak table: {exc}", file=path) from None
    if not isinstance(raw, dict):
        raise UserError("a peak table must be a mapping", file=path)
    unknown = sorted(set(raw) - _TABLE_KEYS)
    if unknown:
        raise UserError(f"unknown key '{unknown[0]}'", file=path, field=unknown[0])
    for key in _TABLE_REQUIRED:
        if key not in raw:
            raise UserError("missing required field", file=path, field=key)
    match = raw["match"]
    if not isinstance(match, dict) or not match.get("names"):
        raise UserError("expected {names: [...], sm_count: N}", file=path, field="match")
    bad = sorted(set(match) - _MATCH_KEYS)
    if bad:
        raise UserError(f"unknown key '{bad[0]}'", file=path, field=f"match.{bad[0]}")
    for section in ("simt_tflops", "tensor_tflops"):
        for k, v in (raw[section] or {}).items():
            if not isinstance(v, (int, float)) or v <= 0:
                raise UserError(f"expected a positive number, got {v!r}", file=path, field=f"{section}.{k}")
    return GpuTable(
        key=path.stem, path=path, name=str(raw["name"]),
        names=tuple(match["names"]), exclude=tuple(match.get("exclude", ())),
        sm_count=int(match.get("sm_count", raw["sm_count"])),
        memory_gib_min=match.get("memory_gib_min"), memory_gib_max=match.get("memory_gib_max"),
        raw=raw,
    )


def match_table(info: DeviceInfo, tables: Iterable[GpuTable]) -> GpuTable | None:
    found = [t for t in tables if t.matches(info.name, info.sm_count, info.memory_gib)]
    if len(found) > 1:
        names = ", ".join(t.path.name for t in found)
        raise UserError(f"device '{info.name}' matches several peak tables: {names}")
    return found[0] if found else None


def derived_peaks(info: DeviceInfo) -> Peaks:
    """Peaks for a GPU no table knows: FP32 from SM count and clock, bandwidth from NVML. No tensor figures."""
    clocks = info.clocks or {}
    lanes = _FP32_LANES.get(info.compute_capability or (0, 0), 128)
    sm_mhz = clocks.get("sm_max_mhz")
    simt = {"fp32": 2 * lanes * info.sm_count * sm_mhz * 1e6} if sm_mhz and info.sm_count else {}
    bandwidth = 0.0
    if clocks.get("mem_max_mhz") and clocks.get("mem_bus_bits"):
        bandwidth = 2 * clocks["mem_max_mhz"] * 1e6 * clocks["mem_bus_bits"] / 8
    return Peaks(name=info.name, source="derived", memory_bandwidth=bandwidth, simt=simt, tensor={},
                 clock_mhz=sm_mhz, l2_bytes=info.l2_bytes,
                 notes="unknown GPU: FP32 peak and bandwidth derived from NVML clocks; no tensor-core peaks")


def load_peaks_file(path: Path) -> Peaks:
    """--peaks FILE: a table in the specs/gpus format, used as is."""
    if not path.is_file():
        raise UserError("peak table not found", file=path)
    table = load_gpu_table(path)
    p = table.peaks()
    return Peaks(**{**asdict(p), "source": f"file:{path}"})


# ---------------------------------------------------------------- probing (call in a worker for CUDA)

def probe_device(device: str) -> DeviceInfo:
    import torch

    common = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if device == "cpu":
        return DeviceInfo(kind="cpu", name=_cpu_name(), cpu_threads=torch.get_num_threads(), **common)
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    nvml = _nvml_facts(index)
    return DeviceInfo(
        kind="cuda", name=props.name, index=index, sm_count=props.multi_processor_count,
        compute_capability=(props.major, props.minor), l2_bytes=getattr(props, "L2_cache_size", None),
        memory_bytes=props.total_memory, driver=nvml.pop("driver", None), clocks=nvml or None, **common,
    )


def _nvml_facts(index: int) -> dict[str, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            driver = pynvml.nvmlSystemGetDriverVersion()
            return {
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "mem_bus_bits": pynvml.nvmlDeviceGetMemoryBusWidth(h),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing or unreadable: the run goes on without clocks
        return {}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------- CPU ceilings

def cpu_peaks(cache_dir: Path, info: DeviceInfo) -> Peaks:
    """Measure (or reuse) this CPU's copy bandwidth and matmul rates; cached, a few seconds the first time."""
    import torch

    fingerprint = hashlib.sha1(f"{info.name}|{info.cpu_threads}|{torch.__version__}".encode()).hexdigest()[:12]
    cache = cache_dir / f"cpu-{fingerprint}.json"
    if cache.is_file():
        try:
            return Peaks(**json.loads(cache.read_text()))
        except (ValueError, TypeError):
            pass  # a stale or corrupt cache is simply measured again
    peaks = measure_cpu_peaks(info.name)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(peaks.to_json(), indent=1))
    os.replace(tmp, cache)
    return peaks


def measure_cpu_peaks(name: str) -> Peaks:
    """This CPU's ceilings, measured by `solbench calibrate`'s CPU path (copy/read/write, fp32/bf16 matmul)."""
    from solbench.calibrate import measure_cpu

    cal = measure_cpu().to_json()
    bandwidth = max(b for b in (cal["memory_bandwidth"], cal.get("read_bandwidth"), cal.get("write_bandwidth")) if b)
    # One compute figure for every precision and unit: CPU kernels for bf16/fp16 mostly convert to fp32
    # and run on the same vector units, so the best matmul rate is the ceiling none should beat.
    best = max([*cal["simt"].values(), *cal["tensor"].values()])
    return Peaks(
        name=name, source="cpu-measured", memory_bandwidth=bandwidth,
        simt={k: best for k in ("fp32", "fp16", "bf16", "fp64")},
        tensor={k: best for k in ("fp32", "tf32", "bf16", "fp16", "fp64")},
        notes="measured on this CPU (best of copy/read/write bandwidth; best matmul rate for every precision)",
    )
