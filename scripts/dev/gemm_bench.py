"""GPU driver for the GEMM family: correctness against float64, timing against cuBLAS, the tile sweep.

Runs on the H200 machine through scripts/dev/gemm.sh, which builds libskgemm.so (the launchers of
kernels_ext/csrc/gemm plus the extern "C" shim scripts/dev/gemm_shim.cu) and calls

    python scripts/dev/gemm_bench.py --lib OUT/libskgemm.so --out OUT

Each part (debug, sgemm, mma, wgmma, fp8, residual, decode, dispatch) runs in its own child process
with a time limit, so a hung kernel costs that part only; the parent merges the parts' records into
OUT/gemm.json and prints a short table last. Every check poisons the output with NaN first, uses
fresh random inputs (never zeros) and a float64 reference; timing is triton's do_bench (L2 flushed
between calls, median), kernels and baselines in the same process.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

PARTS = ("debug", "sgemm", "mma", "wgmma", "fp8", "residual", "decode", "dispatch")
PART_TIMEOUT_S = {"debug": 45, "sgemm": 90, "mma": 90, "wgmma": 100, "fp8": 50, "residual": 50,
                  "decode": 60, "dispatch": 30}
# Parts whose kernels the debug part exercises first: when it hangs, they would hang too.
HOPPER_PARTS = ("wgmma", "fp8", "residual", "decode", "dispatch")
BIG_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 8192, 8192))
ODD_SHAPES = ((1, 256, 512), (33, 1000, 264), (1000, 1000, 1000), (129, 257, 4104), (1000, 1000, 4100))
# Normwise relative error bounds: the output rounding dominates (bf16 2^-9, fp16 2^-12 per element).
TOL = {"float32": 2e-5, "bfloat16": 6e-3, "float16": 1.5e-3, "float8_e4m3fn": 6e-3}
SGEMM_CONFIGS = {1: "bk16", 2: "bk32", 3: "bm64"}
MMA_CONFIGS = {1: "bk32", 2: "bk64", 3: "bk64_pipe"}
WGMMA_CONFIGS = {1: "128x256_s4_c2", 2: "128x256_s3_c2", 3: "128x256_s4_c1", 4: "128x256_s3_c1",
                 5: "128x128_s6_c2", 6: "128x128_s6_c1", 7: "direct_store"}
DTYPE_CODE = {"float32": 0, "bfloat16": 1, "float16": 2}


@dataclass
class Record:
    part: str
    variant: str
    dtype: str
    m: int
    n: int
    k: int
    config: str = ""
    correct: bool | None = None
    error: float | None = None       # normwise relative error vs float64
    ms: float | None = None
    tflops: float | None = None
    baseline: str = ""
    baseline_ms: float | None = None
    speedup: float | None = None     # baseline_ms / ms
    note: str = ""


@dataclass
class Ctx:
    lib: ctypes.CDLL
    records: list[Record] = field(default_factory=list)


# ------------------------------------------------------------------------------------ library

def load_lib(path: str) -> ctypes.CDLL:
    import torch  # noqa: F401  (loads libcudart first, so the shim shares it)

    lib = ctypes.CDLL(path)
    P, L, I, S = ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_char_p
    sigs = {
        "sk_sgemm": [P, P, P, L, L, L, I, P, S, I],
        "sk_hgemm_mma": [I, P, P, P, L, L, L, I, P, S, I],
        "sk_hgemm_wgmma": [I, P, P, P, L, L, L, I, I, I, P, S, I],
        "sk_gemm_fp8": [P, P, P, P, P, L, L, L, I, I, I, P, S, I],
        "sk_linear_residual": [I, P, P, P, P, L, L, L, I, P, S, I],
        "sk_linear_residual_mma": [I, P, P, P, P, L, L, L, P, S, I],
        "sk_gemm_decode": [I, P, P, P, L, L, L, I, P, S, I],
        "sk_gemm_decode_mma": [I, P, P, P, L, L, L, P, S, I],
        "sk_gemm": [I, P, P, P, L, L, L, P, S, I, S, I],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    return lib


class KernelError(RuntimeError):
    pass


def call(fn, *args) -> None:
    err = ctypes.create_string_buffer(512)
    rc = fn(*args, err, 512)
    if rc != 0:
        raise KernelError(err.value.decode() or f"error code {rc}")


def stream_ptr() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def ptr(t) -> int:
    return t.data_ptr()


# ------------------------------------------------------------------------------------ helpers

def randn(shape, dtype, seed: int, scale: float = 1.0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * scale
    return x.to(dtype)


def fp8_inputs(m: int, n: int, k: int, seed: int):
    """e4m3 operands whose values use the format's range, with scales far from 1."""
    import torch

    a = (randn((m, k), torch.float32, seed) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (randn((n, k), torch.float32, seed + 1) * 32).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa = torch.tensor(3.7e-3, device="cuda")
    sb = torch.tensor(2.9e-2, device="cuda")
    return a, w, sa, sb


def norm_error(out, ref) -> float:
    import torch

    o = out.double()
    if not torch.isfinite(o).all():
        return math.inf
    return float((o - ref).norm() / ref.norm().clamp_min(1e-300))


def reference(a, w, residual=None, scale: float = 1.0):
    ref = (a.double() @ w.double().t()) * scale
    if residual is not None:
        ref = ref + residual.double()
    return ref


def bench_ms(fn) -> float:
    import torch
    import triton.testing

    fn()
    torch.cuda.synchronize()
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def poison(m: int, n: int, dtype):
    import torch

    return torch.full((m, n), float("nan"), device="cuda", dtype=dtype)


def check(ctx: Ctx, rec: Record, run, ref, out) -> bool:
    """Run `run` (which writes `out`), compare with `ref`, record; False on any failure."""
    import torch

    try:
        run()
        torch.cuda.synchronize()
        rec.error = norm_error(out, ref)
        rec.correct = rec.error <= TOL[rec.dtype]
    except Exception as exc:  # noqa: BLE001 - a failing variant is reported, the rest go on
        rec.correct = False
        rec.note = f"{type(exc).__name__}: {exc}"[:300]
    ctx.records.append(rec)
    status = "ok  " if rec.correct else "FAIL"
    err = f"{rec.error:.2e}" if rec.error is not None else "-"
    print(f"  {status} {rec.variant:<16} {rec.config:<14} {rec.dtype:<9} "
          f"{rec.m}x{rec.n}x{rec.k} err {err} {rec.note}", flush=True)
    return bool(rec.correct)


def timed(ctx: Ctx, rec: Record, run, baseline_name: str = "", baseline=None) -> None:
    try:
        rec.ms = bench_ms(run)
        rec.tflops = tflops(rec.m, rec.n, rec.k, rec.ms)
        if baseline is not None:
            rec.baseline = baseline_name
            rec.baseline_ms = bench_ms(baseline)
            rec.speedup = rec.baseline_ms / rec.ms
    except Exception as exc:  # noqa: BLE001
        rec.note = (rec.note + f" timing: {type(exc).__name__}: {exc}")[:300]
    ctx.records.append(rec)
    extra = f" vs {rec.baseline} {rec.baseline_ms:.3f} ms ({rec.speedup:.2f}x)" if rec.speedup else ""
    print(f"  time {rec.variant:<16} {rec.config:<14} {rec.dtype:<9} {rec.m}x{rec.n}x{rec.k} "
          f"{rec.ms if rec.ms is not None else float('nan'):.3f} ms "
          f"{rec.tflops if rec.tflops is not None else float('nan'):.1f} TFLOP/s{extra}", flush=True)


# ------------------------------------------------------------------------------------ parts

def part_debug(ctx: Ctx) -> None:
    """One tile first, then the pipeline's edges, so a layout bug shows where it is."""
    import torch

    lib = ctx.lib
    cases = [  # (m, n, k, config, max_ctas, what it exercises)
        (128, 256, 64, 3, 0, "one tile, one k-block: descriptors, swizzle, epilogue"),
        (128, 256, 128, 3, 0, "two k-blocks: k-step advance across stages"),
        (128, 256, 64 * 9, 3, 0, "9 k-blocks: ring wrap-around and parities (4 stages)"),
        (256, 256, 256, 1, 0, "a 2-CTA cluster: multicast of W's halves"),
        (128 * 6, 256 * 3, 320, 1, 2, "one cluster walking 9 tiles: persistent loop, staging reuse"),
        (128 * 3, 128 * 5, 200, 6, 1, "one CTA, 15 tiles of 128x128, K tail (zero fill)"),
        (100, 200, 72, 7, 0, "direct-store epilogue, partial tile"),
    ]
    for m, n, k, cfg, max_ctas, what in cases:
        print(f"  debug: {what}", flush=True)
        a, w = randn((m, k), torch.bfloat16, 1), randn((n, k), torch.bfloat16, 2)
        c = poison(m, n, torch.bfloat16)
        rec = Record("debug", "hgemm_wgmma", "bfloat16", m, n, k, WGMMA_CONFIGS[cfg])
        ok = check(ctx, rec, lambda: call(lib.sk_hgemm_wgmma, 1, ptr(a), ptr(w), ptr(c), m, n, k, cfg,
                                          0, max_ctas, stream_ptr()), reference(a, w), c)
        if not ok:
            describe_mismatch(c, reference(a, w))
    # fp8, residual and decode on one tile each
    a8, w8, sa, sb = fp8_inputs(128, 256, 128, 3)
    c = poison(128, 256, torch.bfloat16)
    check(ctx, Record("debug", "fp8_wgmma", "float8_e4m3fn", 128, 256, 128, WGMMA_CONFIGS[3]),
          lambda: call(lib.sk_gemm_fp8, ptr(a8), ptr(w8), ptr(c), ptr(sa), ptr(sb), 128, 256, 128, 3, 0,
                       0, stream_ptr()),
          reference(a8, w8, scale=float(sa) * float(sb)), c)
    a, w, r = randn((128, 64), torch.bfloat16, 4), randn((256, 64), torch.bfloat16, 5), \
        randn((128, 256), torch.bfloat16, 6)
    c = poison(128, 256, torch.bfloat16)
    check(ctx, Record("debug", "linear_residual", "bfloat16", 128, 256, 64, WGMMA_CONFIGS[4]),
          lambda: call(lib.sk_linear_residual, 1, ptr(a), ptr(w), ptr(r), ptr(c), 128, 256, 64, 4,
                       stream_ptr()), reference(a, w, r), c)
    a, w = randn((16, 256), torch.bfloat16, 7), randn((128, 256), torch.bfloat16, 8)
    c = poison(16, 128, torch.bfloat16)
    check(ctx, Record("debug", "gemm_decode", "bfloat16", 16, 128, 256, "split1"),
          lambda: call(lib.sk_gemm_decode, 1, ptr(a), ptr(w), ptr(c), 16, 128, 256, 1, stream_ptr()),
          reference(a, w), c)


def describe_mismatch(out, ref) -> None:
    """Which 8x8 blocks are wrong (rows = M blocks, columns = N blocks): enough to tell a swizzle
    error (scattered inside atoms) from a wrong descriptor stride (whole rows) or epilogue."""
    import torch

    bad = ~torch.isclose(out.double(), ref, rtol=2e-2, atol=2e-2 * float(ref.abs().mean()))
    m, n = bad.shape
    bm, bn = (m + 7) // 8, (n + 7) // 8
    grid = torch.zeros(bm * 8, bn * 8, dtype=torch.bool, device=bad.device)
    grid[:m, :n] = bad
    blocks = grid.view(bm, 8, bn, 8).any(dim=3).any(dim=1).cpu()
    print(f"    {int(bad.sum())} of {m * n} elements wrong; 8x8 block map (X = wrong):", flush=True)
    for i in range(min(bm, 32)):
        print("    " + "".join("X" if blocks[i, j] else "." for j in range(min(bn, 64))), flush=True)
    idx = bad.nonzero()[:4].tolist()
    for r, cc in idx:
        print(f"    C[{r},{cc}] = {float(out[r, cc]):.4g}, reference {float(ref[r, cc]):.4g}", flush=True)


def part_sgemm(ctx: Ctx) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    lib = ctx.lib
    run = lambda a, w, c, m, n, k, cfg: call(lib.sk_sgemm, ptr(a), ptr(w), ptr(c), m, n, k, cfg,  # noqa: E731
                                             stream_ptr())
    for m, n, k in ODD_SHAPES + ((512, 512, 512),):
        a, w = randn((m, k), torch.float32, 11), randn((n, k), torch.float32, 12)
        for cfg, name in SGEMM_CONFIGS.items():
            c = poison(m, n, torch.float32)
            check(ctx, Record("sgemm", "sgemm_fp32", "float32", m, n, k, name),
                  lambda: run(a, w, c, m, n, k, cfg), reference(a, w), c)
    for m, n, k in ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)):
        a, w = randn((m, k), torch.float32, 13), randn((n, k), torch.float32, 14)
        ref = reference(a, w)
        out = torch.empty(m, n, device="cuda")
        for cfg, name in SGEMM_CONFIGS.items():
            c = poison(m, n, torch.float32)
            if check(ctx, Record("sgemm", "sgemm_fp32", "float32", m, n, k, name),
                     lambda: run(a, w, c, m, n, k, cfg), ref, c):
                timed(ctx, Record("sgemm", "sgemm_fp32", "float32", m, n, k, name),
                      lambda: run(a, w, c, m, n, k, cfg), "cublas_fp32", lambda: torch.mm(a, w.t(), out=out))
        del ref


def part_mma(ctx: Ctx) -> None:
    import torch

    lib = ctx.lib
    run = lambda code, a, w, c, m, n, k, cfg: call(  # noqa: E731
        lib.sk_hgemm_mma, code, ptr(a), ptr(w), ptr(c), m, n, k, cfg, stream_ptr())
    for dt, code in (("bfloat16", 1), ("float16", 2)):
        tdt = getattr(torch, dt)
        for m, n, k in ODD_SHAPES + ((1000, 1000, 4099), (256, 512, 512)):
            a, w = randn((m, k), tdt, 21), randn((n, k), tdt, 22)
            for cfg, name in MMA_CONFIGS.items():
                c = poison(m, n, tdt)
                check(ctx, Record("mma", "hgemm_mma", dt, m, n, k, name),
                      lambda: run(code, a, w, c, m, n, k, cfg), reference(a, w), c)
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192)):
        a, w = randn((m, k), torch.bfloat16, 23), randn((n, k), torch.bfloat16, 24)
        ref = reference(a, w)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for cfg, name in MMA_CONFIGS.items():
            c = poison(m, n, torch.bfloat16)
            if check(ctx, Record("mma", "hgemm_mma", "bfloat16", m, n, k, name),
                     lambda: run(1, a, w, c, m, n, k, cfg), ref, c):
                timed(ctx, Record("mma", "hgemm_mma", "bfloat16", m, n, k, name),
                      lambda: run(1, a, w, c, m, n, k, cfg), "cublas", lambda: torch.mm(a, w.t(), out=out))
        del ref


def part_wgmma(ctx: Ctx) -> None:
    import torch

    lib = ctx.lib
    run = lambda code, a, w, c, m, n, k, cfg, group=0: call(  # noqa: E731
        lib.sk_hgemm_wgmma, code, ptr(a), ptr(w), ptr(c), m, n, k, cfg, group, 0, stream_ptr())
    # every configuration on odd shapes (K % 8 == 0 where TMA needs it)
    for dt, code in (("bfloat16", 1), ("float16", 2)):
        tdt = getattr(torch, dt)
        # K = 8, 16: TMA boxes (64 wide) larger than the whole row
        for m, n, k in ((1, 256, 512), (33, 1000, 264), (1000, 1000, 1000), (129, 257 + 7, 4104),
                        (64, 128, 8), (5, 40, 16)):
            a, w = randn((m, k), tdt, 31), randn((n, k), tdt, 32)
            ref = reference(a, w)
            for cfg in (0, *WGMMA_CONFIGS):
                c = poison(m, n, tdt)
                check(ctx, Record("wgmma", "hgemm_wgmma", dt, m, n, k, WGMMA_CONFIGS.get(cfg, "auto")),
                      lambda: run(code, a, w, c, m, n, k, cfg), ref, c)
        # N not a multiple of 8: auto must take the direct-store epilogue
        m, n, k = 77, 1001, 128
        a, w = randn((m, k), tdt, 33), randn((n, k), tdt, 34)
        c = poison(m, n, tdt)
        check(ctx, Record("wgmma", "hgemm_wgmma", dt, m, n, k, "auto"),
              lambda: run(code, a, w, c, m, n, k, 0), reference(a, w), c)
    # the refusal named in the message (K % 8 != 0)
    a, w = randn((64, 4100), torch.bfloat16, 35), randn((64, 4100), torch.bfloat16, 36)
    c = poison(64, 64, torch.bfloat16)
    rec = Record("wgmma", "hgemm_wgmma", "bfloat16", 64, 64, 4100, "auto")
    try:
        run(1, a, w, c, 64, 64, 4100, 0)
        rec.correct, rec.note = False, "accepted K = 4100 (rows not 16-byte aligned)"
    except KernelError as exc:
        rec.correct, rec.note = "16" in str(exc), f"refused: {exc}"[:200]
    ctx.records.append(rec)
    print(f"  {'ok  ' if rec.correct else 'FAIL'} K=4100 refusal: {rec.note}", flush=True)

    # big shapes: auto vs cuBLAS (both dtypes), then the configuration sweep (bf16)
    for m, n, k in ((1024, 1024, 1024),) + BIG_SHAPES:
        for dt, code in (("bfloat16", 1), ("float16", 2)):
            tdt = getattr(torch, dt)
            a, w = randn((m, k), tdt, 37), randn((n, k), tdt, 38)
            c = poison(m, n, tdt)
            check(ctx, Record("wgmma", "hgemm_wgmma", dt, m, n, k, "auto"),
                  lambda: run(code, a, w, c, m, n, k, 0), reference(a, w), c)
            out = torch.empty(m, n, device="cuda", dtype=tdt)
            timed(ctx, Record("wgmma", "hgemm_wgmma", dt, m, n, k, "auto"),
                  lambda: run(code, a, w, c, m, n, k, 0), "cublas", lambda: torch.mm(a, w.t(), out=out))
    for m, n, k in BIG_SHAPES:
        a, w = randn((m, k), torch.bfloat16, 39), randn((n, k), torch.bfloat16, 40)
        ref = reference(a, w)
        for cfg in (1, 2, 3, 4, 5, 6):
            c = poison(m, n, torch.bfloat16)
            if check(ctx, Record("sweep", "hgemm_wgmma", "bfloat16", m, n, k, WGMMA_CONFIGS[cfg]),
                     lambda: run(1, a, w, c, m, n, k, cfg), ref, c):
                timed(ctx, Record("sweep", "hgemm_wgmma", "bfloat16", m, n, k, WGMMA_CONFIGS[cfg]),
                      lambda: run(1, a, w, c, m, n, k, cfg))
        del ref
    m = n = k = 8192
    a, w = randn((m, k), torch.bfloat16, 41), randn((n, k), torch.bfloat16, 42)
    c = poison(m, n, torch.bfloat16)
    for group in (2, 4, 16, 32):
        timed(ctx, Record("sweep", "hgemm_wgmma", "bfloat16", m, n, k, f"{WGMMA_CONFIGS[1]}_g{group}"),
              lambda: run(1, a, w, c, m, n, k, 1, group))


def part_fp8(ctx: Ctx) -> None:
    import torch

    lib = ctx.lib
    run = lambda a, w, c, sa, sb, m, n, k, cfg: call(  # noqa: E731
        lib.sk_gemm_fp8, ptr(a), ptr(w), ptr(c), ptr(sa), ptr(sb), m, n, k, cfg, 0, 0, stream_ptr())
    for m, n, k in ((1, 256, 512), (33, 1000, 272), (1000, 1000, 1008), (129, 264, 4112), (77, 1001, 128)):
        a, w, sa, sb = fp8_inputs(m, n, k, 51)
        ref = reference(a, w, scale=float(sa) * float(sb))
        for cfg in (0, 1, 3, 5, 6, 7) if n % 8 == 0 else (0, 7):   # TMA stores need N % 8 == 0
            c = poison(m, n, torch.bfloat16)
            check(ctx, Record("fp8", "fp8_wgmma", "float8_e4m3fn", m, n, k, WGMMA_CONFIGS.get(cfg, "auto")),
                  lambda: run(a, w, c, sa, sb, m, n, k, cfg), ref, c)
    for m, n, k in BIG_SHAPES:
        a, w, sa, sb = fp8_inputs(m, n, k, 52)
        ref = reference(a, w, scale=float(sa) * float(sb))
        c = poison(m, n, torch.bfloat16)
        check(ctx, Record("fp8", "fp8_wgmma", "float8_e4m3fn", m, n, k, "auto"),
              lambda: run(a, w, c, sa, sb, m, n, k, 0), ref, c)
        base = lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)  # noqa: E731
        ref_err = norm_error(base(), ref)
        rec = Record("fp8", "scaled_mm_error", "float8_e4m3fn", m, n, k, error=ref_err,
                     note="torch._scaled_mm's own error vs float64")
        ctx.records.append(rec)
        print(f"  _scaled_mm error {ref_err:.2e}", flush=True)
        del ref
        timed(ctx, Record("fp8", "fp8_wgmma", "float8_e4m3fn", m, n, k, "auto"),
              lambda: run(a, w, c, sa, sb, m, n, k, 0), "scaled_mm", base)
        if (m, n, k) == (8192, 8192, 8192):
            for cfg in (1, 3, 5, 6):
                timed(ctx, Record("sweep", "fp8_wgmma", "float8_e4m3fn", m, n, k, WGMMA_CONFIGS[cfg]),
                      lambda: run(a, w, c, sa, sb, m, n, k, cfg))


def part_residual(ctx: Ctx) -> None:
    import torch

    lib = ctx.lib
    for dt, code in (("bfloat16", 1), ("float16", 2)):
        tdt = getattr(torch, dt)
        for m, n, k in ((1, 256, 512), (33, 1000, 264), (1000, 1000, 1000), (77, 1001, 128), (100, 300, 4100)):
            a, w, r = randn((m, k), tdt, 61), randn((n, k), tdt, 62), randn((m, n), tdt, 63)
            ref = reference(a, w, r)
            for cfg in (0, 2, 4, 6, 7) if n % 8 == 0 else (0, 7):   # TMA stores need N % 8 == 0
                c = poison(m, n, tdt)
                check(ctx, Record("residual", "linear_residual", dt, m, n, k, WGMMA_CONFIGS.get(cfg, "auto")),
                      lambda: call(lib.sk_linear_residual, code, ptr(a), ptr(w), ptr(r), ptr(c), m, n, k, cfg,
                                   stream_ptr()), ref, c)
            c = poison(m, n, tdt)
            check(ctx, Record("residual", "linear_residual_mma", dt, m, n, k),
                  lambda: call(lib.sk_linear_residual_mma, code, ptr(a), ptr(w), ptr(r), ptr(c), m, n, k,
                               stream_ptr()), ref, c)
    for m, n, k in ((4096, 4096, 4096), (16384, 4096, 4096), (8192, 8192, 8192), (4096, 8192, 8192)):
        a, w, r = randn((m, k), torch.bfloat16, 64), randn((n, k), torch.bfloat16, 65), \
            randn((m, n), torch.bfloat16, 66)
        c = poison(m, n, torch.bfloat16)
        fused = lambda: call(lib.sk_linear_residual, 1, ptr(a), ptr(w), ptr(r), ptr(c), m, n, k, 0,  # noqa: E731
                             stream_ptr())
        check(ctx, Record("residual", "linear_residual", "bfloat16", m, n, k, "auto"), fused,
              reference(a, w, r), c)
        timed(ctx, Record("residual", "linear_residual", "bfloat16", m, n, k, "auto"), fused,
              "addmm", lambda: torch.addmm(r, a, w.t()))
        timed(ctx, Record("residual", "linear_residual", "bfloat16", m, n, k, "auto"), fused,
              "matmul+add", lambda: torch.matmul(a, w.t()) + r)


def part_decode(ctx: Ctx) -> None:
    import torch

    lib = ctx.lib
    for dt, code in (("bfloat16", 1), ("float16", 2)):
        tdt = getattr(torch, dt)
        for m, n, k in ((1, 256, 512), (16, 1000, 264), (33, 1000, 1000), (64, 777, 4104), (16, 4096, 8192)):
            a, w = randn((m, k), tdt, 71), randn((n, k), tdt, 72)
            ref = reference(a, w)
            for split in (0, 1, 2, 4, 8):
                c = poison(m, n, tdt)
                check(ctx, Record("decode", "gemm_decode", dt, m, n, k, f"split{split or 'auto'}"),
                      lambda: call(lib.sk_gemm_decode, code, ptr(a), ptr(w), ptr(c), m, n, k, split,
                                   stream_ptr()), ref, c)
        # the register-streaming kernel (M <= 16; 32- and 64-row CTAs by N)
        for m, n, k in ((1, 256, 512), (16, 1000, 264), (5, 40, 16), (16, 8192, 512), (9, 4100, 4104)):
            a, w = randn((m, k), tdt, 75), randn((n, k), tdt, 76)
            c = poison(m, n, tdt)
            check(ctx, Record("decode", "gemm_decode_mma", dt, m, n, k),
                  lambda: call(lib.sk_gemm_decode_mma, code, ptr(a), ptr(w), ptr(c), m, n, k, stream_ptr()),
                  reference(a, w), c)

    def gbs_note(rec: Record, m: int, n: int, k: int) -> None:
        if rec.ms:
            gbs = (n * k + m * k + m * n) * 2 / (rec.ms * 1e-3) / 1e9
            rec.note = f"{gbs:.0f} GB/s"
            print(f"    {gbs:.0f} GB/s", flush=True)

    for m, n, k in ((16, 8192, 8192), (1, 8192, 8192), (64, 8192, 8192), (16, 4096, 14336)):
        a, w = randn((m, k), torch.bfloat16, 73), randn((n, k), torch.bfloat16, 74)
        c = poison(m, n, torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        check(ctx, Record("decode", "gemm_decode", "bfloat16", m, n, k, "auto"),
              lambda: call(lib.sk_gemm_decode, 1, ptr(a), ptr(w), ptr(c), m, n, k, 0, stream_ptr()),
              reference(a, w), c)
        for split in (0, 2, 4, 8):
            rec = Record("decode", "gemm_decode", "bfloat16", m, n, k, f"split{split or 'auto'}")
            timed(ctx, rec, lambda: call(lib.sk_gemm_decode, 1, ptr(a), ptr(w), ptr(c), m, n, k, split,
                                         stream_ptr()), "cublas", lambda: torch.mm(a, w.t(), out=out))
            gbs_note(rec, m, n, k)
        if m <= 16:
            c = poison(m, n, torch.bfloat16)
            mma = lambda: call(lib.sk_gemm_decode_mma, 1, ptr(a), ptr(w), ptr(c), m, n, k, stream_ptr())  # noqa: E731
            if check(ctx, Record("decode", "gemm_decode_mma", "bfloat16", m, n, k), mma, reference(a, w), c):
                rec = Record("decode", "gemm_decode_mma", "bfloat16", m, n, k)
                timed(ctx, rec, mma, "cublas", lambda: torch.mm(a, w.t(), out=out))
                gbs_note(rec, m, n, k)


def part_dispatch(ctx: Ctx) -> None:
    """The front door (launch_gemm) picks a variant per dtype and shape; check it and its result."""
    import torch

    lib = ctx.lib
    for dt in ("float32", "bfloat16", "float16"):
        tdt = getattr(torch, dt)
        for m, n, k in ((16, 512, 512), (33, 1000, 1000), (300, 1000, 4100), (1000, 1000, 1000)):
            a, w = randn((m, k), tdt, 81), randn((n, k), tdt, 82)
            c = poison(m, n, tdt)
            variant = ctypes.create_string_buffer(64)
            rec = Record("dispatch", "gemm", dt, m, n, k)

            def go():
                err = ctypes.create_string_buffer(512)
                rc = lib.sk_gemm(DTYPE_CODE[dt], ptr(a), ptr(w), ptr(c), m, n, k, stream_ptr(), variant, 64,
                                 err, 512)
                if rc != 0:
                    raise KernelError(err.value.decode())

            check(ctx, rec, go, reference(a, w), c)
            rec.config = variant.value.decode()


PART_FNS = {"debug": part_debug, "sgemm": part_sgemm, "mma": part_mma, "wgmma": part_wgmma,
            "fp8": part_fp8, "residual": part_residual, "decode": part_decode, "dispatch": part_dispatch}


# ------------------------------------------------------------------------------------ driver

def run_part(lib_path: str, part: str, work: Path) -> int:
    import torch

    print(f"[{part}] on {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    ctx = Ctx(load_lib(lib_path))
    try:
        PART_FNS[part](ctx)
    except Exception:  # noqa: BLE001 - keep what was recorded so far
        traceback.print_exc()
        ctx.records.append(Record(part, "part", "-", 0, 0, 0, correct=False,
                                  note=traceback.format_exc(limit=2)[-300:]))
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{part}.json").write_text(json.dumps([asdict(r) for r in ctx.records]))
    return 0


def summary_table(records: list[dict]) -> str:
    lines = [f"{'part':<9}{'variant':<17}{'config':<18}{'dtype':<10}{'shape':<17}{'ok':<5}"
             f"{'err':>9}{'ms':>9}{'TFLOP/s':>9}  vs baseline"]
    for r in records:
        if r["part"] == "debug":
            continue
        if r["ms"] is None and r["part"] not in ("dispatch",) and r["correct"] is not False:
            continue  # correctness-only rows of passing checks: counted below, not listed
        ok = "" if r["correct"] is None else ("yes" if r["correct"] else "NO")
        err = f"{r['error']:.1e}" if r["error"] is not None else ""
        ms = f"{r['ms']:.3f}" if r["ms"] is not None else ""
        tf = f"{r['tflops']:.1f}" if r["tflops"] is not None else ""
        vs = f"{r['baseline']} {r['baseline_ms']:.3f} ms = {r['speedup']:.2f}x" if r["speedup"] else ""
        if r["note"] and not vs:
            vs = r["note"][:60]
        shape = f"{r['m']}x{r['n']}x{r['k']}"
        lines.append(f"{r['part']:<9}{r['variant']:<17}{r['config'][:17]:<18}{r['dtype'][:9]:<10}"
                     f"{shape:<17}{ok:<5}{err:>9}{ms:>9}{tf:>9}  {vs}")
    return "\n".join(lines)


def run_child(args: argparse.Namespace, part: str) -> tuple[str, str, bool]:
    """One part in a child process: (its output, a status line, whether it timed out)."""
    cmd = [sys.executable, __file__, "--lib", args.lib, "--out", str(args.out), "--work",
           str(args.work), "--part", part]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              timeout=PART_TIMEOUT_S[part])
        return proc.stdout + proc.stderr, f"exit {proc.returncode}", False
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        out = out.decode() if isinstance(out, bytes) else out
        return out, f"TIMEOUT after {PART_TIMEOUT_S[part]} s (hang? see the part's last lines)", True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gemm_work"),
                    help="scratch folder for the parts' records (kept out of --out)")
    ap.add_argument("--part", choices=PARTS, help="run one part in this process (the parent's child)")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to run")
    args = ap.parse_args(argv)
    if args.part:
        return run_part(args.lib, args.part, args.work)

    args.out.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    debug_hung = False
    with open(args.out / "gemm_bench.log", "w") as log:
        for part in args.parts.split(","):
            start = time.time()
            if debug_hung and part in HOPPER_PARTS:
                note = "skipped: the debug part hung, this part runs the same kernels"
                records.append(asdict(Record(part, "part", "-", 0, 0, 0, correct=False, note=note)))
                print(f"[{part}] {note}", flush=True)
                continue
            frag = args.work / f"{part}.json"
            frag.unlink(missing_ok=True)   # no stale records from an earlier run
            output, status, timed_out = run_child(args, part)
            log.write(f"===== {part}: {status}\n{output}\n")
            log.flush()
            tail = "\n".join(output.strip().splitlines()[-6:])
            print(f"[{part}] {status} in {time.time() - start:.0f} s\n{tail}", flush=True)
            if frag.exists():
                records.extend(json.loads(frag.read_text()))
                frag.unlink()
            if timed_out or not frag.exists() and not any(r["part"] == part for r in records):
                note = status if timed_out else f"{status} without records: " + (
                    tail.splitlines()[-1] if tail else "")
                records.append(asdict(Record(part, "part", "-", 0, 0, 0, correct=False, note=note[:300])))
            debug_hung = debug_hung or (timed_out and part == "debug")
    (args.out / "gemm.json").write_text(json.dumps({"records": records}, indent=1))
    failed = [r for r in records if r["correct"] is False]
    checked = [r for r in records if r["correct"] is not None]
    print("\n" + summary_table(records))
    print(f"\n{len(checked) - len(failed)}/{len(checked)} checks passed; full log {args.out}/gemm_bench.log")
    for r in failed[:15]:
        print(f"FAILED {r['part']} {r['variant']} {r['config']} {r['dtype']} {r['m']}x{r['n']}x{r['k']} "
              f"err={r['error']} {r['note'][:120]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
