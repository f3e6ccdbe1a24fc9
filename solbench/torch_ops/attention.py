"""Attention baselines and references, q/k/v [B, H, S, D]."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

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
