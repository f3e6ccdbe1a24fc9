"""Why do some GEMM kernels run slower under `solbench run` than in a plain script? (issue 13)

    python scripts/tune/gemm_timing_probe.py [--json FILE]

Times each kernel at one shape with solbench's own bench() (events timer, L2 flushed, queue held) under
conditions that differ in one thing at a time from the plain script that found them fast:

    plain      one randn set, made here (the tuning script's inputs)
    spec       one set from make_inputs (the gemm spec's inputs, exactly as solbench run makes them)
    rotated    the worker's three make_inputs sets, one per call, as solbench run rotates them
    rot_randn  three randn sets made here, rotated
    big        plain, after 40 GiB of other tensors were allocated (the worker holds references and
               pristine copies: does a large footprint slow the TMA loads?)

A kernel fast in `plain` and slow in `rotated` is slowed by what rotation changes; the other columns say
which part of it.
"""
from __future__ import annotations

import argparse
import sys

import torch

import kernels_ext
from solbench import spec as specmod
from solbench.inputs import make_inputs
from solbench.job import Case
from solbench.measure import bench
from solbench.worker import INPUT_SETS

from gemm_configs import write_rows   # scripts/tune/, this script's folder

SETS = INPUT_SETS


def kernels(dtype: torch.dtype):
    if dtype == torch.float32:
        return {"cublas": lambda a, w: a @ w.t(), "sgemm": lambda a, w: kernels_ext.sgemm(a, w),
                "sgemm_bk32": lambda a, w: kernels_ext.sgemm(a, w, "bk32")}
    return {"cublas": lambda a, w: a @ w.t(),
            "wgmma_s4_c2": lambda a, w: kernels_ext.gemm_wgmma(a, w, "128x256_s4_c2"),
            "wgmma_s4_c1": lambda a, w: kernels_ext.gemm_wgmma(a, w, "128x256_s4_c1"),
            "wgmma_128_s6_c1": lambda a, w: kernels_ext.gemm_wgmma(a, w, "128x128_s6_c1"),
            "mma": lambda a, w: kernels_ext.gemm_mma(a, w),
            "mma_bk64": lambda a, w: kernels_ext.gemm_mma(a, w, "bk64")}


def rotating(fn, sets):
    state = {"i": 0}

    def call():
        s = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(*s)
    return call


def time_s(fn, budget: float) -> float:
    return bench(fn, budget_s=budget).stats.median


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--budget", type=float, default=0.25)
    ap.add_argument("--shape", default="4096,4096,4096")
    args = ap.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split(","))
    gemm = specmod.load_file(specmod.spec_dirs()[0] / "gemm.yaml")
    rows = []
    print(f"{'dtype':9} {'kernel':16} " + " ".join(f"{c:>10}" for c in ("plain", "spec", "rotated", "rot_randn", "big"))
          + "   (TFLOP/s)")
    for dtype_name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        case = Case("gemm", {"M": m, "N": n, "K": k}, dtype_name)
        spec_sets = [make_inputs(gemm, case, "cuda", 1000 + i) for i in range(SETS)]
        g = torch.Generator(device="cuda").manual_seed(0)
        randn_sets = [(torch.randn(m, k, device="cuda", generator=g).to(dtype),
                       torch.randn(n, k, device="cuda", generator=g).to(dtype)) for _ in range(SETS)]
        for name, fn in kernels(dtype).items():
            t = {"plain": time_s(rotating(fn, randn_sets[:1]), args.budget),
                 "spec": time_s(rotating(fn, spec_sets[:1]), args.budget),
                 "rotated": time_s(rotating(fn, spec_sets), args.budget),
                 "rot_randn": time_s(rotating(fn, randn_sets), args.budget)}
            rows.append({"dtype": dtype_name, "kernel": name, "m": m, "n": n, "k": k, **{f"{c}_s": v for c, v in t.items()}})
        del spec_sets
    hold = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(40)]
    for dtype_name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
        w = torch.randn(n, k, device="cuda", generator=g).to(dtype)
        for name, fn in kernels(dtype).items():
            row = next(r for r in rows if r["dtype"] == dtype_name and r["kernel"] == name)
            row["big_s"] = time_s(rotating(fn, [(a, w)]), args.budget)
    del hold
    flop = 2 * m * n * k
    for r in rows:
        cols = " ".join(f"{flop / r[c + '_s'] / 1e12:10.1f}" for c in ("plain", "spec", "rotated", "rot_randn", "big"))
        print(f"{r['dtype']:9} {r['kernel']:16} {cols}")
    if args.json:
        write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
