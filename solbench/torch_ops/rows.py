"""Row ops: normalisation, softmax, reductions over the last dimension."""

from __future__ import annotations

import torch
import torch.nn.functional as F

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


def row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
