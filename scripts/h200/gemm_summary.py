"""Short table of a GEMM-family results file (scripts/h200/gemm_final.sh prints it last).

    python scripts/h200/gemm_summary.py RESULTS.json

Per op (gemm, gemm_decode, linear_residual), case and dtype: each implementation's TFLOP/s
(compute-bound cases) or GB/s (memory-bound ones) and its ratio to the op's reference
baseline; then issue 13's targets, each as met / MISSED / not measured, with the numbers it
was judged on. A record that is not `ok` shows its status.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solbench.results import Record, load_run  # noqa: E402



@dataclass(frozen=True)
class Target:
    what: str
    op: str
    case: str
    dtype: str
    impls: tuple[str, ...]      # the best of these is judged
    against: tuple[str, ...]    # ... against each of these baselines
    ratio: float                # baseline time / our time must be >= this
    sol: float | None = None    # and SOL at least this (memory-bound targets)


TARGETS = (
    Target("hgemm_wgmma >= cuBLAS at 4096^3", "gemm", "M=4096,N=4096,K=4096", "bfloat16",
           ("hgemm_wgmma", "auto"), ("eager",), 1.0),
    Target("hgemm_wgmma >= cuBLAS at 8192^3", "gemm", "M=8192,N=8192,K=8192", "bfloat16",
           ("hgemm_wgmma", "auto"), ("eager",), 1.0),
    Target("hgemm_wgmma >= 0.95 cuBLAS at 4096x8192x8192", "gemm", "M=4096,N=8192,K=8192", "bfloat16",
           ("hgemm_wgmma", "auto"), ("eager",), 0.95),
    Target("fp8_wgmma >= 0.95 _scaled_mm at 8192^3", "gemm", "M=8192,N=8192,K=8192", "float8_e4m3fn",
           ("fp8_wgmma",), ("eager",), 0.95),
    Target("hgemm_mma >= 0.75 cuBLAS at 8192^3", "gemm", "M=8192,N=8192,K=8192", "bfloat16",
           ("hgemm_mma", "hgemm_mma_bk64", "hgemm_mma_bk64_pipe"), ("eager",), 0.75),
    Target("sgemm_fp32 >= 0.90 cuBLAS fp32 at 8192^3", "gemm", "M=8192,N=8192,K=8192", "float32",
           ("sgemm_fp32", "sgemm_fp32_bk32", "sgemm_fp32_bm64", "auto"), ("eager",), 0.90),
    Target("decode M=16: SOL >= 0.85, faster than cuBLAS (gemm spec)", "gemm", "M=16,N=8192,K=8192",
           "bfloat16", ("auto",), ("eager",), 1.0, 0.85),
    Target("decode M=16: SOL >= 0.85, faster than cuBLAS (gemm_decode spec)", "gemm_decode",
           "M=16,N=8192,K=8192", "bfloat16", ("decode_wgmma", "decode_mma", "auto"), ("eager",), 1.0, 0.85),
    Target("decode M=16 fp32: SOL >= 0.85, faster than cuBLAS fp32 (gemm spec)", "gemm", "M=16,N=8192,K=8192",
           "float32", ("auto",), ("eager",), 1.0, 0.85),
    Target("decode M=16 fp32: SOL >= 0.85, faster than cuBLAS fp32 (gemm_decode spec)", "gemm_decode",
           "M=16,N=8192,K=8192", "float32", ("sgemm_decode", "sgemm_decode_rows2", "auto"), ("eager",), 1.0, 0.85),
)


def median(r: Record | None) -> float | None:
    if r is None or r.status != "ok" or not r.time_s:
        return None
    return r.time_s.get("median")


def value(r: Record) -> str:
    if r.status != "ok":
        return r.status
    if r.bound == "memory" and r.gbps:
        return f"{r.gbps:.0f}GB/s"
    return f"{r.tflops:.1f}" if r.tflops else "-"


def table(op: str, records: list[Record]) -> list[str]:
    mine = [r for r in records if r.op == op]
    if not mine:
        return []
    impls = list(dict.fromkeys(r.impl for r in mine))
    ref = next((r.reference_baseline for r in mine if r.reference_baseline), impls[0])
    width = max(11, *(len(i) + 1 for i in impls))
    lines = [f"{op} (TFLOP/s, or GB/s when memory-bound; x = {ref} time / impl time)",
             f"{'case':22s}{'dtype':10s}" + "".join(f"{i:>{width}s}" for i in impls)]
    for case, dtype in dict.fromkeys((r.case, r.dtype) for r in mine):
        by = {r.impl: r for r in mine if (r.case, r.dtype) == (case, dtype)}
        base = median(by.get(ref))
        row = f"{case:22s}{dtype[:9]:10s}"
        for i in impls:
            r = by.get(i)
            if r is None:
                row += f"{'':>{width}s}"
                continue
            text = value(r)
            t = median(r)
            if t and base and i != ref:
                text += f" {base / t:.2f}x"
            row += f"{text:>{width}s}"
        lines.append(row)
    return lines


def judge(t: Target, records: list[Record]) -> str:
    by = {r.impl: r for r in records if (r.op, r.case, r.dtype) == (t.op, t.case, t.dtype)}
    ours = [(median(by.get(i)), i) for i in t.impls if median(by.get(i))]
    bases = [(median(by.get(b)), b) for b in t.against]
    if not ours or any(m is None for m, _ in bases):
        return f"not measured  {t.what}"
    best_t, best = min(ours)
    ratios = [(m / best_t, b) for m, b in bases]
    sol = by[best].sol
    ok = all(x >= t.ratio for x, _ in ratios) and (t.sol is None or (sol is not None and sol >= t.sol))
    detail = ", ".join(f"{x:.3f}x {b}" for x, b in ratios) + (f", SOL {sol:.2f}" if t.sol is not None else "")
    return f"{'met   ' if ok else 'MISSED'}        {t.what}: {best} {detail}"


def residual_targets(records: list[Record]) -> list[str]:
    """linear_residual: the fused kernel faster than both baselines at every case and dtype."""
    out = []
    lr = [r for r in records if r.op == "linear_residual"]
    for case, dtype in dict.fromkeys((r.case, r.dtype) for r in lr):
        by = {r.impl: r for r in lr if (r.case, r.dtype) == (case, dtype)}
        t = Target(f"linear_residual faster than unfused and addmm at {case} {dtype}", "linear_residual",
                   case, dtype, ("fused",), ("unfused", "addmm"), 1.0)
        if by:
            out.append(judge(t, lr))
    return out


def main(path: str) -> int:
    run = load_run(Path(path))
    records = [r for r in run.records if r.case != "*"]
    failed = [r for r in records if r.status in ("failed", "error", "invalid")]
    out: list[str] = []
    for op in ("gemm", "gemm_decode", "linear_residual"):
        lines = table(op, records)
        if lines:
            out += lines + [""]
    out.append("targets (issue 13)")
    out += ["  " + judge(t, records) for t in TARGETS]
    out += ["  " + line for line in residual_targets(records)]
    out.append(f"\n{len(records)} records, {len(failed)} not ok"
               + "".join(f"\n  {r.op} {r.case} {r.dtype} {r.impl}: {r.status} {r.message[:100]}"
                         for r in failed[:8]))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/h200/gemm_summary.py RESULTS.json")
    raise SystemExit(main(sys.argv[1]))
