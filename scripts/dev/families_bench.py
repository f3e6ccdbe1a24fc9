"""GPU driver for issue 15's kernel families: correctness first, then time against eager and compiled.

Run on the H200 machine through scripts/dev/families.sh, which builds libskfamilies.so and calls

    python scripts/dev/families_bench.py --lib BUILD/libskfamilies.so --out OUT

Families run in a few child processes (GROUPS), each with a time limit; a child that dies (a CUDA
error poisons its context) costs only the family it was in: the parent restarts the group's
remaining families. Children append records to OUT/families.jsonl as they go; the parent writes
OUT/families.json and prints a short table last.

Every check uses fresh random inputs (never zeros), poisons outputs first (families_lib.py) and
compares with a float64 reference, or bit for bit where the op is exact. Timing is triton's do_bench
(warm-up 25 ms, 100 ms of repetitions, median; the L2 is flushed between calls), the kernels and
PyTorch's eager and torch.compile versions of the same op in the same process. SOL is the fused
byte count over the device-to-device copy bandwidth measured at the start of each child.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "dev")]

FAMILIES = ("rope", "transpose", "cross_entropy", "embedding", "quant", "gemv", "histogram", "nms")
GROUPS = (("rope", "transpose", "embedding"), ("cross_entropy", "quant"), ("gemv", "histogram", "nms"))
GROUP_TIMEOUT_S = 150
COMPILE_MARGIN_S = 45      # no new torch.compile when less than this is left before the deadline
COMPILE_BUDGET_S = 16      # seconds of torch.compile per family (the first one pays inductor's import)
# Cases run largest first, so a family's compile budget goes to the large cases (the SOL targets)
# before the small ones.


@dataclass
class Rec:
    family: str
    case: str
    dtype: str
    impl: str
    correct: bool | None = None
    err: float | None = None
    us: float | None = None
    gbps: float | None = None
    sol: float | None = None
    nbytes: float = 0.0
    note: str = ""


class Ctx:
    """What a family's run needs: the kernels, the clock, the copy ceiling and the record sink.

    `kernels` is families_lib.Families on the GPU; scripts/dev/families_dryrun.py passes stand-ins
    made of the PyTorch references to run this driver's own logic on a CPU. Cases whose main tensor
    has more than `max_elements` elements are left out (the dry run's small sizes).
    """

    def __init__(self, kernels: Any, out: Path, deadline: float, dev: str = "cuda",
                 max_elements: float = math.inf):
        import torch

        self.torch = torch
        self.k = kernels
        self.out = out
        self.deadline = deadline
        self.dev = dev
        self.max_elements = max_elements
        self.gen = torch.Generator(device=dev).manual_seed(1234)
        self.compiled: dict[tuple, Callable] = {}
        self.compile_left = COMPILE_BUDGET_S
        self.copy_bw = self._copy_bandwidth()
        self.emit({"event": "copy_bw", "gbps": self.copy_bw / 1e9})

    def fits(self, *shape: int) -> bool:
        return math.prod(shape) <= self.max_elements

    def sync(self) -> None:
        if self.dev != "cpu":
            self.torch.cuda.synchronize()

    # -------------------------------------------------------------- plumbing
    def emit(self, obj: dict[str, Any]) -> None:
        with open(self.out / "families.jsonl", "a") as f:
            f.write(json.dumps(obj) + "\n")

    def record(self, r: Rec) -> Rec:
        self.emit({"event": "record", **asdict(r)})
        return r

    def bench(self, fn: Callable[[], Any]) -> float:
        """Median milliseconds per call, L2 flushed between calls."""
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def _copy_bandwidth(self) -> float:
        torch = self.torch
        x = torch.empty(int(min(1 << 30, 64 * self.max_elements)), dtype=torch.uint8, device=self.dev)
        y = torch.empty_like(x)
        ms = self.bench(lambda: y.copy_(x))
        return 2 * x.numel() / (ms * 1e-3)

    def randn(self, *shape, dtype=None, scale: float = 1.0):
        torch = self.torch
        x = torch.randn(*shape, generator=self.gen, device=self.dev) * scale
        x = torch.where(x.abs() < 1e-2 * scale, torch.full_like(x, 1e-2 * scale), x)  # no zeros
        return x.to(dtype or torch.float32)

    def compile(self, key: tuple, fn: Callable) -> Callable | None:
        """torch.compile(fn, dynamic=False), or None once this family's compile budget is spent or
        too little time is left before the deadline (compiling happens at the first call)."""
        if key in self.compiled:
            return self.compiled[key]
        if self.compile_left <= 0 or time.time() > self.deadline - COMPILE_MARGIN_S:
            return None
        self.compiled[key] = self.torch.compile(fn, dynamic=False)
        return self.compiled[key]

    def start_family(self) -> None:
        self.compile_left = COMPILE_BUDGET_S

    def time_impls(self, family: str, case: str, dtype: str, nbytes: float,
                   impls: dict[str, Callable[[], Any] | None], note: str = "") -> list[Rec]:
        """Time each impl (None: skipped) and record it with its bandwidth and SOL.

        The kernels' outputs are not poisoned while timing: the NaN fill is a second pass over
        every output (in the v1 run, results/h200/dev/families_v1.*, it was timed with the
        kernels, e.g. out-of-place rope 270 us against 168 us in place for the same bytes)."""
        poison = getattr(self.k, "poison", None)
        if poison is not None:
            self.k.poison = False
        try:
            return self._time_impls(family, case, dtype, nbytes, impls, note)
        finally:
            if poison is not None:
                self.k.poison = poison

    def _time_impls(self, family: str, case: str, dtype: str, nbytes: float,
                    impls: dict[str, Callable[[], Any] | None], note: str) -> list[Rec]:
        recs = []
        for name, fn in impls.items():
            r = Rec(family, case, dtype, name, nbytes=nbytes, note=note)
            if fn is None:
                r.note = "skipped: this family's torch.compile budget is spent"
            else:
                try:
                    t0 = time.time()
                    fn()  # compile / warm up outside the measurement
                    self.sync()
                    if name == "compiled":
                        self.compile_left -= time.time() - t0
                    ms = self.bench(fn)
                    r.us = ms * 1e3
                    r.gbps = nbytes / (ms * 1e-3) / 1e9
                    r.sol = nbytes / (ms * 1e-3) / self.copy_bw
                except Exception as exc:  # one impl failing does not stop the others
                    r.note = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    _raise_if_context_lost(self.torch)
            recs.append(self.record(r))
        return recs

    def check(self, family: str, case: str, dtype: str, impl: str, run: Callable[[], tuple[bool, float, str]]) -> bool:
        """Record one correctness check: run() -> (ok, error measure, note)."""
        try:
            ok, err, note = run()
        except Exception as exc:
            _raise_if_context_lost(self.torch)
            ok, err, note = False, math.inf, f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        self.record(Rec(family, case, dtype, impl, correct=bool(ok), err=err, note=note))
        return bool(ok)


def _raise_if_context_lost(torch) -> None:
    """After an illegal address the context is unusable: let the child die so the parent moves on."""
    if not torch.cuda.is_available():
        return
    try:
        torch.cuda.synchronize()
    except Exception:
        raise SystemExit(3)


# ------------------------------------------------------------------------ comparisons
def exact(out, ref) -> tuple[bool, float, str]:
    """Equal element for element (NaN equal to NaN: the poison-free NaN rows some ops promise)."""
    if tuple(out.shape) != tuple(ref.shape):
        return False, math.inf, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o, r = out.reshape(-1), ref.reshape(-1).to(out.device)
    diff = o != r
    if o.is_floating_point():
        diff &= ~(o.isnan() & r.isnan())
    bad = int(diff.sum())
    return bad == 0, float(bad), f"{bad} of {r.numel()} differ" if bad else ""


def same_bits(out, ref) -> tuple[bool, float, str]:
    """Byte-for-byte equality (fp8 codes, NaN payloads, signed zeros included)."""
    if tuple(out.shape) != tuple(ref.shape) or out.dtype != ref.dtype:
        return False, math.inf, f"{tuple(out.shape)} {out.dtype} vs {tuple(ref.shape)} {ref.dtype}"
    o = out.contiguous().view(-1).view(_torch().uint8)
    r = ref.contiguous().view(-1).view(_torch().uint8)
    bad = int((o != r).sum())
    return bad == 0, float(bad), f"{bad} of {r.numel()} bytes differ" if bad else ""


def within(out, ref, atol: float, rtol: float) -> tuple[bool, float, str]:
    """Elementwise |out - ref| <= atol + rtol |ref|; the error reported is the worst ratio to that bound."""
    torch = _torch()
    o, r = out.double(), ref.double()
    if tuple(o.shape) != tuple(r.shape):
        return False, math.inf, f"shape {tuple(o.shape)} != {tuple(r.shape)}"
    if not torch.isfinite(o).all():
        return False, math.inf, f"{int((~torch.isfinite(o)).sum())} non-finite values"
    ratio = ((o - r).abs() / (atol + rtol * r.abs())).max().item() if o.numel() else 0.0
    return ratio <= 1.0, ratio, "" if ratio <= 1.0 else f"worst error {ratio:.3g}x the bound"


def normwise(out, ref, tol: float) -> tuple[bool, float, str]:
    torch = _torch()
    o, r = out.double(), ref.double()
    if not torch.isfinite(o).all():
        return False, math.inf, f"{int((~torch.isfinite(o)).sum())} non-finite values"
    e = float(torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r))
    return e <= tol, e, "" if e <= tol else f"normwise error {e:.3g} > {tol:g}"


def _torch():
    import torch

    return torch


def both(*results: tuple[bool, float, str]) -> tuple[bool, float, str]:
    bad = [r for r in results if not r[0]]
    worst = max(r[1] for r in results)
    return (not bad, worst, "; ".join(r[2] for r in bad))


U = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8}


def dname(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------------ families
def run_rope(c: Ctx) -> None:
    torch = c.torch
    from solbench.torch_ops import rope as R

    cases = [(4096, 8, 2, 128, True), (4096, 8, 2, 128, False), (1031, 7, 3, 80, True), (1031, 7, 3, 72, False),
             (32768, 32, 8, 128, False), (32768, 32, 8, 128, True)]
    for dtype in (torch.bfloat16, torch.float32):
        u = U[dname(dtype)]
        for T, H, KH, D, neox in reversed(cases):
            if not c.fits(T, H + KH, D):
                continue
            label = f"T={T},H={H},KH={KH},D={D},{'neox' if neox else 'gptj'}"
            q, k = c.randn(T, H, D, dtype=dtype), c.randn(T, KH, D, dtype=dtype)
            cs = R.cos_sin_cache((T, D), dtype, c.gen, c.dev)
            ref = R.rope_reference(q.double(), k.double(), cs.double(), neox)
            tol = dict(atol=8 * u, rtol=2 * u)   # the spec's bound (specs/ops/rope.yaml)
            c.check("rope", label, dname(dtype), "cuda", lambda: both(
                *(within(o, r, **tol) for o, r in zip(c.k.rope(q, k, cs, neox), ref))))
            qi, ki = q.clone(), k.clone()
            c.check("rope", label, dname(dtype), "cuda_inplace", lambda: both(
                *(within(o, r, **tol) for o, r in zip(c.k.rope_inplace(qi, ki, cs, neox), ref))))
            if T < 32768:
                # q and k as strided slices of a fused projection [T, H + 2 KH, D], rotated in place.
                qkv = c.randn(T, H + 2 * KH, D, dtype=dtype)
                v_before = qkv[:, H + KH:].clone()
                qs, ks = qkv[:, :H], qkv[:, H:H + KH]
                rq, rk = R.rope_reference(qs.double(), ks.double(), cs.double(), neox)
                c.k.rope_inplace(qs, ks, cs, neox)
                c.check("rope", label, dname(dtype), "cuda_strided_inplace", lambda: both(
                    within(qs, rq, **tol), within(ks, rk, **tol), exact(qkv[:, H + KH:], v_before)))
            # bf16: the small case and both large layouts; fp32: the large NeoX case
            if (dtype == torch.bfloat16 and ((T, D) == (32768, 128) or (T, D, neox) == (4096, 128, True))) \
                    or (T, neox) == (32768, True):
                nbytes = 2 * (q.numel() + k.numel()) * q.element_size() + cs.numel() * cs.element_size()
                comp = c.compile(("rope", dname(dtype), label), R.rope)
                qt, kt = q.clone(), k.clone()
                c.time_impls("rope", label, dname(dtype), nbytes, {
                    "cuda": lambda: c.k.rope(q, k, cs, neox),
                    "cuda_inplace": lambda: c.k.rope_inplace(qt, kt, cs, neox),
                    "eager": lambda: R.rope(q, k, cs, neox),
                    "eager_inplace": lambda: R.rope_inplace(qt, kt, cs, neox),
                    "compiled": None if comp is None else (lambda: comp(q, k, cs, neox)),
                })


def run_transpose(c: Ctx) -> None:
    torch = c.torch
    shapes = [(1024, 1024), (4095, 4097), (1, 7), (33, 1), (32768, 8192), (16, 256, 256), (7, 129, 1000),
              (64, 2048, 1024)]
    timed = {torch.bfloat16: {(1024, 1024), (4095, 4097), (32768, 8192), (16, 256, 256), (64, 2048, 1024)},
             torch.float32: {(1024, 1024), (32768, 8192)}}

    def eager(x):
        return x.transpose(-2, -1).contiguous()

    for dtype in (torch.bfloat16, torch.float32):
        for shape in reversed(shapes):
            if not c.fits(*shape):
                continue
            label = "x".join(map(str, shape))
            x = c.randn(*shape, dtype=dtype)
            c.check("transpose", label, dname(dtype), "cuda", lambda: exact(c.k.transpose(x), eager(x)))
            if shape in timed[dtype]:
                nbytes = 2 * x.numel() * x.element_size()
                comp = c.compile(("transpose", dname(dtype), shape), eager) if shape in {
                    (1024, 1024), (32768, 8192), (64, 2048, 1024)} else None
                c.time_impls("transpose", label, dname(dtype), nbytes, {
                    "cuda": lambda: c.k.transpose(x), "eager": lambda: eager(x),
                    "compiled": None if comp is None else (lambda: comp(x))})
        # rows of x strided (a column slice), and a misaligned start: the scalar path
        big = c.randn(1000, 1030, dtype=dtype)
        xs = big[:, 3:1003]
        c.check("transpose", "1000x1000 of a 1000x1030 (strided, misaligned)", dname(dtype), "cuda",
                lambda: exact(c.k.transpose(xs), eager(xs)))


def run_embedding(c: Ctx) -> None:
    torch = c.torch
    import torch.nn.functional as F

    cases = [(4096, 32000, 1024), (4095, 50257, 1000), (65536, 128256, 4096)]
    for dtype in (torch.bfloat16, torch.float32):
        for T, V, D in reversed(cases):
            if not c.fits(V, D):
                continue
            label = f"T={T},V={V},D={D}"
            table = c.randn(V, D, dtype=dtype)
            idx = torch.randint(0, V, (T,), generator=c.gen, device=c.dev)
            ref = F.embedding(idx, table)
            c.check("embedding", label, dname(dtype), "cuda", lambda: exact(c.k.embedding(table, idx), ref))
            c.check("embedding", label, dname(dtype), "cuda_unchecked",
                    lambda: exact(c.k.embedding(table, idx, check=False), ref))
            if dtype == torch.float32 and T != 65536:
                continue
            nbytes = T * 8 + 2 * T * D * table.element_size()
            comp = c.compile(("embedding", dname(dtype), label), F.embedding) if T != 4095 else None
            c.time_impls("embedding", label, dname(dtype), nbytes, {
                "cuda": lambda: c.k.embedding(table, idx), "cuda_unchecked": lambda: c.k.embedding(table, idx, False),
                "eager": lambda: F.embedding(idx, table),
                "compiled": None if comp is None else (lambda: comp(idx, table))})
        # bad indices: never read, NaN rows, and a clear error when checked
        table = c.randn(1000, 64, dtype=dtype)
        idx = torch.randint(0, 1000, (3, 50), generator=c.gen, device=c.dev)
        idx[0, 7], idx[2, 49] = -1, 1000

        def bad_checked():
            try:
                c.k.embedding(table, idx)
            except IndexError as exc:
                ok = "2 of 150" in str(exc) and "[149] = 1000" in str(exc)
                return ok, 0.0, "" if ok else f"unexpected message: {exc}"
            return False, math.inf, "no error raised"

        def bad_unchecked():
            out = c.k.embedding(table, idx, check=False)
            good = ~torch.isin(idx, torch.tensor([-1, 1000], device=c.dev))
            nan_rows = out.isnan().all(-1)
            return both(exact(nan_rows, ~good), exact(out[good], F.embedding(idx[good], table)))

        c.check("embedding", "out-of-range indices", dname(dtype), "cuda", bad_checked)
        c.check("embedding", "out-of-range indices", dname(dtype), "cuda_unchecked", bad_unchecked)
        strided = c.randn(1000, 72, dtype=dtype)[:, 4:68]
        c.check("embedding", "strided table", dname(dtype), "cuda",
                lambda: exact(c.k.embedding(strided, idx.clamp(0, 999)), F.embedding(idx.clamp(0, 999), strided)))


def run_cross_entropy(c: Ctx) -> None:
    torch = c.torch
    from solbench.torch_ops import loss as L

    cases = [(1024, 4096), (4096, 50257), (64, 262144), (1024, 262144), (16384, 32768)]
    # bf16: the mean everywhere, per-row losses at the small and the 1 GiB case; fp32: the 1 GiB case
    timed = {torch.bfloat16: {"mean": set(cases), "none": {(1024, 4096), (16384, 32768)}},
             torch.float32: {"mean": {(16384, 32768)}, "none": {(16384, 32768)}}}
    for dtype in (torch.bfloat16, torch.float32):
        for N, V in reversed(cases):
            if not c.fits(N, V):
                continue
            label = f"N={N},V={V}"
            logits = c.randn(N, V, dtype=dtype, scale=2.0)
            full = torch.randint(0, V, (N,), generator=c.gen, device=c.dev)
            ignored = torch.where(torch.rand(N, generator=c.gen, device=c.dev) < 0.125,
                                  torch.full_like(full, -100), full)
            # the kernel computes in fp32 whatever the logits' dtype: hold it to fp32 accuracy
            tol = dict(atol=1e-5, rtol=2e-5)
            for red, tgt in (("mean", ignored), ("none", full), ("sum", ignored)):
                ref = L.cross_entropy_reference(logits.double(), tgt, reduction=red)
                c.check("cross_entropy", f"{label},{red}", dname(dtype), "cuda",
                        lambda: within(c.k.cross_entropy(logits, tgt, reduction=red), ref, **tol))
            for red, tgt in (("mean", ignored), ("none", full)):
                if (N, V) in timed[dtype][red]:
                    nbytes = N * V * logits.element_size() + N * 8 + (4 if red == "mean" else 4 * N)
                    comp = c.compile(("ce", dname(dtype), label, red), L.cross_entropy) \
                        if (dtype == torch.bfloat16 and red == "mean") or (N, V) == (16384, 32768) else None
                    c.time_impls("cross_entropy", f"{label},{red}", dname(dtype), nbytes, {
                        "cuda": lambda: c.k.cross_entropy(logits, tgt, reduction=red),
                        "eager": lambda: L.cross_entropy(logits, tgt, reduction=red),
                        "compiled": None if comp is None else (lambda: comp(logits, tgt, reduction=red))})
        # edge cases: an out-of-range target gives NaN (never a read out of bounds); all ignored: NaN mean
        logits = c.randn(8, 1000, dtype=dtype)
        tgt = torch.randint(0, 1000, (8,), generator=c.gen, device=c.dev)
        tgt[3] = 1000

        def out_of_range():
            rows = c.k.cross_entropy(logits, tgt, reduction="none")
            ref = L.cross_entropy_reference(logits.double(), tgt.clamp(max=999), reduction="none")
            ok = bool(rows[3].isnan()) and bool(rows[torch.arange(8, device=c.dev) != 3].isfinite().all())
            mean_nan = bool(c.k.cross_entropy(logits, tgt).isnan())
            keep = torch.arange(8, device=c.dev) != 3
            close = within(rows[keep], ref[keep], 1e-5, 2e-5)
            return ok and mean_nan and close[0], close[1], "" if ok and mean_nan else "expected NaN for row 3 and the mean"

        c.check("cross_entropy", "out-of-range target", dname(dtype), "cuda", out_of_range)
        c.check("cross_entropy", "all ignored", dname(dtype), "cuda", lambda: (
            bool(c.k.cross_entropy(logits, torch.full_like(tgt, -100)).isnan()), 0.0, "mean of nothing is NaN"))


def run_quant(c: Ctx) -> None:
    torch = c.torch
    from solbench.torch_ops import quant as Q

    cases = [(4096, 1024), (1000, 999), (32768, 8192)]
    for dtype in (torch.bfloat16, torch.float32):
        for M, N in reversed(cases):
            if not c.fits(M, N):
                continue
            label = f"M={M},N={N}"
            x = c.randn(M, N, dtype=dtype)
            scale = Q.quant_scale((), torch.float32, c.gen, c.dev)
            c.check("fp8_quant", label, dname(dtype), "cuda", lambda: same_bits(c.k.fp8_quant(x, scale), Q.fp8_quant(x, scale)))
            c.check("fp8_quant_dynamic", label, dname(dtype), "cuda", lambda: both(
                *(same_bits(o, r) for o, r in zip(c.k.fp8_quant_dynamic(x), Q.fp8_quant_dynamic(x)))))
            c.check("fp8_quant_rows", label, dname(dtype), "cuda", lambda: both(
                *(same_bits(o, r) for o, r in zip(c.k.fp8_quant_rows(x), Q.fp8_quant_rows(x)))))
            el = x.element_size()
            if M != 1000 and (dtype == torch.bfloat16 or M == 32768):   # fp32: the large case only
                for op, nbytes, ours, eager in (
                        ("fp8_quant", M * N * (el + 1) + 4, lambda: c.k.fp8_quant(x, scale), Q.fp8_quant),
                        ("fp8_quant_dynamic", M * N * (2 * el + 1) + 4, lambda: c.k.fp8_quant_dynamic(x),
                         Q.fp8_quant_dynamic),
                        ("fp8_quant_rows", M * N * (el + 1) + 4 * M, lambda: c.k.fp8_quant_rows(x), Q.fp8_quant_rows)):
                    args = (x, scale) if op == "fp8_quant" else (x,)
                    comp = c.compile((op, dname(dtype), label), eager) if dtype == torch.bfloat16 else None
                    c.time_impls(op, label, dname(dtype), nbytes, {
                        "cuda": ours, "eager": lambda eager=eager, args=args: eager(*args),
                        "compiled": None if comp is None else (lambda comp=comp, args=args: comp(*args))})
        # a misaligned start (x[1:] of a flat tensor: 2 or 4 bytes off): the scalar kernels
        flat = c.randn(1 + 4096 * 33, dtype=dtype)[1:].view(4096, 33)
        scale = Q.quant_scale((), torch.float32, c.gen, c.dev)
        c.check("fp8_quant", "misaligned 4096x33", dname(dtype), "cuda",
                lambda: same_bits(c.k.fp8_quant(flat, scale), Q.fp8_quant(flat, scale)))
        c.check("fp8_quant_rows", "misaligned 4096x33", dname(dtype), "cuda", lambda: both(
            *(same_bits(o, r) for o, r in zip(c.k.fp8_quant_rows(flat), Q.fp8_quant_rows(flat)))))
        long_rows = c.randn(3, 70001, dtype=dtype)      # longer than a register-held row: streamed
        c.check("fp8_quant_rows", "3x70001 (streamed rows)", dname(dtype), "cuda", lambda: both(
            *(same_bits(o, r) for o, r in zip(c.k.fp8_quant_rows(long_rows), Q.fp8_quant_rows(long_rows)))))
        zeros = torch.zeros(64, 64, dtype=dtype, device=c.dev)
        c.check("fp8_quant_dynamic", "all zeros (amax clamped)", dname(dtype), "cuda", lambda: both(
            *(same_bits(o, r) for o, r in zip(c.k.fp8_quant_dynamic(zeros), Q.fp8_quant_dynamic(zeros)))))
    for M, N in reversed(cases + [(32768, 16384)]):
        if not c.fits(M, N):
            continue
        label = f"M={M},N={N}"
        q = Q.fp8_codes((M, N), torch.float8_e4m3fn, c.gen, c.dev)
        scale = Q.quant_scale((), torch.float32, c.gen, c.dev)
        rows = Q.quant_scale((M,), torch.float32, c.gen, c.dev)
        c.check("fp8_dequant", label, "bfloat16", "cuda", lambda: same_bits(c.k.fp8_dequant(q, scale), Q.fp8_dequant(q, scale)))
        c.check("fp8_dequant", label + ",per-row", "bfloat16", "cuda",
                lambda: same_bits(c.k.fp8_dequant(q, rows), Q.fp8_dequant(q, rows)))
        if M != 1000:
            comp = c.compile(("dequant", label), Q.fp8_dequant)
            c.time_impls("fp8_dequant", label, "bfloat16", M * N * 3 + 4, {
                "cuda": lambda: c.k.fp8_dequant(q, scale), "eager": lambda: Q.fp8_dequant(q, scale),
                "compiled": None if comp is None else (lambda: comp(q, scale))})


def run_gemv(c: Ctx) -> None:
    torch = c.torch
    from solbench.torch_ops import gemv as G

    cases = [(4096, 4096, 1), (65536, 128, 4), (4095, 16384, 8), (14336, 4096, 2), (16384, 8192, 8),
             (16384, 8192, 1), (1000, 1001, 3), (777, 4096, 11)]
    tols = {"float32": 1e-5, "bfloat16": 7.8125e-3}
    for dtype in (torch.bfloat16, torch.float32):
        for M, K, B in reversed(cases):
            if not c.fits(M, K):
                continue
            label = f"M={M},K={K},B={B}"
            a, x = c.randn(M, K, dtype=dtype), c.randn(B, K, dtype=dtype)
            ref = x.double() @ a.double().t()
            # normwise as the spec, and every element within twice its output rounding plus an fp32
            # accumulation allowance (8 sqrt(K) ulps of sum |a x|: a rounding walk, with room)
            scale = x.double().abs() @ a.double().abs().t()
            el_tol = 2 * U[dname(dtype)] * ref.abs() + 8 * math.sqrt(K) * 2.0 ** -24 * scale

            def gemv_ok(variant: str = "simt") -> tuple[bool, float, str]:
                y = c.k.gemv(a, x, variant)
                return both(normwise(y, ref, tols[dname(dtype)]), _below(y, ref, el_tol))

            c.check("gemv", label, dname(dtype), "cuda", gemv_ok)
            mma = dtype != torch.float32 and K % 8 == 0
            if mma:
                c.check("gemv", label, dname(dtype), "cuda_mma", lambda: gemv_ok("mma"))
            if (M, K, B) not in {(1000, 1001, 3), (777, 4096, 11)} and (
                    dtype == torch.bfloat16 or (M, K) == (16384, 8192)):   # fp32: the large cases only
                nbytes = (M * K + B * K + B * M) * a.element_size()
                comp = c.compile(("gemv", dname(dtype), label), G.gemv) if (M, K, B) in {
                    (4096, 4096, 1), (16384, 8192, 8), (16384, 8192, 1)} else None
                impls = {"cuda": lambda: c.k.gemv(a, x), "eager": lambda: G.gemv(a, x),
                         "compiled": None if comp is None else (lambda: comp(a, x))}
                if mma:
                    impls["cuda_mma"] = lambda: c.k.gemv(a, x, "mma")
                c.time_impls("gemv", label, dname(dtype), nbytes, impls)
    a, v = c.randn(1000, 512, dtype=torch.bfloat16), c.randn(512, dtype=torch.bfloat16)
    c.check("gemv", "x 1-D", "bfloat16", "cuda", lambda: normwise(c.k.gemv(a, v), a.double() @ v.double(), 7.8125e-3))


def _below(out, ref, bound) -> tuple[bool, float, str]:
    torch = _torch()
    o = out.double()
    if not torch.isfinite(o).all():
        return False, math.inf, "non-finite values"
    ratio = float(((o - ref).abs() / bound).max())
    return ratio <= 1.0, ratio, "" if ratio <= 1.0 else f"an element is {ratio:.3g}x its bound"


def run_histogram(c: Ctx) -> None:
    torch = c.torch
    from solbench.torch_ops import histogram as Hs

    cases = [(1 << 20, 256), (1000003, 4096), (1 << 28, 4096), (1 << 28, 256), (100000, 8192), (12345, 1)]
    for dtype in (torch.int32, torch.uint8):
        for N, bins in reversed(cases):
            if not c.fits(N) or (dtype == torch.uint8 and bins > 256):
                continue
            label = f"N={N},bins={bins}"
            uniform = torch.randint(0, bins, (N,), generator=c.gen, device=c.dev).to(dtype)
            skewed = Hs.skewed_values((N,), dtype, c.gen, c.dev) if bins >= 256 else uniform
            constant = torch.full((N,), min(7, bins - 1), dtype=dtype, device=c.dev)
            for kind, x in (("uniform", uniform), ("skewed", skewed), ("one bin", constant)):
                c.check("histogram", f"{label},{kind}", dname(dtype), "cuda",
                        lambda: exact(c.k.histogram(x, bins), Hs.histogram_reference(x, bins)))
            if N in (1 << 20, 1 << 28) and not (dtype == torch.int32 and bins == 256 and N == 1 << 28):
                nbytes = N * x.element_size() + bins * 8
                for kind, x in (("uniform", uniform), ("skewed", skewed)):
                    comp = c.compile(("hist", dname(dtype), label), Hs.scatter_count) if kind == "uniform" else None
                    c.time_impls("histogram", f"{label},{kind}", dname(dtype), nbytes, {
                        "cuda": lambda x=x: c.k.histogram(x, bins), "eager": lambda x=x: Hs.bincount(x, bins),
                        "compiled": None if comp is None else (lambda x=x: comp(x, bins))})
        # values out of range are ignored; a misaligned start takes the scalar head
        x = torch.randint(-50, 300, (100001,), generator=c.gen, device=c.dev).to(dtype)
        c.check("histogram", "out-of-range values, bins=256", dname(dtype), "cuda",
                lambda: exact(c.k.histogram(x, 256), Hs.histogram_reference(x, 256)))
        xm = torch.randint(0, 256, (100003,), generator=c.gen, device=c.dev).to(dtype)[3:]
        c.check("histogram", "misaligned start", dname(dtype), "cuda",
                lambda: exact(c.k.histogram(xm, 256), Hs.histogram_reference(xm, 256)))


def run_nms(c: Ctx) -> None:
    torch = c.torch
    from solbench.torch_ops import nms as Nm

    try:
        import torchvision
        have_tv = True
    except ImportError:
        have_tv = False
    for n in (1, 63, 64, 65, 1000, 5000, 20000):
        if not c.fits(n, 20):
            continue
        boxes = Nm.detection_boxes((n, 4), torch.float32, c.gen, c.dev)
        scores = Nm.scores_uniform((n,), torch.float32, c.gen, c.dev)
        for thr in ((0.3, 0.5, 0.7) if n == 5000 else (0.5,)):
            label = f"N={n},iou={thr}"
            ref = torchvision.ops.nms(boxes, scores, thr) if have_tv else Nm.nms_loop(boxes, scores, thr)
            c.check("nms", label, "float32", "cuda", lambda: exact(c.k.nms(boxes, scores, thr), ref))
            if thr == 0.5 and n >= 1000:
                nbytes = n * 16 + n * 4 + ref.numel() * 8
                impls = {"cuda": lambda: c.k.nms(boxes, scores, thr)}
                if have_tv:
                    impls["torchvision"] = lambda: torchvision.ops.nms(boxes, scores, thr)
                c.time_impls("nms", label, "float32", nbytes, impls,
                             note=f"kept {ref.numel()}" + ("" if have_tv else "; no torchvision"))
    # ties: equal scores resolve by the same sort as torchvision
    boxes = Nm.detection_boxes((3000, 4), torch.float32, c.gen, c.dev)
    scores = (torch.rand(3000, generator=c.gen, device=c.dev) * 64).floor() / 64
    ref = torchvision.ops.nms(boxes, scores, 0.5) if have_tv else Nm.nms_loop(boxes, scores, 0.5)
    c.check("nms", "N=3000, tied scores", "float32", "cuda", lambda: exact(c.k.nms(boxes, scores, 0.5), ref))


RUNNERS = {"rope": run_rope, "transpose": run_transpose, "cross_entropy": run_cross_entropy,
           "embedding": run_embedding, "quant": run_quant, "gemv": run_gemv, "histogram": run_histogram,
           "nms": run_nms}


# ------------------------------------------------------------------------ processes and report
def child(lib: Path, out: Path, families: list[str], deadline: float) -> int:
    from families_lib import Families

    c = Ctx(Families(lib), out, deadline)
    for fam in families:
        c.emit({"event": "start", "family": fam})
        c.start_family()
        started = time.time()
        try:
            RUNNERS[fam](c)
        except SystemExit:
            raise
        except Exception as exc:
            c.emit({"event": "error", "family": fam, "message": traceback.format_exc()[-2000:]})
            print(f"{fam}: {type(exc).__name__}: {exc}", file=sys.stderr)
            _raise_if_context_lost(c.torch)
        c.emit({"event": "done", "family": fam, "seconds": round(time.time() - started, 1)})
    return 0


def events(out: Path) -> list[dict[str, Any]]:
    path = out / "families.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_groups(lib: Path, out: Path, families: list[str], deadline: float, log: Any) -> None:
    """Each group in its own child; a child that dies inside a family costs that family only."""
    for group in GROUPS:
        todo = [f for f in group if f in families]
        while todo:
            left = deadline - time.time()
            if left < 10:
                print(f"out of time before {todo}", file=log)
                break
            cmd = [sys.executable, __file__, "--lib", str(lib), "--out", str(out), "--child", ",".join(todo),
                   "--deadline", str(deadline)]
            try:
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=min(GROUP_TIMEOUT_S, left))
                code = proc.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
            ev = events(out)
            started = {e["family"] for e in ev if e.get("event") == "start"}
            done = {e["family"] for e in ev if e.get("event") == "done"}
            crashed = [f for f in todo if f in started and f not in done]
            for f in crashed:
                print(f"{f}: the child ended ({code}) inside this family; moving on", file=log)
                with open(out / "families.jsonl", "a") as f_events:
                    f_events.write(json.dumps({"event": "crash", "family": f, "code": str(code)}) + "\n")
            if not any(f in started for f in todo):  # died before its first family: do not retry
                print(f"the child for {todo} ended ({code}) before starting: see above", file=log)
                with open(out / "families.jsonl", "a") as f_events:
                    f_events.write(json.dumps({"event": "error", "family": ",".join(todo),
                                               "message": f"child ended ({code}) before starting"}) + "\n")
                break
            todo = [f for f in todo if f not in started]


def parent(lib: Path, out: Path, families: list[str], budget_s: float) -> int:
    deadline = time.time() + budget_s
    (out / "families.jsonl").unlink(missing_ok=True)
    with open(out / "families_bench.log", "w") as log:
        _run_groups(lib, out, families, deadline, log)
    ev = events(out)
    records = [{k: v for k, v in e.items() if k != "event"} for e in ev if e.get("event") == "record"]
    bw = [e["gbps"] for e in ev if e.get("event") == "copy_bw"]
    problems = [e for e in ev if e.get("event") in ("error", "crash")]
    summary = {"copy_gbps": bw, "records": records, "problems": problems}
    (out / "families.json").write_text(json.dumps(summary, indent=1))
    print_report(records, problems, bw)
    failed = [r for r in records if r.get("correct") is False] or problems
    return 1 if failed else 0


def print_report(records: list[dict], problems: list[dict], bw: list[float]) -> None:
    """The timing table, then what failed, then one summary line (the end of stdout is what comes back)."""
    checks = [r for r in records if r.get("correct") is not None]
    bad = [r for r in checks if not r["correct"]]
    timed: dict[tuple, dict[str, dict]] = {}
    for r in records:
        if r.get("correct") is None:
            timed.setdefault((r["family"], r["case"], r["dtype"]), {})[r["impl"]] = r
    print(f"{'family':<17} {'case':<34} {'dtype':<8} {'ours us':>9} {'SOL':>5} {'eager us':>9} {'x':>6} "
          f"{'comp us':>9} {'x':>6}")
    for (fam, case, dtype), impls in timed.items():
        ours = impls.get("cuda")
        eager = impls.get("eager") or impls.get("torchvision")
        comp = impls.get("compiled")
        print(f"{fam:<17} {case[:34]:<34} {dtype:<8} {_us(ours)} {_sol(ours)} {_us(eager)} {_ratio(eager, ours)} "
              f"{_us(comp)} {_ratio(comp, ours)}")
        for extra, base in (("cuda_inplace", "eager_inplace"), ("cuda_unchecked", "eager"), ("cuda_mma", "eager")):
            if extra in impls:
                e, b = impls[extra], impls.get(base)
                print(f"{'':<17} {'  ' + extra:<34} {dtype:<8} {_us(e)} {_sol(e)} {_us(b)} {_ratio(b, e)}")
    print("x = baseline time / ours (above 1: ours is faster); SOL = bytes / time / measured copy bandwidth")
    errors = [r for r in records if r.get("note", "").startswith("error")]
    for r in (bad + errors)[:15]:
        print(f"  FAIL {r['family']} {r['case']} {r['dtype']} {r['impl']}: {r['note'][:150]}")
    for p in problems[:5]:
        print(f"  PROBLEM {p.get('family')}: {p.get('event')} {str(p.get('message', p.get('code', '')))[-200:]}")
    print(f"copy bandwidth: {', '.join(f'{b:,.0f}' for b in bw)} GB/s; checks: {len(checks) - len(bad)}/{len(checks)} "
          f"pass; {len(errors)} timing errors; {len(problems)} crashed or failed families")


def _us(r: dict | None) -> str:
    return f"{r['us']:9.1f}" if r and r.get("us") else f"{'-':>9}"


def _sol(r: dict | None) -> str:
    return f"{r['sol']:5.2f}" if r and r.get("sol") else f"{'-':>5}"


def _ratio(base: dict | None, ours: dict | None) -> str:
    if base and base.get("us") and ours and ours.get("us"):
        return f"{base['us'] / ours['us']:6.2f}"
    return f"{'-':>6}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lib", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--budget", type=float, default=170.0, help="seconds for all families")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.child:
        return child(a.lib, a.out, a.child.split(","), a.deadline)
    families = [f for f in a.families.split(",") if f]
    unknown = [f for f in families if f not in RUNNERS]
    if unknown:
        print(f"unknown families {unknown}; known: {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    return parent(a.lib, a.out, families, a.budget)


if __name__ == "__main__":
    sys.exit(main())
