"""Measure the ceilings this device actually reaches: DRAM and L2 bandwidth, matmul throughput.

Datasheet peaks are never fully reachable; `solbench calibrate` measures what large, simple
operations reach on this card and writes them to results/calibration/<fingerprint>.json, so that
`solbench run --peaks measured` can score against them. Units and keys follow `hardware.Peaks`:
bytes/s and FLOP/s, `simt.fp32`, `tensor.{tf32,bf16,fp16,fp8}`.

The measuring functions initialise CUDA in the calling process: call them from the `calibrate`
command or from a worker process, never from a process that later forks CUDA workers.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from solbench.console import make_console
from solbench.errors import UserError
from solbench.hardware import DeviceInfo, Peaks

SCHEMA = "solbench.calibration/1"
DEFAULT_DIR = Path("results") / "calibration"

# Working sets: DRAM figures must not be flattered by the L2, so every DRAM buffer is at least
# this many times the L2 size; the L2 figure uses a working set well inside it.
DRAM_L2_MULTIPLE = 8
DRAM_MIN_BYTES = 512 * 2**20
DRAM_SIZE_STEPS = (1, 2, 4)          # multiples of the smallest DRAM working set tried
MAX_MEMORY_FRACTION = 0.25           # never take more than this share of free device memory
L2_FRACTION = 0.25                   # L2 working set = L2 size x this
L2_READ_PASSES = 64                  # the L2 read kernel sweeps its buffer this many times
MATMUL_N_GPU = 8192
BATCH_TARGET_S = 0.02                # each timed batch of calls lasts at least this long
MAX_REPS = 200
BATCHES = 5                          # best-of-N batches
SINGLE_CALL_BUDGET_S = 0.5           # matmuls: time spent timing single calls with solbench's timer
CPU_COPY_BYTES = 128 * 2**20
CPU_MATMUL_N = 1024
QUICK_CPU_COPY_BYTES = 8 * 2**20
QUICK_CPU_MATMUL_N = 128
CPU_MATMUL_CALL_S = 0.15             # CPU matmuls are sized to take about this long per call


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
    path = calibration_path(cal.fingerprint, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cal.to_json(), indent=1))
    os.replace(tmp, path)     # atomic: a reader never sees half a file
    return path


def load_calibration(fingerprint_or_path: str | Path, folder: Path = DEFAULT_DIR) -> dict[str, Any] | None:
    """The calibration for a fingerprint (looked up in `folder`) or a path; None if there is none."""
    given = Path(fingerprint_or_path)
    path = given if given.suffix == ".json" or given.is_file() else calibration_path(str(fingerprint_or_path), folder)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read calibration: {exc}", file=path) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UserError(f"expected schema '{SCHEMA}', got {got!r}", file=path, field="schema")
    for key in ("device", "memory_bandwidth", "simt", "tensor"):
        if key not in data:
            raise UserError("missing required field", file=path, field=key)
    bw = data["memory_bandwidth"]
    if not isinstance(bw, (int, float)) or bw <= 0:
        raise UserError(f"expected a positive number, got {bw!r}", file=path, field="memory_bandwidth")
    return data


def fingerprint_for(info: DeviceInfo) -> str:
    """The fingerprint `measure_gpu` gives the device that `hardware.probe_device` described."""
    return fingerprint(info.name, info.sm_count, info.memory_bytes)


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
            from solbench.hardware import load_gpu_tables, match_table

            table = match_table(source, load_gpu_tables())
            fallback = table.peaks() if table else None
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
    return Peaks(name=str(calibration["device"]), source="measured", memory_bandwidth=bandwidth,
                 simt=simt, tensor=tensor, clock_mhz=clocks.get("sm_mhz_max"),
                 l2_bytes=calibration.get("l2_bytes"), notes=notes)


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


# ---------------------------------------------------------------- timing

def _time_cuda(fn: Callable[[], Any], torch: Any, sample_clocks: Callable[[], None],
               batches: int = BATCHES) -> float:
    """Best time per call: CUDA events around a batch of back-to-back calls, best of `batches`."""
    fn()                                  # warm-up: allocations, cuBLAS heuristics, clocks ramp
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    estimate = max(time.perf_counter() - t0, 1e-6)
    reps = max(3, min(MAX_REPS, math.ceil(BATCH_TARGET_S / estimate)))
    best = math.inf
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        sample_clocks()                   # the GPU is busy now: NVML sees the clock under load
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / reps)
    return best


def _time_wall(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@contextlib.contextmanager
def _tf32(torch: Any, allow: bool) -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


class _ClockSampler:
    """Min/max SM and memory clocks NVML reports while work runs; silent when NVML is unreadable."""

    def __init__(self, index: int) -> None:
        self.sm: list[float] = []
        self.mem: list[float] = []
        self._nvml: Any = None
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # no NVML: clocks are simply not recorded
            self._nvml = None

    def __call__(self) -> None:
        if self._nvml is None:
            return
        try:
            self.sm.append(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            self.mem.append(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_MEM))
        except Exception:
            pass

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.sm:
            out.update(sm_mhz_min=min(self.sm), sm_mhz_max=max(self.sm))
        if self.mem:
            out.update(mem_mhz_min=min(self.mem), mem_mhz_max=max(self.mem))
        if self._nvml is not None:
            try:
                out["sm_max_mhz"] = self._nvml.nvmlDeviceGetMaxClockInfo(self._handle, self._nvml.NVML_CLOCK_SM)
                out["mem_max_mhz"] = self._nvml.nvmlDeviceGetMaxClockInfo(self._handle, self._nvml.NVML_CLOCK_MEM)
            except Exception:
                pass
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def driver(self) -> str | None:
        if self._nvml is None:
            return None
        try:
            d = self._nvml.nvmlSystemGetDriverVersion()
            return d.decode() if isinstance(d, bytes) else d
        except Exception:
            return None


# ---------------------------------------------------------------- GPU

Progress = Callable[[str], None]


def _gpu_steps(torch: Any, dev: Any, props: Any, quick: bool, sample: Callable[[], None]) -> list[tuple[str, Callable[[], Measured | None]]]:
    """The measurements to run, as (label, thunk) pairs so the caller can show progress."""
    l2 = int(getattr(props, "L2_cache_size", 0) or 40 * 2**20)
    free, _total = torch.cuda.mem_get_info(dev)
    limit = int(free * MAX_MEMORY_FRACTION)
    smallest = max(DRAM_L2_MULTIPLE * l2, DRAM_MIN_BYTES if not quick else 64 * 2**20)
    steps = (1,) if quick else DRAM_SIZE_STEPS
    sizes = [smallest * s for s in steps if smallest * s <= limit] or [min(smallest, limit)]
    cap = (props.major, props.minor)
    n = MATMUL_N_GPU if not quick else 2048
    plan: list[tuple[str, Callable[[], Measured | None]]] = []
    for size in sizes:
        plan.append((f"DRAM copy {size / 2**20:.0f} MiB", lambda size=size: _dram(torch, dev, "copy", size, sample)))
        plan.append((f"DRAM read {size / 2**20:.0f} MiB", lambda size=size: _dram(torch, dev, "read", size, sample)))
        plan.append((f"DRAM write {size / 2**20:.0f} MiB", lambda size=size: _dram(torch, dev, "write", size, sample)))
    plan.append((f"L2 read {l2 * L2_FRACTION / 2**20:.1f} MiB", lambda: _l2_read(torch, dev, int(l2 * L2_FRACTION), sample)))
    plan.append((f"L2 copy {l2 * L2_FRACTION / 2**20:.1f} MiB", lambda: _l2_copy(torch, dev, int(l2 * L2_FRACTION), sample)))
    plan.append((f"fp32 matmul {n}^3 (tf32 off)", lambda: _matmul(torch, dev, "fp32", n, sample, l2)))
    if cap >= (8, 0):
        plan.append((f"tf32 matmul {n}^3", lambda: _matmul(torch, dev, "tf32", n, sample, l2)))
        plan.append((f"bf16 matmul {n}^3", lambda: _matmul(torch, dev, "bf16", n, sample, l2)))
    plan.append((f"fp16 matmul {n}^3", lambda: _matmul(torch, dev, "fp16", n, sample, l2)))
    if cap >= (8, 9) and hasattr(torch, "_scaled_mm"):
        plan.append((f"fp8 e4m3 matmul {n}^3", lambda: _matmul(torch, dev, "fp8", n, sample, l2)))
    return plan


def _dram(torch: Any, dev: Any, what: str, size: int, sample: Callable[[], None]) -> Measured:
    numel = size // 4
    if what == "copy":
        src = torch.rand(numel // 2, device=dev)
        dst = torch.empty_like(src)
        t = _time_cuda(lambda: dst.copy_(src), torch, sample)
        work = 2.0 * src.numel() * 4
    elif what == "read":
        src = torch.rand(numel, device=dev)
        t = _time_cuda(lambda: torch.sum(src), torch, sample)
        work = float(src.numel() * 4)
    else:
        dst = torch.empty(numel, device=dev)
        t = _time_cuda(lambda: dst.fill_(1.5), torch, sample)
        work = float(dst.numel() * 4)
    return Measured(what=what, unit="B/s", size=size, work=work, best_s=t, rate=work / t)


def _l2_read(torch: Any, dev: Any, size: int, sample: Callable[[], None]) -> Measured:
    # One kernel sweeps an L2-resident buffer many times (a stride-0 view repeats it), so neither
    # launch overhead nor DRAM enters the figure. Each sweep is far larger than one SM's L1.
    src = torch.rand(size // 4, device=dev)
    view = src.unsqueeze(0).expand(L2_READ_PASSES, src.numel())
    t = _time_cuda(lambda: torch.sum(view, dim=1), torch, sample)
    work = float(L2_READ_PASSES * src.numel() * 4)
    return Measured(what="l2_read", unit="B/s", size=size, work=work, best_s=t, rate=work / t,
                    note=f"sum over a {L2_READ_PASSES}x stride-0 view of one buffer")


def _l2_copy(torch: Any, dev: Any, size: int, sample: Callable[[], None]) -> Measured | None:
    # Small copies are launch-bound from Python: replay them from a CUDA graph.
    src = torch.rand(size // 8, device=dev)
    dst = torch.empty_like(src)
    copies = 64
    try:
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            dst.copy_(src)
        torch.cuda.current_stream(dev).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(copies):
                dst.copy_(src)
    except Exception as exc:  # graphs unavailable: the read figure stands alone
        return Measured(what="l2_copy", unit="B/s", size=size, work=0.0, best_s=math.inf, rate=0.0,
                        note=f"skipped: {type(exc).__name__}: {exc}")
    t = _time_cuda(graph.replay, torch, sample)
    work = float(copies * 2 * src.numel() * 4)
    return Measured(what="l2_copy", unit="B/s", size=size, work=work, best_s=t, rate=work / t,
                    note=f"{copies} copies replayed from one CUDA graph")


def _single_call_best(fn: Callable[[], Any], l2_bytes: int | None) -> float:
    """Best single-call time under `solbench run`'s own timer (events, L2 flushed, tare subtracted).

    Back-to-back batches can run at a lower, power-limited clock than the spaced single calls the
    harness times: on an H200, fp8 `_scaled_mm` ran 1,332 TFLOP/s in batches while `solbench run`
    timed 1,429-1,464, so a ceiling taken from batches alone was beaten by the baseline it scores.
    """
    from solbench import timing

    config = timing.TimingConfig(budget_s=SINGLE_CALL_BUDGET_S, cross_check=False)
    m = timing.measure(lambda _i: fn(), "cuda", config, l2_bytes=l2_bytes)
    return min(m.samples_s)


def _matmul_candidates(torch: Any, dev: Any, key: str, n: int) -> list[tuple[str, Callable[[], Any]]]:
    """The layouts (and fp8 accumulation modes) tried for one precision; the fastest sets the ceiling."""
    gen = torch.Generator(device=dev).manual_seed(0)
    if key == "fp8":
        a = torch.randn(n, n, device=dev, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev, generator=gen).to(torch.float8_e4m3fn).t()  # column-major
        one = torch.ones((), device=dev, dtype=torch.float32)
        return [(f"torch._scaled_mm, bf16 out, use_fast_accum={fast}",
                 lambda fast=fast: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                    use_fast_accum=fast))
                for fast in (False, True)]
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[key]
    a = torch.randn(n, n, device=dev, generator=gen).to(dtype)
    b = torch.randn(n, n, device=dev, generator=gen).to(dtype)
    return [("A @ B", lambda: a @ b), ("A @ B^T (a linear layer)", lambda: a @ b.t())]


def _matmul(torch: Any, dev: Any, key: str, n: int, sample: Callable[[], None],
            l2_bytes: int | None = None) -> Measured:
    """Best rate over the candidates, each timed in batches and, on a GPU, as single calls."""
    best, note, failures = math.inf, "", []
    with _tf32(torch, key == "tf32"):
        for label, fn in _matmul_candidates(torch, dev, key, n):
            try:
                t, how = _time_cuda(fn, torch, sample), "batched"
                if getattr(dev, "type", "cpu") == "cuda":
                    single = _single_call_best(fn, l2_bytes)
                    if single < t:
                        t, how = single, "single call"
            except (RuntimeError, TypeError) as exc:
                failures.append(f"{label} failed: {exc}")
                continue
            if t < best:
                best, note = t, f"{label}, best {how}"
    if not math.isfinite(best):
        raise RuntimeError("; ".join(failures))
    flops = 2.0 * n**3
    return Measured(what=f"matmul_{key}", unit="FLOP/s", size=n, work=flops, best_s=best, rate=flops / best,
                    note=note)


def measure_gpu(device: str = "cuda", quick: bool = False, progress: Progress | None = None) -> Calibration:
    """Measure this GPU's ceilings (initialises CUDA here). `quick` uses small sizes (a smoke test)."""
    import torch

    if not torch.cuda.is_available():
        raise UserError("no CUDA device: torch.cuda.is_available() is False")
    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    dev = torch.device("cuda", index)
    props = torch.cuda.get_device_properties(index)
    sampler = _ClockSampler(index)
    results: list[Measured] = []
    with torch.cuda.device(index):
        for label, thunk in _gpu_steps(torch, dev, props, quick, sampler):
            if progress:
                progress(label)
            try:
                m = thunk()
            except Exception as exc:  # one failed measurement (e.g. fp8 unsupported) must not lose the rest
                m = Measured(what=label, unit="", size=0, work=0.0, best_s=math.inf, rate=0.0,
                             note=f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            if m is not None:
                results.append(m)
            torch.cuda.empty_cache()
    clocks, driver = sampler.summary(), sampler.driver()
    sampler.close()
    return _assemble(results, device_kind="cuda", name=props.name, sm_count=props.multi_processor_count,
                     memory_bytes=props.total_memory, cc=f"{props.major}.{props.minor}",
                     l2_bytes=getattr(props, "L2_cache_size", None), driver=driver,
                     cuda=torch.version.cuda, torch_version=torch.__version__, clocks=clocks, quick=quick)


# ---------------------------------------------------------------- CPU

def measure_cpu(quick: bool = False, repeats: int = 5, progress: Progress | None = None) -> Calibration:
    """Copy/read/write bandwidth and fp32/bf16 matmul on this CPU; a few seconds (`quick`: well under one)."""
    import torch

    from solbench.hardware import _cpu_name

    nbytes = QUICK_CPU_COPY_BYTES if quick else CPU_COPY_BYTES
    n = QUICK_CPU_MATMUL_N if quick else CPU_MATMUL_N
    results: list[Measured] = []
    # Bandwidth does not depend on the values, and torch.rand of 256 MiB alone takes over a second.
    src = torch.empty(nbytes // 8).fill_(1.25)
    dst = torch.empty_like(src)
    big = torch.empty(nbytes // 4).fill_(0.75)
    for what, fn, work in (("copy", lambda: dst.copy_(src), 2.0 * src.numel() * 4),
                           ("read", lambda: torch.sum(big), float(big.numel() * 4)),
                           ("write", lambda: big.fill_(1.5), float(big.numel() * 4))):
        if progress:
            progress(f"CPU {what} {nbytes / 2**20:.0f} MiB")
        t = _time_wall(fn, repeats)
        results.append(Measured(what=what, unit="B/s", size=nbytes, work=work, best_s=t, rate=work / t))
    gen = torch.Generator().manual_seed(0)
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        if progress:
            progress(f"CPU {key} matmul {n}^3")
        size = _cpu_matmul_size(torch, dtype, n, gen)
        # A CPU's best matmul rate depends on the size (cache blocking): try smaller ones too, so a
        # benchmark of one of those sizes cannot beat the ceiling. bf16 is slow enough for one size.
        sizes = sorted({max(64, size // 4 // 64 * 64), max(64, size // 2 // 64 * 64), size}) if key == "fp32" else [size]
        for sz in sizes:
            a = torch.randn(sz, sz, generator=gen).to(dtype)
            b = torch.randn(sz, sz, generator=gen).to(dtype)
            t = _time_wall(lambda: a @ b, repeats)
            results.append(Measured(what=f"matmul_{key}", unit="FLOP/s", size=sz, work=2.0 * sz**3, best_s=t,
                                    rate=2.0 * sz**3 / t))
    threads = torch.get_num_threads()
    return _assemble(results, device_kind="cpu", name=_cpu_name(), sm_count=None, memory_bytes=None, cc=None,
                     l2_bytes=None, driver=None, cuda=None, torch_version=torch.__version__, clocks={},
                     quick=quick, cpu_threads=threads)


def _cpu_matmul_size(torch: Any, dtype: Any, n_max: int, gen: Any) -> int:
    """The largest n <= n_max whose matmul takes about CPU_MATMUL_CALL_S: bf16 without AMX is ~30x slower."""
    probe = min(256, n_max)
    a = torch.randn(probe, probe, generator=gen).to(dtype)
    t = _time_wall(lambda: a @ a, 3)
    n = probe * (CPU_MATMUL_CALL_S / max(t, 1e-7)) ** (1 / 3)
    return int(max(probe, min(n_max, n // 64 * 64)))


# ---------------------------------------------------------------- assembling the record

def _best(results: list[Measured], *whats: str) -> float | None:
    rates = [m.rate for m in results if m.what in whats and m.rate > 0 and math.isfinite(m.rate)]
    return max(rates) if rates else None


def _assemble(results: list[Measured], *, device_kind: str, name: str, sm_count: int | None,
              memory_bytes: int | None, cc: str | None, l2_bytes: int | None, driver: str | None,
              cuda: str | None, torch_version: str, clocks: dict[str, float], quick: bool,
              cpu_threads: int | None = None) -> Calibration:
    copy = _best(results, "copy")
    if copy is None:
        raise RuntimeError("the copy bandwidth measurement failed; nothing to calibrate against")
    matmul: dict[str, float] = {}
    for m in results:  # the best rate per precision over the sizes tried
        if m.what.startswith("matmul_") and m.rate > 0 and math.isfinite(m.rate):
            key = m.what.removeprefix("matmul_")
            matmul[key] = max(m.rate, matmul.get(key, 0.0))
    if device_kind == "cpu":
        # No tensor cores: elementwise and matmul work share the vector units; the fastest precision
        # is the ceiling for all, so that no precision can beat its own ceiling.
        best = max(matmul.values())
        simt = {"fp32": best}
        tensor = {k: best for k in ("fp32", "bf16")}
    else:
        simt = {"fp32": matmul["fp32"]} if "fp32" in matmul else {}
        tensor = {k: v for k, v in matmul.items() if k in ("tf32", "bf16", "fp16", "fp8")}
    fp = fingerprint(name, sm_count, memory_bytes, cpu_threads)
    return Calibration(
        schema=SCHEMA, fingerprint=fp, device_kind=device_kind, device=name, sm_count=sm_count,
        memory_bytes=memory_bytes, compute_capability=cc, l2_bytes=l2_bytes, driver=driver, torch=torch_version,
        cuda=cuda, date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), clocks=clocks,
        memory_bandwidth=copy, read_bandwidth=_best(results, "read"), write_bandwidth=_best(results, "write"),
        l2_bandwidth=_best(results, "l2_read", "l2_copy"), simt=simt, tensor=tensor,
        measurements=[asdict(m) for m in results], quick=quick,
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
    simt_label = "CUDA cores" if cal.get("device_kind") == "cuda" else "vector units"
    for k, v in cal.get("simt", {}).items():
        add(f"{k} {simt_label} (TFLOP/s)", v, datasheet.simt.get(k) if datasheet else None, 1e12)
    tensor_label = "tensor" if cal.get("device_kind") == "cuda" else "matmul"
    for k, v in cal.get("tensor", {}).items():
        add(f"{k} {tensor_label} (TFLOP/s)", v, datasheet.tensor.get(k) if datasheet else None, 1e12)
    return rows


def calibrate_command(device: str = "auto", folder: Path = DEFAULT_DIR, quick: bool = False,
                      json_out: Path | None = None, console: Any = None) -> Path:
    """`solbench calibrate`: measure here (CUDA is initialised in this process), print, write the file."""
    import torch
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from solbench import hardware

    con = console or make_console()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    datasheet: Peaks | None = None
    if device != "cpu":
        if not torch.cuda.is_available():
            raise UserError(f"device '{device}' asked for, but torch sees no CUDA device", field="--device")
        info = hardware.probe_device(device if ":" in device else "cuda:0")
        table = hardware.match_table(info, hardware.load_gpu_tables())
        datasheet = table.peaks() if table else None
    with Progress(SpinnerColumn(), TextColumn("[bold]calibrating[/] {task.description}"), TimeElapsedColumn(),
                  console=con, transient=True) as progress:
        task = progress.add_task("", total=None)

        def step(label: str) -> None:
            progress.update(task, description=label)

        cal = measure_cpu(quick=quick, progress=step) if device == "cpu" else measure_gpu(device, quick, step)
    data = cal.to_json()
    out = Table(title=f"{cal.device}: measured vs datasheet" + (f" ({datasheet.name})" if datasheet else ""))
    for col in ("ceiling", "measured", "datasheet", "measured / datasheet"):
        out.add_column(col, justify="left" if col == "ceiling" else "right")
    for label, measured, sheet, ratio in comparison_rows(data, datasheet):
        out.add_row(label, f"{measured:,.1f}", "-" if sheet is None else f"{sheet:,.1f}",
                    "-" if ratio is None else f"{ratio:.2f}")
    con.print(out)
    for m in cal.measurements:
        if m["note"].startswith(("failed", "skipped")):
            con.print(f"[yellow]{m['what']}[/]: {m['note']}", highlight=False)
    if cal.clocks:
        con.print("clocks seen (MHz): " + ", ".join(f"{k} {v:g}" for k, v in cal.clocks.items()), highlight=False)
    path = write_calibration(cal, folder)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(data, indent=1))
    con.print(f"calibration: {path}" + (f", {json_out}" if json_out else ""), highlight=False)
    return path


def _main(argv: list[str] | None = None) -> int:
    """`python -m solbench.calibrate`: measure and write; prints the file path last (for subprocess use)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m solbench.calibrate")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=str(DEFAULT_DIR))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    cal = measure_cpu(quick=args.quick) if args.device == "cpu" else measure_gpu(args.device, quick=args.quick)
    print(write_calibration(cal, Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
