"""Elementwise baselines and references."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def swiglu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * torch.sigmoid(a) * b


def gelu_reference(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
