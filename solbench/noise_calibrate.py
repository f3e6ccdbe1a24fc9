"""Measure a device's run-to-run noise model: short A/A repetitions of probe kernels in fresh processes.

`solbench noise` starts `python -m solbench.noise_calibrate --worker` RUNS times, one after another.
Each worker times the same probe kernels (copies and adds of growing size and matmuls: about 2 us to
10 ms on an H200) with `solbench run`'s own timer (solbench.measure.measure: the events tare, the L2
flush, the noise target and budget), prints their medians as one JSON line and exits. The spread that
matters is between processes, so every repetition is a fresh one. noise_model.fit_model fits the
spreads of the medians and noise_model.write_noise stores the model beside the calibration.

The parent never imports torch: CUDA is initialised in the workers only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from solbench.errors import UserError
from solbench.noise_model import KernelRepeats, NoiseCalibration, assemble, write_noise

DEFAULT_RUNS = 5
DEFAULT_BUDGET_S = 0.25
WORKER_TIMEOUT_S = 300.0
KiB, MiB, GiB = 2**10, 2**20, 2**30

Thunk = Callable[[], Any]
Maker = Callable[[Any], Thunk]          # device -> a call with its tensors already allocated
Progress = Callable[[str], None]
Worker = Callable[[str, float, bool], dict[str, Any]]   # (device, budget_s, quick) -> one repetition's JSON


class NoiseRunFailed(RuntimeError):
    """A repetition's worker did not produce its medians (crash, timeout, unexpected output)."""


# ---------------------------------------------------------------- the probe kernels (in a worker)


def _copy(nbytes: int) -> Maker:
    def make(dev: Any) -> Thunk:
        import torch

        src = torch.rand(max(nbytes // 4, 1), device=dev)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    return make


def _add(nbytes: int) -> Maker:
    def make(dev: Any) -> Thunk:
        import torch

        a, b = torch.rand(max(nbytes // 4, 1), device=dev), torch.rand(max(nbytes // 4, 1), device=dev)
        out = torch.empty_like(a)
        return lambda: torch.add(a, b, out=out)
    return make


def _matmul(n: int, dtype: str) -> Maker:
    def make(dev: Any) -> Thunk:
        import torch

        a = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
        b = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
        return lambda: a @ b
    return make


def probe_kernels(kind: str, quick: bool) -> list[tuple[str, str, Maker]]:
    """(name, dtype for matmul precision, maker): durations from the launch floor to milliseconds."""
    if kind == "cuda":
        full = [(f"copy {s}", "float32", _copy(b)) for s, b in (("4 KiB", 4 * KiB), ("256 KiB", 256 * KiB),
                ("4 MiB", 4 * MiB), ("32 MiB", 32 * MiB), ("256 MiB", 256 * MiB), ("1 GiB", GiB))]
        full += [(f"add {s}", "float32", _add(b)) for s, b in (("1 MiB", MiB), ("16 MiB", 16 * MiB),
                 ("128 MiB", 128 * MiB))]
        # bf16 matmuls stay short: a long tensor-core matmul is power-limited, and its clock spread is
        # already added to each record's run-to-run estimate, so probing one would widen every kernel's.
        full += [(f"matmul bf16 {n}", "bfloat16", _matmul(n, "bfloat16")) for n in (1024, 2048)]
        full += [(f"matmul fp32 {n}", "float32", _matmul(n, "float32")) for n in (2048, 4096, 6144)]
        quick_names = {"copy 4 KiB", "copy 4 MiB", "add 16 MiB", "matmul bf16 1024"}
    else:
        full = [(f"copy {s}", "float32", _copy(b)) for s, b in (("4 KiB", 4 * KiB), ("256 KiB", 256 * KiB),
                ("8 MiB", 8 * MiB), ("64 MiB", 64 * MiB))]
        full += [(f"add {s}", "float32", _add(b)) for s, b in (("1 MiB", MiB), ("16 MiB", 16 * MiB))]
        full += [(f"matmul fp32 {n}", "float32", _matmul(n, "float32")) for n in (128, 256, 512)]
        quick_names = {"copy 4 KiB", "copy 256 KiB", "add 1 MiB", "matmul fp32 128"}
    return [k for k in full if not quick or k[0] in quick_names]


def measure_here(device: str, budget_s: float, quick: bool) -> dict[str, Any]:
    """One repetition in this process: every probe kernel's median, as `solbench run` would time it."""
    import torch

    from solbench.dtypes import matmul_precision
    from solbench.hardware import probe_device
    from solbench.measure import TimerCache, TimingConfig, measure
    from solbench.noise_model import device_fingerprint
    from solbench.telemetry import ClockMonitor

    device = _resolve_device(device, torch)
    info = probe_device(device)
    config = TimingConfig(budget_s=budget_s, cross_check=False)
    cache = TimerCache()   # one tare per process, as a run's worker has
    monitor = ClockMonitor.open(info.kind, info.index)
    kernels = []
    try:
        for name, dtype, make in probe_kernels(info.kind, quick):
            monitor.reset()
            with matmul_precision(dtype):
                # The kernel's tensors live only inside this call: freed before the next kernel allocates.
                m = _measure_one(make(torch.device(device)), info, config, monitor, cache, measure)
            kernels.append({"name": name, "median_s": m.stats.median, "n": m.stats.n,
                            "timer": m.timer, "rse_within": m.noise.within if m.noise else None})
            if info.kind == "cuda":
                torch.cuda.empty_cache()
    finally:
        monitor.close()
    return {"fingerprint": device_fingerprint(info), "device_kind": info.kind, "device": info.name,
            "torch": torch.__version__, "timer": kernels[0]["timer"] if kernels else "", "kernels": kernels}


def _measure_one(fn: Thunk, info: Any, config: Any, monitor: Any, cache: Any, measure: Callable[..., Any]) -> Any:
    return measure(lambda _i: fn(), info.kind, config, info.l2_bytes, (info.clocks or {}).get("sm_max_mhz"),
                   monitor, cache)


def _resolve_device(device: str, torch: Any) -> str:
    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if not device.startswith("cuda"):
        raise UserError(f"unknown device '{device}' (use auto, cpu, cuda or cuda:N)", field="--device")
    if not torch.cuda.is_available():
        raise UserError(f"device '{device}' asked for, but torch sees no CUDA device", field="--device")
    device = device if ":" in device else "cuda:0"
    if int(device.split(":")[1]) >= torch.cuda.device_count():
        raise UserError(f"device '{device}' does not exist ({torch.cuda.device_count()} CUDA devices)",
                        field="--device")
    return device


# ---------------------------------------------------------------- the repetitions (in the parent)


@dataclass(frozen=True)
class Repetitions:
    fingerprint: str
    device_kind: str
    device: str
    torch: str
    timer: str
    kernels: list[KernelRepeats]


def run_worker(device: str, budget_s: float, quick: bool, timeout_s: float = WORKER_TIMEOUT_S) -> dict[str, Any]:
    """One repetition in a fresh process; its JSON line, or NoiseRunFailed / UserError saying why not."""
    cmd = [sys.executable, "-m", "solbench.noise_calibrate", "--worker", "--device", device,
           "--budget", repr(budget_s)] + (["--quick"] if quick else [])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise NoiseRunFailed(f"a repetition did not finish within {timeout_s:.0f} s") from None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    data = json.loads(lines[-1]) if lines else {}
    if "user_error" in data:
        raise UserError(data["user_error"]["message"], field=data["user_error"].get("field"))
    if done.returncode != 0 or "kernels" not in data:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise NoiseRunFailed(f"a repetition failed (exit {done.returncode}): {tail}")
    return data


def measure_repetitions(device: str, runs: int, budget_s: float, quick: bool, progress: Progress | None = None,
                        worker: Worker | None = None) -> Repetitions:
    """`runs` repetitions one after another, each in a fresh process (`worker`, default run_worker);
    medians gathered per kernel."""
    results: list[dict[str, Any]] = []
    for i in range(runs):
        if progress:
            progress(f"repetition {i + 1}/{runs} in a fresh process")
        results.append((worker or run_worker)(device, budget_s, quick))
    first = results[0]
    for r in results[1:]:
        if r["fingerprint"] != first["fingerprint"]:
            raise NoiseRunFailed(f"the repetitions ran on different devices ({first['fingerprint']} and "
                                 f"{r['fingerprint']}): pass --device cuda:N")
    names = [k["name"] for k in first["kernels"]]
    medians: dict[str, list[float]] = {n: [] for n in names}
    for r in results:
        for k in r["kernels"]:
            if k["name"] in medians and k["median_s"] and k["median_s"] > 0:
                medians[k["name"]].append(float(k["median_s"]))
    kernels = [KernelRepeats(n, tuple(medians[n])) for n in names]
    return Repetitions(first["fingerprint"], first["device_kind"], first["device"], first["torch"], first["timer"],
                       kernels)


def calibrate_noise(device: str, runs: int, budget_s: float, quick: bool,
                    progress: Progress | None = None, worker: Worker | None = None) -> NoiseCalibration:
    """Measure and fit; the record `write_noise` stores."""
    reps = measure_repetitions(device, runs, budget_s, quick, progress, worker)
    try:
        return assemble(reps.kernels, fingerprint_=reps.fingerprint, device_kind=reps.device_kind,
                        device=reps.device, torch_version=reps.torch, budget_s=budget_s, timer=reps.timer)
    except ValueError as exc:
        raise NoiseRunFailed(f"cannot fit a model: {exc}") from None


def noise_command(device: str, folder: Path, runs: int = DEFAULT_RUNS, budget_s: float = DEFAULT_BUDGET_S,
                  quick: bool = False, json_out: Path | None = None, *, console: Any) -> Path:
    """`solbench noise`: measure, fit, print the per-kernel table and the model, write the file."""
    from rich.table import Table

    with console.status("measuring run-to-run noise...") as status:
        cal = calibrate_noise(device, runs, budget_s, quick, lambda msg: status.update(msg))
    model = cal.run_to_run()
    table = Table(title=f"{cal.device}: run-to-run spread of the median over {cal.runs} fresh processes")
    for col in ("kernel", "median", "spread between runs", "model", "medians (min .. max)"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for k in cal.kernels:
        table.add_row(k["name"], _us(k["median_s"]), f"{k['spread']:.2%}", f"{k['model_spread']:.2%}",
                      f"{_us(min(k['medians_s']))} .. {_us(max(k['medians_s']))}")
    console.print(table)
    fit = cal.fit
    console.print(f"model: spread(t) = sqrt({model.rel:.3%}^2 + ({model.abs_s * 1e6:.3g} us / t)^2), the "
                  f"{fit['confidence']:.0%} upper bound of the fit ({fit['rel']:.3%}, {fit['abs_s'] * 1e6:.3g} us; "
                  f"{fit['dof']} degrees of freedom)", highlight=False)
    path = write_noise(cal, folder)
    if json_out:
        from solbench.jsonio import write_json_atomic

        write_json_atomic(json_out, cal.to_json())
    console.print(f"noise model: {path}" + (f", {json_out}" if json_out else ""), highlight=False)
    return path


def _us(t: float) -> str:
    return f"{t * 1e6:,.2f} us" if t < 1e-3 else f"{t * 1e3:,.3f} ms"


def _main(argv: Sequence[str] | None = None) -> int:
    """`python -m solbench.noise_calibrate --worker`: one repetition; prints its JSON as the last line."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m solbench.noise_calibrate")
    ap.add_argument("--worker", action="store_true", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    try:
        data = measure_here(args.device, args.budget, args.quick)
    except UserError as exc:
        print(json.dumps({"user_error": {"message": exc.detail, "field": exc.field}}))
        return 2
    print(json.dumps(data))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
