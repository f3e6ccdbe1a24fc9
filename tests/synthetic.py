"""Synthetic results files for the report, roofline and compare tests (no GPU, no benchmark run).

Every metric is derived from the samples and the declared work, with the same formulas the harness
uses (docs/RESULTS.md), so a test can predict what a chart or a verdict must show.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from solbench.results import Run

H200_PEAKS: dict[str, Any] = {
    "name": "NVIDIA H200 SXM",
    "source": "datasheet",
    "memory_bandwidth": 4.8e12,
    "simt": {"fp32": 66.9e12, "fp64": 33.5e12},
    "tensor": {"tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12},
    "clock_mhz": 1830,
    "l2_bytes": 62914560,
    "notes": "synthetic",
}


def make_env(device: str = "NVIDIA H200") -> dict[str, Any]:
    return {
        "device_kind": "cuda", "device": device, "device_index": 0, "sm_count": 132,
        "compute_capability": "9.0", "l2_bytes": 62914560, "memory_bytes": 150_000_000_000,
        "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130", "python": "3.12.3",
        "solbench": "0.1.0", "git_sha": "0123456789abcdef", "host": "synthetic",
        "clocks": {"sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980},
        "telemetry": True, "cuda_skipped": False,
    }


def noisy_samples(median: float, noise: float, n: int, seed: int) -> list[float]:
    """n samples around `median` with relative Gaussian noise `noise`, floored to stay positive."""
    rng = np.random.default_rng(seed)
    s = median * (1.0 + noise * rng.standard_normal(n))
    return [float(x) for x in np.maximum(s, median * 0.05)]


def _stats(samples: Sequence[float]) -> dict[str, Any]:
    a = np.asarray(samples, dtype=float)
    med = float(np.median(a))
    std = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {"median": med, "mean": float(a.mean()), "min": float(a.min()), "max": float(a.max()),
            "q1": float(np.quantile(a, 0.25)), "q3": float(np.quantile(a, 0.75)), "std": std,
            "n": int(a.size), "rse": std / np.sqrt(a.size) / float(a.mean()) if a.size > 1 else 0.0}


def make_record(
    op: str = "gemm",
    case: str = "M=1024,N=1024,K=1024",
    dtype: str = "bfloat16",
    impl: str = "eager",
    *,
    samples: Sequence[float] | None = None,
    flops: float = 2 * 1024**3,
    nbytes: float = 3 * 1024 * 1024 * 2,
    compute_unit: str = "tensor",
    peak_key: str = "bf16",
    peaks: dict[str, Any] = H200_PEAKS,
    is_baseline: bool | None = None,
    reference_baseline: str = "eager",
    baseline_median: float | None = None,
    status: str | None = None,
    message: str = "",
) -> dict[str, Any]:
    """One record; status "ok" (or "invalid" when SOL > 1) unless given; "failed" has no timing."""
    is_baseline = (impl == reference_baseline) if is_baseline is None else is_baseline
    params = dict(kv.split("=") for kv in case.split(",")) if "=" in case else {}
    peak_flops = peaks[compute_unit][peak_key]
    peak_bw = peaks["memory_bandwidth"]
    t_sol = max(flops / peak_flops, nbytes / peak_bw)
    rec: dict[str, Any] = {
        "op": op, "case": case, "params": {k: int(v) for k, v in params.items()}, "dtype": dtype,
        "impl": impl, "kind": "baseline" if is_baseline else "impl", "is_baseline": is_baseline,
        "reference_baseline": reference_baseline, "status": "ok", "message": message,
        "compute_unit": compute_unit, "peak_key": peak_key, "flops": flops, "bytes": nbytes,
        "intensity": flops / nbytes, "peak_flops": peak_flops, "peak_bandwidth": peak_bw,
        "t_sol_s": t_sol, "bound": "compute" if flops / peak_flops >= nbytes / peak_bw else "memory",
        "timer": "events", "time_s": None, "samples_s": [], "tflops": None, "gbps": None,
        "sol": None, "mfu": None, "mbu": None, "speedup": None,
        "correct": True, "max_abs_err": 1e-3, "max_rel_err": 1e-3,
    }
    if status == "failed":
        rec.update(status="failed", correct=False, max_abs_err=0.5, max_rel_err=0.9,
                   message=message or "max_abs_err 0.5 > atol 0.01")
        return rec
    if samples is None:
        samples = noisy_samples(t_sol / 0.6, 0.01, 20, seed=zlib.crc32("/".join((op, case, dtype, impl)).encode()))
    ts = _stats(samples)
    med = ts["median"]
    sol = t_sol / med
    rec.update(time_s=ts, samples_s=list(samples), tflops=flops / med / 1e12, gbps=nbytes / med / 1e9,
               sol=sol, mfu=flops / med / peak_flops, mbu=nbytes / med / peak_bw,
               speedup=(baseline_median / med) if baseline_median else (1.0 if is_baseline else None))
    if status is not None:
        rec["status"] = status
    elif sol > 1.0:
        rec.update(status="invalid", message="SOL > 1: the spec, timer or kernel is wrong")
    return rec


def make_run(records: list[dict[str, Any]], *, device: str = "NVIDIA H200",
             peaks: dict[str, Any] = H200_PEAKS) -> dict[str, Any]:
    return {
        "schema": "solbench.results/1", "run_id": f"20261129T150102Z-{device.replace(' ', '-').lower()}",
        "created": "2026-11-29T15:01:02Z", "command": "solbench run (synthetic)",
        "env": make_env(device), "peaks": dict(peaks),
        "config": {"timer": "events", "rse_target": 0.005, "min_samples": 10, "max_samples": 1000,
                   "budget_s": 2.0, "warmup_s": 0.05, "quick": False, "seed": 0},
        "records": records,
    }


def write_run(path: Path, run: dict[str, Any]) -> Path:
    path.write_text(json.dumps(run, indent=1))
    return path


def ab_runs(base_median: float, change: float, noise: float, n: int, seed: int,
            **record_kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two one-record runs: NEW's true median is BASE's times (1 + change), both with `noise`."""
    base = make_record(samples=noisy_samples(base_median, noise, n, seed), **record_kw)
    new = make_record(samples=noisy_samples(base_median * (1 + change), noise, n, seed + 1_000_003),
                      **record_kw)
    return make_run([base]), make_run([new])


def mixed_run(device: str = "NVIDIA H200", seed: int = 0) -> dict[str, Any]:
    """A small realistic run: a tensor-core op and a memory-bound op, two impls each, one invalid
    (SOL > 1), one failed."""
    recs = []
    g_flops, g_bytes = 2 * 4096**3, 3 * 4096 * 4096 * 2
    s_flops, s_bytes = 5 * 4096 * 8192, 2 * 4096 * 8192 * 2
    g_sol_t = max(g_flops / H200_PEAKS["tensor"]["bf16"], g_bytes / H200_PEAKS["memory_bandwidth"])
    s_sol_t = max(s_flops / H200_PEAKS["simt"]["fp32"], s_bytes / H200_PEAKS["memory_bandwidth"])
    base_g = g_sol_t / 0.7
    recs.append(make_record("gemm", "M=4096,N=4096,K=4096", "bfloat16", "eager", flops=g_flops,
                            nbytes=g_bytes, samples=noisy_samples(base_g, 0.01, 30, seed)))
    recs.append(make_record("gemm", "M=4096,N=4096,K=4096", "bfloat16", "cuda", flops=g_flops,
                            nbytes=g_bytes, samples=noisy_samples(g_sol_t / 0.5, 0.01, 30, seed + 1),
                            baseline_median=base_g))
    base_s = s_sol_t / 0.4
    for dtype in ("bfloat16", "float32"):
        nb = s_bytes if dtype == "bfloat16" else 2 * s_bytes
        t_sol = max(s_flops / H200_PEAKS["simt"]["fp32"], nb / H200_PEAKS["memory_bandwidth"])
        recs.append(make_record("softmax", "M=4096,N=8192", dtype, "eager", flops=s_flops, nbytes=nb,
                                compute_unit="simt", peak_key="fp32",
                                samples=noisy_samples(t_sol / 0.4, 0.01, 30, seed + 2)))
    # Faster than light: must be flagged invalid, never a win.
    recs.append(make_record("softmax", "M=4096,N=8192", "bfloat16", "cuda", flops=s_flops, nbytes=s_bytes,
                            compute_unit="simt", peak_key="fp32",
                            samples=noisy_samples(s_sol_t / 1.3, 0.01, 30, seed + 3), baseline_median=base_s))
    recs.append(make_record("softmax", "M=4096,N=8192", "float32", "cuda", flops=s_flops,
                            nbytes=2 * s_bytes, compute_unit="simt", peak_key="fp32", status="failed"))
    return make_run(recs, device=device)


def as_run(run: dict[str, Any]) -> Run:
    """A synthetic run as the Run object that results.load_run returns for its file."""
    return Run.from_json(run)
