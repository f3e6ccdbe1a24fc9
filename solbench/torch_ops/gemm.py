"""GEMM baselines and references: C[M, N] = A[M, K] @ W[N, K]^T (the layout of a linear layer)."""

from __future__ import annotations

import torch

def gemm(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The layout of a linear layer. fp8 goes through torch._scaled_mm with unit scales, bf16 output."""
    if a.dtype == torch.float8_e4m3fn:
        one = torch.ones((), device=a.device, dtype=torch.float32)
        return torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return a @ w.t()


def gemm_reference(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return a @ w.t()
