"""Measure the ceilings this device actually reaches: DRAM and L2 bandwidth, matmul throughput.

Datasheet peaks are never fully reachable; `solbench calibrate` measures what large, simple
operations reach on this card and writes them to results/calibration/<fingerprint>.json
(calibration.py: the record and its file), so that `solbench run --peaks measured` can score
against them. Times come from the measure package: back-to-back batches (measure.throughput) for
bandwidth and matmul rates, and, for matmuls on a GPU, also `solbench run`'s own single-call timer;
clocks come from the one NVML wrapper (telemetry.ClockMonitor).

The measuring functions initialise CUDA in the calling process: call them from the `calibrate`
command or from a worker process, never from a process that later forks CUDA workers.

"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from solbench import nvml
from solbench.calibration import (DEFAULT_DIR, Calibration, Measured, assemble, comparison_rows, write_calibration)
from solbench.dtypes import matmul_precision
from solbench.errors import UserError
from solbench.hardware import DeviceInfo, probe_device
from solbench.jsonio import write_json_atomic
from solbench.measure import TimingConfig, measure
from solbench.measure.throughput import BestTime, best_batched_cuda_s, relative_spread, spread_of
# The CPU's ceilings live in their own module; these names are part of calibrate's interface.
from solbench.cpu_ceilings import (BUSY, CPU_CACHE_MULTIPLE, cpu_bandwidth_bytes, cpu_chunk_bytes,  # noqa: F401
                                   measure_cpu, measure_cpu_bandwidth)
from solbench.telemetry import ClockMonitor

if TYPE_CHECKING:  # peaks.py runs calibrations: importing it here would be a circle
    from solbench.peaks import Peaks

# Working sets: DRAM figures must not be flattered by the L2, so every DRAM buffer is at least
# this many times the L2 size; the L2 figure uses a working set well inside it.
DRAM_L2_MULTIPLE = 8
DRAM_MIN_BYTES = 512 * 2**20
DRAM_SIZE_STEPS = (1, 2, 4)          # multiples of the smallest DRAM working set tried
MAX_MEMORY_FRACTION = 0.25           # never take more than this share of free device memory
L2_FRACTION = 0.25                   # L2 working set = L2 size x this
L2_READ_PASSES = 64                  # the L2 read kernel sweeps its buffer this many times
MATMUL_N_GPU = 8192
SINGLE_CALL_BUDGET_S = 0.5           # matmuls: time spent timing single calls with solbench's timer


# ---------------------------------------------------------------- GPU

Progress = Callable[[str], None]
Thunk = Callable[[], Any]
PerCall = Callable[[Thunk], float]     # best seconds per call of a thunk, by some timer


def _gpu_steps(dev: Any, props: Any, quick: bool, batched: PerCall,
               single: PerCall) -> list[tuple[str, Callable[[], Measured | None]]]:
    """The measurements to run, as (label, thunk) pairs so the caller can show progress."""
    import torch

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
        for what in ("copy", "read", "write"):
            plan.append((f"DRAM {what} {size / 2**20:.0f} MiB",
                         lambda what=what, size=size: _dram(dev, what, size, batched)))
    l2_size = int(l2 * L2_FRACTION)
    plan.append((f"L2 read {l2 * L2_FRACTION / 2**20:.1f} MiB", lambda: _l2_read(dev, l2_size, batched)))
    plan.append((f"L2 copy {l2 * L2_FRACTION / 2**20:.1f} MiB", lambda: _l2_copy(dev, l2_size, batched)))
    keys = ["fp32"] + (["tf32", "bf16"] if cap >= (8, 0) else []) + ["fp16"]
    if cap >= (8, 9) and hasattr(torch, "_scaled_mm"):
        keys.append("fp8")
    labels = {"fp32": f"fp32 matmul {n}^3 (tf32 off)", "fp8": f"fp8 e4m3 matmul {n}^3"}
    for key in keys:
        plan.append((labels.get(key, f"{key} matmul {n}^3"),
                     lambda key=key: _matmul(dev, key, n, batched, single)))
    return plan


def _dram(dev: Any, what: str, size: int, timer: PerCall) -> Measured:
    import torch

    numel = size // 4
    if what == "copy":
        src = torch.rand(numel // 2, device=dev)
        dst = torch.empty_like(src)
        t = timer(lambda: dst.copy_(src))
        work = 2.0 * src.numel() * 4
    elif what == "read":
        src = torch.rand(numel, device=dev)
        t = timer(lambda: torch.sum(src))
        work = float(src.numel() * 4)
    else:
        dst = torch.empty(numel, device=dev)
        t = timer(lambda: dst.fill_(1.5))
        work = float(dst.numel() * 4)
    return Measured(what=what, unit="B/s", size=size, work=work, best_s=t, rate=work / t, spread=spread_of(t))


def _l2_read(dev: Any, size: int, timer: PerCall) -> Measured:
    import torch

    # One kernel sweeps an L2-resident buffer many times (a stride-0 view repeats it), so neither
    # launch overhead nor DRAM enters the figure. Each sweep is far larger than one SM's L1.
    src = torch.rand(size // 4, device=dev)
    view = src.unsqueeze(0).expand(L2_READ_PASSES, src.numel())
    t = timer(lambda: torch.sum(view, dim=1))
    work = float(L2_READ_PASSES * src.numel() * 4)
    return Measured(what="l2_read", unit="B/s", size=size, work=work, best_s=t, rate=work / t,
                    note=f"sum over a {L2_READ_PASSES}x stride-0 view of one buffer", spread=spread_of(t))


def _l2_copy(dev: Any, size: int, timer: PerCall) -> Measured | None:
    import torch

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
    t = timer(graph.replay)
    work = float(copies * 2 * src.numel() * 4)
    return Measured(what="l2_copy", unit="B/s", size=size, work=work, best_s=t, rate=work / t,
                    note=f"{copies} copies replayed from one CUDA graph", spread=spread_of(t))


def _single_call_best(fn: Thunk, l2_bytes: int | None) -> float:
    """Best single-call time under `solbench run`'s own timer (events, L2 flushed, tare subtracted).

    Back-to-back batches can run at a lower, power-limited clock than the spaced single calls the
    harness times: on an H200, fp8 `_scaled_mm` ran 1,332 TFLOP/s in batches while `solbench run`
    timed 1,429-1,464, so a ceiling taken from batches alone was beaten by the baseline it scores.
    """
    # The ceilings' calls are 8192^2 matmuls, outputs of 128 MiB or more: `balanced` would rewrite the
    # whole L2 as `write` does, so `write` (what the committed calibrations used) is kept.
    config = TimingConfig(budget_s=SINGLE_CALL_BUDGET_S, cross_check=False, flush_mode="write")
    m = measure(lambda _i: fn(), "cuda", config, l2_bytes=l2_bytes)
    return BestTime(min(m.samples_s), relative_spread(m.samples_s))


def _matmul_candidates(dev: Any, key: str, n: int) -> list[tuple[str, Thunk]]:
    """The layouts (and fp8 accumulation modes) tried for one precision; the fastest sets the ceiling."""
    import torch

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


def _matmul(dev: Any, key: str, n: int, batched: PerCall, single: PerCall | None = None) -> Measured:
    """Best rate over the candidates, each timed in batches and (when `single` is given) as single calls."""
    best, note, spread, failures = math.inf, "", None, []
    with matmul_precision(key):
        for label, fn in _matmul_candidates(dev, key, n):
            try:
                t, how = batched(fn), "batched"
                if single is not None:
                    one = single(fn)
                    if one < t:
                        t, how = one, "single call"
            except (RuntimeError, TypeError) as exc:
                failures.append(f"{label} failed: {exc}")
                continue
            if t < best:
                best, note, spread = t, f"{label}, best {how}", spread_of(t)
    if not math.isfinite(best):
        raise RuntimeError("; ".join(failures))
    flops = 2.0 * n**3
    return Measured(what=f"matmul_{key}", unit="FLOP/s", size=n, work=flops, best_s=float(best),
                    rate=flops / best, note=note, spread=spread)


def measure_gpu(device: str = "cuda", quick: bool = False, progress: Progress | None = None) -> Calibration:
    """Measure this GPU's ceilings (initialises CUDA here). `quick` uses small sizes (a smoke test)."""
    import torch

    if not torch.cuda.is_available():
        raise UserError("no CUDA device: torch.cuda.is_available() is False")
    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    dev = torch.device("cuda", index)
    props = torch.cuda.get_device_properties(index)
    l2 = getattr(props, "L2_cache_size", None)
    flush_basis = int(l2 or 40 * 2**20)   # the single-call timer's flush is sized from this
    # NVML samples the clocks while each batch is still on the GPU, so they are the clocks under load.
    monitor = ClockMonitor.open("cuda", index)
    results: list[Measured | None] = []
    try:
        with torch.cuda.device(index):
            steps = _gpu_steps(dev, props, quick, lambda fn: best_batched_cuda_s(fn, on_busy=monitor.during),
                               lambda fn: _single_call_best(fn, flush_basis))
            for label, thunk in steps:
                if progress:
                    progress(label)
                results.append(_attempt(label, thunk))
                torch.cuda.empty_cache()
        clocks = monitor.clock_range()
    finally:
        monitor.close()
    return assemble([m for m in results if m is not None], device_kind="cuda", name=props.name,
                     sm_count=props.multi_processor_count, memory_bytes=props.total_memory,
                     cc=f"{props.major}.{props.minor}", l2_bytes=l2, driver=nvml.driver_version(),
                     cuda=torch.version.cuda, torch_version=torch.__version__, clocks=clocks, quick=quick)


def _attempt(label: str, thunk: Callable[[], Measured | None]) -> Measured | None:
    """Run one measurement; a failure (e.g. fp8 unsupported) becomes a recorded failure, not a lost run."""
    try:
        return thunk()
    except Exception as exc:
        return Measured(what=label, unit="", size=0, work=0.0, best_s=math.inf, rate=0.0,
                        note=f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def calibrate_command(device: str = "auto", folder: Path = DEFAULT_DIR, quick: bool = False,
                      json_out: Path | None = None, *, console: Any,
                      datasheet_for: Callable[[DeviceInfo], Peaks | None] | None = None) -> Path:
    """`solbench calibrate`: measure here (CUDA is initialised in this process), print, write the file.

    `console` is the caller's rich Console. `datasheet_for` gives the datasheet peaks of the probed
    GPU (the caller's peak source), printed beside the measured figures; without it only the measured
    column is shown.
    """
    import torch
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table

    con = console
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    datasheet: Peaks | None = None
    if device != "cpu":
        if not torch.cuda.is_available():
            raise UserError(f"device '{device}' asked for, but torch sees no CUDA device", field="--device")
        info = probe_device(device if ":" in device else "cuda:0")
        datasheet = datasheet_for(info) if datasheet_for is not None else None
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
        write_json_atomic(json_out, data)
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
