"""Layout ops: transpose."""

from __future__ import annotations

import torch

def transpose(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()
