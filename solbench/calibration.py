"""A calibration: the ceilings measured on one device, as a record and as a file.

`solbench calibrate` (calibrate.py) measures; this module is what it produces and what the rest of
solbench reads: the record (`Calibration`, built from `Measured` figures by `assemble`), its file
results/calibration/<fingerprint>.json (schema SCHEMA, written atomically), and the table comparing
it with a datasheet. Units and keys follow `peaks.Peaks`: bytes/s and FLOP/s, `simt.fp32`,
`tensor.{tf32,bf16,fp16,fp8}`. No torch and no device here.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solbench.errors import UserError
from solbench.hardware import DeviceInfo

if TYPE_CHECKING:  # peaks.py reads calibrations: importing it here would be a circle
    from solbench.peaks import Peaks
from solbench.jsonio import read_versioned, write_json_atomic

SCHEMA = "solbench.calibration/1"
DEFAULT_DIR = Path("results") / "calibration"


@dataclass
class Measured:
    """One measurement: what ran, at what size, and the best rate over the timed batches."""

    what: str          # copy | read | write | l2_read | l2_copy | matmul_<key>
    unit: str          # B/s | FLOP/s
    size: int          # bytes of the working set, or n of an n^3 matmul
    work: float        # bytes moved or FLOPs per call
    best_s: float      # best time per call
    rate: float        # work / best_s
    note: str = ""
    spread: float | None = None   # (median - best) / median over the repeats best_s is the best of


@dataclass
class Calibration:
    schema: str
    fingerprint: str
    device_kind: str                 # cuda | cpu
    device: str
    sm_count: int | None
    memory_bytes: int | None
    compute_capability: str | None
    l2_bytes: int | None
    driver: str | None
    torch: str
    cuda: str | None
    date: str
    clocks: dict[str, float]         # SM/memory clocks NVML reported while the work ran
    memory_bandwidth: float          # bytes/s, device-to-device copy (bytes read + written)
    read_bandwidth: float | None
    write_bandwidth: float | None
    l2_bandwidth: float | None
    simt: dict[str, float]
    tensor: dict[str, float]
    measurements: list[dict[str, Any]] = field(default_factory=list)
    quick: bool = False
    # Relative spread of the measurement behind each ceiling, keyed like Peaks.noise: "memory_bandwidth"
    # (the best of copy/read/write, which peaks use), "simt.fp32", "tensor.bf16", ...
    noise: dict[str, float] = field(default_factory=dict)
    cpu_threads: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- naming and files

def fingerprint(device_name: str, sm_count: int | None, memory_bytes: int | None,
                cpu_threads: int | None = None) -> str:
    """A file-name-safe key for one kind of device: name + SM count + memory size (GiB)."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "device"
    parts = [slug]
    if sm_count:
        parts.append(f"{sm_count}sm")
    if memory_bytes:
        parts.append(f"{round(memory_bytes / 2**30)}gib")
    if cpu_threads:
        parts.append(f"{cpu_threads}t")
    return "-".join(parts)


def calibration_path(fp: str, folder: Path = DEFAULT_DIR) -> Path:
    return Path(folder) / f"{fp}.json"


def write_calibration(cal: Calibration, folder: Path = DEFAULT_DIR) -> Path:
    """Write atomically (a reader never sees half a file): <folder>/<fingerprint>.json."""
    return write_json_atomic(calibration_path(cal.fingerprint, folder), cal.to_json())


def load_calibration(fingerprint_or_path: str | Path, folder: Path = DEFAULT_DIR) -> dict[str, Any] | None:
    """The calibration for a fingerprint (looked up in `folder`) or a path; None if there is none."""
    given = Path(fingerprint_or_path)
    path = given if given.suffix == ".json" or given.is_file() else calibration_path(str(fingerprint_or_path), folder)
    if not path.is_file():
        return None
    data = read_versioned(path, SCHEMA, "calibration file", ("device", "memory_bandwidth", "simt", "tensor"),
                          unreadable="cannot read calibration")
    bw = data["memory_bandwidth"]
    if not isinstance(bw, (int, float)) or bw <= 0:
        raise UserError(f"expected a positive number, got {bw!r}", file=path, field="memory_bandwidth")
    return data


def fingerprint_for(info: DeviceInfo) -> str:
    """The fingerprint `measure_gpu` gives the device that `hardware.probe_device` described."""
    return fingerprint(info.name, info.sm_count, info.memory_bytes)


# ---------------------------------------------------------------- assembling the record

def best_rate(results: list[Measured], *whats: str) -> float | None:
    best = best_measurement(results, *whats)
    return best.rate if best else None


def best_measurement(results: list[Measured], *whats: str) -> Measured | None:
    usable = [m for m in results if m.what in whats and m.rate > 0 and math.isfinite(m.rate)]
    return max(usable, key=lambda m: m.rate) if usable else None


def _noise(results: list[Measured], simt: dict[str, float], tensor: dict[str, float]) -> dict[str, float]:
    """The spread of the measurement behind each ceiling (docs/RESULTS.md, peaks.noise)."""
    out: dict[str, float] = {}
    bandwidth = best_measurement(results, "copy", "read", "write")
    if bandwidth and bandwidth.spread is not None:
        out["memory_bandwidth"] = bandwidth.spread
    for unit, table in (("simt", simt), ("tensor", tensor)):
        for key in table:
            m = best_measurement(results, f"matmul_{key}")
            if m and m.spread is not None:
                out[f"{unit}.{key}"] = m.spread
    return out


def assemble(results: list[Measured], *, device_kind: str, name: str, sm_count: int | None,
              memory_bytes: int | None, cc: str | None, l2_bytes: int | None, driver: str | None,
              cuda: str | None, torch_version: str, clocks: dict[str, float], quick: bool,
              cpu_threads: int | None = None) -> Calibration:
    copy = best_rate(results, "copy")
    if copy is None:
        raise RuntimeError("the copy bandwidth measurement failed; nothing to calibrate against")
    matmul: dict[str, float] = {}
    for m in results:  # the best rate per precision over the sizes tried
        if m.what.startswith("matmul_") and m.rate > 0 and math.isfinite(m.rate):
            key = m.what.removeprefix("matmul_")
            matmul[key] = max(m.rate, matmul.get(key, 0.0))
    if device_kind == "cpu":
        # Each precision as measured (fp32 on the vector units is the fp32 matmul). That no precision
        # may beat another's ceiling is a scoring decision: peaks.measure_cpu_peaks makes it.
        simt = {"fp32": matmul["fp32"]} if "fp32" in matmul else {}
        tensor = dict(matmul)
    else:
        simt = {"fp32": matmul["fp32"]} if "fp32" in matmul else {}
        tensor = {k: v for k, v in matmul.items() if k in ("tf32", "bf16", "fp16", "fp8")}
    fp = fingerprint(name, sm_count, memory_bytes, cpu_threads)
    return Calibration(
        schema=SCHEMA, fingerprint=fp, device_kind=device_kind, device=name, sm_count=sm_count,
        memory_bytes=memory_bytes, compute_capability=cc, l2_bytes=l2_bytes, driver=driver, torch=torch_version,
        cuda=cuda, date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), clocks=clocks,
        memory_bandwidth=copy, read_bandwidth=best_rate(results, "read"), write_bandwidth=best_rate(results, "write"),
        l2_bandwidth=best_rate(results, "l2_read", "l2_copy"), simt=simt, tensor=tensor,
        measurements=[asdict(m) for m in results], quick=quick,
        noise=_noise(results, simt, tensor), cpu_threads=cpu_threads,
    )


# ---------------------------------------------------------------- report

def comparison_rows(cal: dict[str, Any], datasheet: Peaks | None) -> list[tuple[str, float, float | None, float | None]]:
    """(what, measured, datasheet, measured/datasheet) with rates in GB/s or TFLOP/s."""
    rows: list[tuple[str, float, float | None, float | None]] = []

    def add(label: str, measured: float | None, sheet: float | None, scale: float) -> None:
        if measured is None:
            return
        ratio = measured / sheet if sheet else None
        rows.append((label, measured / scale, sheet / scale if sheet else None, ratio))

    sheet_bw = datasheet.memory_bandwidth if datasheet else None
    add("DRAM copy (GB/s)", cal.get("memory_bandwidth"), sheet_bw, 1e9)
    add("DRAM read (GB/s)", cal.get("read_bandwidth"), sheet_bw, 1e9)
    add("DRAM write (GB/s)", cal.get("write_bandwidth"), sheet_bw, 1e9)
    add("L2 (GB/s)", cal.get("l2_bandwidth"), None, 1e9)
    if cal.get("device_kind") != "cuda":
        # A CPU: one row per matmul precision, in GFLOP/s (a CPU's TFLOP/s rounds to 0.0).
        for k, v in cal.get("tensor", {}).items():
            add(f"{k} matmul (GFLOP/s)", v, None, 1e9)
        return rows
    for k, v in cal.get("simt", {}).items():
        add(f"{k} CUDA cores (TFLOP/s)", v, datasheet.simt.get(k) if datasheet else None, 1e12)
    for k, v in cal.get("tensor", {}).items():
        add(f"{k} tensor (TFLOP/s)", v, datasheet.tensor.get(k) if datasheet else None, 1e12)
    return rows
