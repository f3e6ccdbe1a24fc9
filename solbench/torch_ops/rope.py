"""Rotary position embedding: x [T, H, D], cos/sin [T, D/2]."""

from __future__ import annotations

import torch

def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half (GPT-NeoX) rotary embedding, as most models write it in eager PyTorch."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
