"""PyTorch baselines and references whose call shape does not fit the spec convention directly.

Specs call implementations as fn(*inputs, **kwargs). Where torch's own signature already fits
(torch.softmax, torch.add, ...) the spec names torch directly; the functions here adapt the rest.
References run on inputs upcast to float64 (or the spec's reference dtype), so they are written
with plain, obviously-correct arithmetic rather than fused library calls.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F


# ---------------------------------------------------------------- GEMM: C[M, N] = A[M, K] @ W[N, K]^T

def gemm(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The layout of a linear layer. fp8 goes through torch._scaled_mm with unit scales, bf16 output."""
    if a.dtype == torch.float8_e4m3fn:
        one = torch.ones((), device=a.device, dtype=torch.float32)
        return torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return a @ w.t()


def gemm_reference(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return a @ w.t()


# ---------------------------------------------------------------- attention: [B, H, S, D]

_SDPA_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                  "cudnn": "CUDNN_ATTENTION"}


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
         backend: str | None = None) -> torch.Tensor:
    """scaled_dot_product_attention, optionally pinned to one backend (an error if it cannot run)."""
    context = contextlib.nullcontext()
    if backend is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        context = sdpa_kernel(getattr(SDPBackend, _SDPA_BACKENDS[backend]))
    with context:
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(is_causal))


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if is_causal:
        s_q, s_k = scores.shape[-2:]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


# ---------------------------------------------------------------- normalisation

def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def layernorm_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


# ---------------------------------------------------------------- elementwise and friends

def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def swiglu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * torch.sigmoid(a) * b


def gelu_reference(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def transpose(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()


def row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


# ---------------------------------------------------------------- rotary embedding: x [T, H, D], cos/sin [T, D/2]

def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half (GPT-NeoX) rotary embedding, as most models write it in eager PyTorch."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


# ---------------------------------------------------------------- cross entropy: logits [N, V], target [N]

def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, target)


def cross_entropy_reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    logz = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, target[:, None]).squeeze(-1)
    return (logz - picked).mean()
