"""What error to expect of sgemm_decode's `tf32x3` before a GPU runs it: a numpy model (no GPU).

    python scripts/dev/tf32x3_error_model.py

x (16 x 8192) and w (64 x 8192) from a fixed seed. Normwise error against float64 of:
  fp32, one k at a time   every product rounded, added to an fp32 sum (the worst fp32 order)
  3xTF32, k8 steps        hi = x rounded to TF32 (10 mantissa bits, ties away), lo = x - hi rounded
                          likewise; each m16n8k8 step's lo.hi + hi.lo + hi.hi summed exactly, then
                          added to an fp32 accumulator (the mma's model; the hardware's internal
                          rounding may differ, which is what the GPU test decides)
  1xTF32, k8 steps        hi.hi only (what allow_tf32 would give), for scale
  3xTF32 mma RZ, ...      the kernel's order (K in 4 contiguous splits, summed in split order, three
                          mma per k8 step) with each mma's sum rounded toward zero, the tensor
                          cores' rounding: "one accumulator" runs every mma into the split's sum
                          (the kernel as first written: measured 7.2e-6 on an H100 against cuBLAS
                          fp32's 5.7e-7, results/h100/issue13/2026-12-06d/call1), "fresh per 16 k"
                          gives each 16-k piece (six mma) its own accumulator, added to the
                          split's sum with round-to-nearest (the kernel now)
"""
from __future__ import annotations

import numpy as np

M, N, K, STEP = 16, 64, 8192, 8


def to_tf32(a: np.ndarray) -> np.ndarray:
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def normwise(c: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(c - ref) / np.linalg.norm(ref))


def stepped(pairs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """fp32 accumulator over k steps of STEP; within a step the products' sum is exact."""
    acc = np.zeros((M, N), np.float32)
    for k0 in range(0, K, STEP):
        step = sum(a[:, k0:k0 + STEP].astype(np.float64) @ b[:, k0:k0 + STEP].T.astype(np.float64)
                   for a, b in pairs)
        acc = (acc + step.astype(np.float32)).astype(np.float32)
    return acc


def to_fp32_toward_zero(a: np.ndarray) -> np.ndarray:
    f = a.astype(np.float32)
    away = np.abs(f.astype(np.float64)) > np.abs(a)
    f[away] = np.nextafter(f[away], np.float32(0))
    return f


def mma_toward_zero(pairs: list[tuple[np.ndarray, np.ndarray]], piece_k: int | None,
                    splits: int = 4) -> np.ndarray:
    """K in `splits` contiguous parts summed in order; in each, one mma per pair per k8 step, its
    8 products' exact sum added to an accumulator and rounded toward zero. piece_k None: that
    accumulator is the split's sum; else a fresh one per piece_k of k, added to the split's sum
    rounded to nearest."""
    out = np.zeros((M, N), np.float32)
    part = K // splits
    for q in range(splits):
        total = np.zeros((M, N), np.float32)
        acc = np.zeros((M, N), np.float32)
        for k0 in range(q * part, (q + 1) * part, STEP):
            for a, b in pairs:
                step = a[:, k0:k0 + STEP].astype(np.float64) @ b[:, k0:k0 + STEP].T.astype(np.float64)
                acc = to_fp32_toward_zero(acc.astype(np.float64) + step)
            if piece_k is not None and (k0 + STEP) % piece_k == 0:
                total = (total + acc).astype(np.float32)
                acc = np.zeros((M, N), np.float32)
        out = (out + (acc if piece_k is None else total)).astype(np.float32)
    return out


def errors(seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    seq = np.zeros((M, N), np.float32)
    for k in range(K):
        seq = (seq + np.outer(x[:, k], w[:, k]).astype(np.float32)).astype(np.float32)
    xh, wh = to_tf32(x), to_tf32(w)
    xl, wl = to_tf32(x - xh), to_tf32(w - wh)
    return {"fp32, one k at a time": normwise(seq, ref),
            "3xTF32, k8 steps": normwise(stepped([(xl, wh), (xh, wl), (xh, wh)]), ref),
            "1xTF32, k8 steps": normwise(stepped([(xh, wh)]), ref),
            "3xTF32 mma RZ, one accumulator": normwise(mma_toward_zero([(xl, wh), (xh, wl), (xh, wh)], None), ref),
            "3xTF32 mma RZ, fresh per 16 k": normwise(mma_toward_zero([(xl, wh), (xh, wl), (xh, wh)], 16), ref)}


def main() -> None:
    for name, e in errors().items():
        print(f"{name:34}{e:.2e}")


if __name__ == "__main__":
    main()
