"""The one place any peak source becomes the `Peaks` a run is scored against.

Sources, and what every results file calls them (`peaks.source`):
- `datasheet`: a table in specs/gpus/ matched on device name and SM count;
- `derived`: a GPU no table knows, peaks from NVML clocks and the SM count (with a loud warning);
- `file:<path>`: a table the user gave with --peaks FILE;
- `measured`: `solbench calibrate`'s file for this device (calibrated first, in a subprocess, if missing);
- `cpu-measured`: on a machine without CUDA, this CPU's copy bandwidth and matmul rate (cached).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from solbench.calibration import DEFAULT_DIR, fingerprint_for, load_calibration
from solbench.errors import UserError
from solbench.hardware import DeviceInfo
from solbench.jsonio import write_json_atomic
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
    # Measured ceilings only: the relative spread of the measurement behind each one ("memory_bandwidth",
    # "simt.fp32", "tensor.bf16", ...). A time that ties its ceiling within this is a tie, not SOL > 1.
    # After a CPU run re-measured its bandwidth ceiling, "memory_bandwidth" is the spread of the figure
    # scored against (ceiling_recheck.py).
    noise: dict[str, float] = field(default_factory=dict)
    # A CPU run whose records beat the cached bandwidth ceiling: both figures and what was scored against
    # (ceiling_recheck.Recheck.to_json); None when nothing asked for a re-measurement.
    bandwidth_recheck: dict[str, Any] | None = None

    def compute_peak(self, unit: str, key: str) -> float | None:
        """Peak FLOP/s for `key` (fp32, bf16, ...) on `unit` (simt, tensor); None if not known."""
        table = self.tensor if unit == "tensor" else self.simt
        return table.get(key)

    def noise_of(self, bound: str, unit: str | None = None, key: str | None = None) -> float:
        """The measured spread of the ceiling a record is bound by (0 for datasheet figures)."""
        name = "memory_bandwidth" if bound == "memory" else f"{unit}.{key}"
        return float(self.noise.get(name) or 0.0)

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


MODES = ("datasheet", "measured", "at-clock")   # or a path to a peak-table YAML file


def resolve(info: DeviceInfo, mode: str, cache_dir: Path, cpu_measured: Peaks | None = None
            ) -> tuple[Peaks, list[str]]:
    """The peaks for `--peaks mode` on the probed device, and warnings about them. On a CPU the peaks
    are always this CPU's measured ones (`cpu_measured`, measured where the probe ran)."""
    if info.kind == "cpu":
        if mode not in ("datasheet", "measured"):
            raise UserError(f"'{mode}' cannot be used without a CUDA device: on the CPU the peaks are always "
                            f"measured on this CPU", field="--peaks")
        if cpu_measured is None:
            raise RuntimeError("CPU peaks were not measured")
        if cpu_measured.notes.endswith(BUSY_NOTE):
            return cpu_measured, [f"this CPU's ceilings were {BUSY_NOTE} (other processes kept taking the CPU "
                                  f"away): scores may be off; run again on a quieter machine"]
        return cpu_measured, []
    # at-clock = datasheet peaks; each record's compute peak is rescaled in the worker
    mode = "datasheet" if mode == "at-clock" else mode
    if mode not in MODES:
        return load_peaks_file(Path(mode)), []
    if mode == "measured":
        return measured_peaks(info, cache_dir), []
    sheet = datasheet_peaks(info)
    if sheet is not None:
        return sheet, []
    peaks = derived_peaks(info)
    return peaks, [f"'{info.name}' ({info.sm_count} SMs) is in no peak table: peaks DERIVED from NVML clocks "
                   f"({peaks.notes}). Add a table under specs/gpus/ or pass --peaks FILE."]


def datasheet_peaks(info: DeviceInfo) -> Peaks | None:
    """The datasheet peaks of a probed GPU, when a table matches it."""
    table = match_table(info, load_gpu_tables())
    return table.peaks() if table else None


def check_mode(mode: str) -> None:
    """--peaks names a mode or an existing file: refuse anything else before a worker starts."""
    if mode not in MODES and not Path(mode).is_file():
        raise UserError(f"'{mode}' is neither {', '.join(MODES)} nor an existing peak-table file", field="--peaks")


# ---------------------------------------------------------------- datasheet tables

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


# ---------------------------------------------------------------- measured on this device

def calibration_dir_for(cache_dir: Path | None) -> Path:
    """Calibrations live in <out>/calibration, next to the run's cache folder <out>/cache."""
    return Path(cache_dir).parent / "calibration" if cache_dir is not None else DEFAULT_DIR


def measured_peaks(source: DeviceInfo | dict[str, Any] | str | Path, cache_dir: Path | None = None, *,
                   fallback: Peaks | None = None, calibrate_if_missing: bool = True) -> Peaks:
    """Peaks measured on this device, source 'measured'.

    `source` is the probed DeviceInfo (its calibration is looked up in `calibration_dir_for(cache_dir)`
    and measured first, in a subprocess, if there is none), a calibration dict as `load_calibration`
    returns it, or a fingerprint / path. With a DeviceInfo the fallback for keys the calibration does
    not measure is the device's datasheet table, when one matches.
    """
    if isinstance(source, DeviceInfo):
        if source.kind != "cuda":
            raise UserError("--peaks measured needs a CUDA device (on the CPU, peaks are always measured)",
                            field="--peaks")
        folder = calibration_dir_for(cache_dir)
        cal = load_calibration(fingerprint_for(source), folder)
        if cal is None:
            if not calibrate_if_missing:
                raise UserError(f"no calibration for '{source.name}' in {folder}: run `solbench calibrate` first",
                                field="--peaks")
            cal = load_calibration(calibrate_in_subprocess(f"cuda:{source.index}", folder))
            if cal is None:
                raise UserError(f"calibration wrote no file in {folder}", field="--peaks")
        if fallback is None:
            fallback = datasheet_peaks(source)
        return peaks_from_calibration(cal, fallback)
    if isinstance(source, dict):
        return peaks_from_calibration(source, fallback)
    cal = load_calibration(source, calibration_dir_for(cache_dir))
    if cal is None:
        raise UserError("calibration not found", file=str(source))
    return peaks_from_calibration(cal, fallback)


def peaks_from_calibration(calibration: dict[str, Any], fallback: Peaks | None = None) -> Peaks:
    """Peaks from a calibration (as `load_calibration` returns it), source 'measured'.

    The bandwidth ceiling is the best of copy, read and write: a kernel that only streams in one
    direction can beat the copy figure, and a ceiling below what a kernel reaches makes SOL > 1.
    Keys the calibration did not measure (fp64, int8, ...) come from `fallback`, and the notes say so.
    """
    bandwidths = [calibration.get(k) for k in ("memory_bandwidth", "read_bandwidth", "write_bandwidth")]
    bandwidth = max(float(b) for b in bandwidths if isinstance(b, (int, float)) and b > 0)
    simt = {k: float(v) for k, v in calibration["simt"].items()}
    tensor = {k: float(v) for k, v in calibration["tensor"].items()}
    borrowed: list[str] = []
    if fallback is not None:
        for unit, mine, theirs in (("simt", simt, fallback.simt), ("tensor", tensor, fallback.tensor)):
            for k, v in theirs.items():
                if k not in mine:
                    mine[k] = v
                    borrowed.append(f"{unit}.{k}")
    notes = (f"measured by solbench calibrate on {calibration.get('date', '?')} "
             f"({calibration.get('fingerprint', '?')}); bandwidth = best of copy/read/write")
    if borrowed:
        notes += f"; from {fallback.source} peaks ({fallback.name}): {', '.join(borrowed)}"
    clocks = calibration.get("clocks") or {}
    # Borrowed datasheet figures carry no noise: only what this calibration measured does.
    noise = {k: float(v) for k, v in (calibration.get("noise") or {}).items() if isinstance(v, (int, float))}
    return Peaks(name=str(calibration["device"]), source="measured", memory_bandwidth=bandwidth,
                 simt=simt, tensor=tensor, clock_mhz=clocks.get("sm_mhz_max"),
                 l2_bytes=calibration.get("l2_bytes"), notes=notes, noise=noise)


def calibrate_in_subprocess(device: str = "cuda", folder: Path = DEFAULT_DIR, quick: bool = False,
                            timeout_s: float = 300.0) -> Path:
    """Run the calibration in a fresh process (CUDA stays out of the caller); returns the file written."""
    cmd = [sys.executable, "-m", "solbench.calibrate", "--device", device, "--out", str(folder)]
    if quick:
        cmd.append("--quick")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise UserError(f"calibration did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"calibration failed: {tail[0]}")
    return Path(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- CPU ceilings

def cpu_peaks_path(cache_dir: Path, info: DeviceInfo) -> Path:
    """The file caching this CPU's ceilings (`info` as the probe saw it: its torch is the one that measures)."""
    # The method is part of the key: ceilings cached by an older way of measuring are measured again.
    key = f"{info.name}|{info.cpu_threads}|{info.cache_bytes}|{info.torch}|{CPU_CEILINGS_METHOD}"
    return Path(cache_dir) / f"cpu-{hashlib.sha1(key.encode()).hexdigest()[:12]}.json"


def cpu_peaks(cache_dir: Path, info: DeviceInfo) -> Peaks:
    """Measure (or reuse) this CPU's copy bandwidth and matmul rates; cached, a few seconds the first time."""
    cache = cpu_peaks_path(cache_dir, info)
    if cache.is_file():
        try:
            return Peaks(**json.loads(cache.read_text()))
        except (ValueError, TypeError):
            pass  # a stale or corrupt cache is simply measured again
    peaks = measure_cpu_peaks(info.name, info.cache_bytes)
    if not peaks.notes.endswith(BUSY_NOTE):   # a ceiling measured on a busy machine is used once, never kept
        write_json_atomic(cache, peaks.to_json())
    return peaks


BUSY_NOTE = "measured on a busy machine: not cached, measured again next run"
RAISED_NOTE = "; bandwidth raised by a run that measured it again"


def raise_cpu_bandwidth(cache: Path, rate: float, spread: float | None, when: str) -> bool:
    """Raise the cached bandwidth ceiling to `rate` (B/s, re-measured by a run: ceiling_recheck.py) with the
    spread of its windows, so the next run starts from the best figure seen; False when there is no
    readable cache or it is already as high (another run may have raised it meanwhile)."""
    try:
        cached = Peaks(**json.loads(cache.read_text()))
    except (OSError, ValueError, TypeError):
        return False      # no kept calibration (e.g. a busy one): nothing to raise, the next run measures
    if rate <= cached.memory_bandwidth:
        return False
    noise = {k: v for k, v in cached.noise.items() if k != "memory_bandwidth"}
    if spread is not None:
        noise["memory_bandwidth"] = spread
    notes = f"{cached.notes.split(RAISED_NOTE)[0]}{RAISED_NOTE} ({rate / 1e9:.1f} GB/s, {when})"
    write_json_atomic(cache, Peaks(**{**asdict(cached), "memory_bandwidth": rate, "noise": noise,
                                      "notes": notes}).to_json())
    return True


CPU_CEILINGS_METHOD = "2: best of windows, preempted calls out, 8x the caches"


def measure_cpu_peaks(name: str, cache_bytes: int | None = None) -> Peaks:
    """This CPU's ceilings, measured by `solbench calibrate`'s CPU path (copy/read/write, fp32/bf16 matmul)."""
    from solbench.cpu_ceilings import BUSY, measure_cpu

    cal = measure_cpu(name=name, cache_bytes=cache_bytes).to_json()
    bandwidth = max(b for b in (cal["memory_bandwidth"], cal.get("read_bandwidth"), cal.get("write_bandwidth")) if b)
    # One compute figure for every precision and unit: CPU kernels for bf16/fp16 mostly convert to fp32
    # and run on the same vector units, so the best matmul rate is the ceiling none should beat.
    rates = {**{f"simt.{k}": v for k, v in cal["simt"].items()}, **{f"tensor.{k}": v for k, v in cal["tensor"].items()}}
    best_key = max(rates, key=rates.get)
    best = rates[best_key]
    noise = cal.get("noise") or {}
    compute_noise = {f"{unit}.{k}": noise[best_key] for unit, keys in (("simt", _CPU_SIMT), ("tensor", _CPU_TENSOR))
                     for k in keys} if best_key in noise else {}
    bandwidth_noise = {"memory_bandwidth": noise["memory_bandwidth"]} if "memory_bandwidth" in noise else {}
    busy = sorted({m["what"] for m in cal["measurements"] if BUSY in m["note"]})
    return Peaks(
        name=name, source="cpu-measured", memory_bandwidth=bandwidth,
        simt={k: best for k in _CPU_SIMT}, tensor={k: best for k in _CPU_TENSOR},
        notes=f"measured on this CPU with {cal.get('cpu_threads')} threads (best of copy/read/write bandwidth "
              f"over {cal['measurements'][0]['size'] / 2**20:.0f} MiB; best matmul rate, {best_key.split('.')[1]}, "
              f"for every precision)" + (f"; {', '.join(busy)} {BUSY_NOTE}" if busy else ""),
        noise={**bandwidth_noise, **compute_noise},
    )


_CPU_SIMT = ("fp32", "fp16", "bf16", "fp64")
_CPU_TENSOR = ("fp32", "tf32", "bf16", "fp16", "fp64")
