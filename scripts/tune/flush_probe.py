"""How much does the L2 flush's own write-back cost the timed call?

    python scripts/tune/flush_probe.py [--json FILE]

solbench's default flush rewrites a buffer of twice the L2 before each timed call, so the call meets an L2
full of dirty lines and may write some of them back inside its window (solbench/measure/l2flush.py).
Nsight Compute's clean-cache durations put that at a few microseconds for calls that only read
(scripts/h200/ncu_vs_events.py); this measures it directly, on the same calls under each flush mode.

Each call is timed with bench() (events timer) after each flush mode (write, read, balanced: read, then
rewrite as many bytes as the call's outputs) and with none, alternating, twice. `--only TEXT` keeps
the calls whose names contain TEXT (comma-separated: any of them). Memory-bound calls only; the bytes are
what each must move (inputs read once, outputs written).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from solbench.measure import TimerCache, bench
from solbench.torch_ops.attention import sdpa

MiB = 2**20


MODES = ("write", "read", "balanced", "none")   # none: no flush (what a tight loop of calls sees)


@dataclass
class Row:
    name: str
    bytes: int
    output_bytes: int
    us: dict[str, list[float]]

    def line(self) -> str:
        best = {m: min(v) for m, v in self.us.items()}
        cols = "  ".join(f"{m} {t:8.1f} us {self.bytes / t / 1e3:5.0f} GB/s" for m, t in best.items())
        return f"{self.name:38} {self.bytes / MiB:6.0f} MiB  {cols}  write/read {best['write'] / best['read']:5.2f}x"


def _bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def calls() -> dict[str, tuple[int, int, Callable[[], Any]]]:
    """name -> (bytes moved, bytes written, the call)."""
    out: dict[str, tuple[int, int, Callable[[], Any]]] = {}
    for n in (8192, 16384):
        a, w = _bf16(16, 8192), _bf16(n, 8192)
        out[f"cuBLAS 16x{n}x8192"] = (w.nbytes + a.nbytes + 16 * n * 2, 16 * n * 2, lambda a=a, w=w: a @ w.t())
    for sk in (4096, 16384, 65536):
        q, k, v = _bf16(1, 64, 1, 128), _bf16(1, 8, sk, 128), _bf16(1, 8, sk, 128)
        out[f"SDPA decode 1x{sk} GQA8"] = (k.nbytes + v.nbytes + 2 * q.nbytes, q.nbytes,
                                           lambda q=q, k=k, v=v: sdpa(q, k, v))
    mat, vec = _bf16(16384, 8192), _bf16(8, 8192)
    gemv_bytes = mat.nbytes + vec.nbytes + 8 * 16384 * 2
    out["cuBLAS GEMV 16384x8192 B=8"] = (gemv_bytes, 8 * 16384 * 2, lambda: vec @ mat.t())
    logits = _bf16(16384, 32768)
    target = torch.randint(0, 32768, (16384,), device="cuda")
    out["F.cross_entropy 16384x32768"] = (logits.nbytes + target.nbytes, 4,
                                          lambda: torch.nn.functional.cross_entropy(logits, target))
    for mib in (64, 256, 1024):
        src = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        out[f"copy {mib} MiB"] = (2 * src.nbytes, src.nbytes, lambda src=src, dst=dst: dst.copy_(src))
    try:
        import kernels_ext

        kernels_ext.ensure_loaded()
    except Exception as exc:  # the PyTorch calls alone still answer the question
        print(f"kernels_ext not loaded ({type(exc).__name__}: {exc}); timing PyTorch only", file=sys.stderr)
        return out
    w32 = torch.randn(8192, 8192, device="cuda")
    for m in (16, 1):
        x = torch.randn(m, 8192, device="cuda")
        out[f"sgemm_decode fp32 {m}x8192x8192"] = (w32.nbytes + x.nbytes + m * 8192 * 4, m * 8192 * 4,
                                                   lambda x=x: kernels_ext.sgemm_decode(x, w32))
        if m == 16:
            out["sgemm_decode tf32x3 fp32 16x8192x8192"] = (
                w32.nbytes + x.nbytes + m * 8192 * 4, m * 8192 * 4,
                lambda x=x: kernels_ext.sgemm_decode(x, w32, "tf32x3"))
        out[f"cuBLAS fp32 {m}x8192x8192"] = (w32.nbytes + x.nbytes + m * 8192 * 4, m * 8192 * 4,
                                             lambda x=x: x @ w32.t())
    a16, w = _bf16(16, 8192), _bf16(8192, 8192)
    out["gemm_decode_mma 16x8192x8192"] = (w.nbytes + a16.nbytes + 16 * 8192 * 2, 16 * 8192 * 2,
                                           lambda: kernels_ext.gemm_decode_mma(a16, w))
    out["gemm_decode 16x8192x8192"] = (w.nbytes + a16.nbytes + 16 * 8192 * 2, 16 * 8192 * 2,
                                       lambda: kernels_ext.gemm_decode(a16, w))
    out["kernels_ext.gemv 16384x8192 B=8"] = (gemv_bytes, 8 * 16384 * 2, lambda: kernels_ext.gemv(mat, vec))
    out["kernels_ext.cross_entropy 16384x32768"] = (logits.nbytes + target.nbytes, 4,
                                                    lambda: kernels_ext.cross_entropy(logits, target))
    for sk in (16384, 65536):
        q, k, v = _bf16(1, 64, 1, 128), _bf16(1, 8, sk, 128), _bf16(1, 8, sk, 128)
        out[f"attention_decode 1x{sk} GQA8"] = (k.nbytes + v.nbytes + 2 * q.nbytes, q.nbytes,
                                                lambda q=q, k=k, v=v: kernels_ext.attention_decode(q, k, v))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--only", default="", help="keep the calls whose names contain one of these (comma-separated)")
    args = p.parse_args()
    keep = [t for t in args.only.split(",") if t]
    rows = []
    cache = TimerCache()                    # the events tare once, not once per call
    for name, (nbytes, written, fn) in calls().items():
        if keep and not any(t in name for t in keep):
            continue
        row = Row(name, nbytes, written, {m: [] for m in MODES})
        for _ in range(args.repeats):       # alternating, so drift in clocks hits every mode alike
            for mode in MODES:
                flushed = mode != "none"
                m = bench(fn, flush=flushed, flush_mode=mode if flushed else "balanced", budget_s=1.0,
                          output_bytes=written, cache=cache)
                row.us[mode].append(m.stats.median * 1e6)
        rows.append(row)
        print(row.line(), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                                         "rows": [asdict(r) for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
