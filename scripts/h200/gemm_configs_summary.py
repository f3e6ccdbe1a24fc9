"""Table of a gemm_configs sweep (scripts/tune/specs/gemm_configs.yaml): TFLOP/s of every wgmma tile
configuration and its ratio to the eager baseline (cuBLAS, or torch._scaled_mm for fp8), per case.

    python scripts/h200/gemm_configs_summary.py RESULTS.json
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
        base = recs.get("eager")
        base_t = base.tflops if base is not None and base.status == "ok" else None
        print(f"{case} {dtype}: eager {base_t or 0:.1f} TFLOP/s")
        for impl, r in sorted(recs.items(), key=lambda kv: -(kv[1].tflops or 0)):
            if impl == "eager":
                continue
            ratio = f"{r.tflops / base_t:.3f}x" if r.status == "ok" and base_t and r.tflops else r.status
            print(f"  {impl:24} {r.tflops or 0:8.1f}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
