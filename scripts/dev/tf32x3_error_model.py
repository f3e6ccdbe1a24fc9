"""What error to expect of sgemm_decode's `tf32x3` before a GPU runs it: a numpy model (no GPU).

    python scripts/dev/tf32x3_error_model.py

x (16 x 8192) and w (64 x 8192) from a fixed seed. Normwise error against float64 of:
  fp32, one k at a time   every product rounded, added to an fp32 sum (the worst fp32 order)
  3xTF32, k8 steps        hi = x rounded to TF32 (10 mantissa bits, ties away), lo = x - hi rounded
                          likewise; each m16n8k8 step's lo.hi + hi.lo + hi.hi summed exactly, then
                          added to an fp32 accumulator (the mma's model; the hardware's internal
                          rounding may differ, which is what the GPU test decides)
  1xTF32, k8 steps        hi.hi only (what allow_tf32 would give), for scale
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
            "1xTF32, k8 steps": normwise(stepped([(xh, wh)]), ref)}


def main() -> None:
    for name, e in errors().items():
        print(f"{name:24}{e:.2e}")


if __name__ == "__main__":
    main()
