"""Table of a sweep under `solbench run` (the specs in scripts/tune/specs/: gemm_configs, linear_residual_configs,
transpose_bands): per case, every impl's rate (GB/s where memory bounds it, else TFLOP/s), its SOL,
and its speed relative to the spec's reference baseline (cuBLAS, torch._scaled_mm for fp8, PyTorch's copy for
transposes, SDPA's own pick for decoding).

    python scripts/h200/sweep_summary.py RESULTS.json
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solbench.results import load_run  # noqa: E402


def main(path: str) -> int:
    run = load_run(Path(path))
    by_case: dict[tuple[str, str], dict[str, object]] = {}
    for r in run.records:
        by_case.setdefault((r.case, r.dtype), {})[r.impl] = r
    for (case, dtype), recs in by_case.items():
        name = next((r.reference_baseline for r in recs.values() if r.reference_baseline), "eager")
        base = recs.get(name)
        base_s = _median(base)
        print(f"{case} {dtype}: {name} {_rate(base)}")
        for impl, r in sorted(recs.items(), key=lambda kv: _median(kv[1]) or float("inf")):
            if impl == name:
                continue
            t = _median(r)
            ratio = f"{base_s / t:.3f}x" if t and base_s else r.status
            sol = f"SOL {r.sol:.2f}" if r.sol is not None else ""
            print(f"  {impl:24} {_rate(r):>16}  {sol:8}  {ratio}")
    return 0


def _median(r: object) -> float | None:
    """The record's median time in s, when it ran and was correct."""
    if r is None or r.status != "ok" or not r.time_s:
        return None
    return r.time_s.get("median")


def _rate(r: object) -> str:
    if r is None or r.status != "ok":
        return r.status if r is not None else "-"
    memory = r.bound == "memory" or not r.tflops        # the rate that sets its SOL
    return f"{r.gbps or 0:.0f} GB/s" if memory else f"{r.tflops:.1f} TFLOP/s"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
