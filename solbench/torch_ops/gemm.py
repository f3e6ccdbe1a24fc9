"""GEMM baselines and references: C[M, N] = A[M, K] @ W[N, K]^T (the layout of a linear layer),
and the linear layer with its residual connection, out = x @ W^T + residual."""

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


def linear_then_add(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """Unfused: the product is written to memory, then read back by the add."""
    return torch.matmul(x, w.t()) + residual


def linear_addmm(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """cuBLAS's own fused epilogue: out = residual + x @ w^T in one call."""
    return torch.addmm(residual, x, w.t())


def linear_residual_reference(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return x @ w.t() + residual
