"""A deliberately slowed softmax for the regression-gate check (scripts/h200_final.sh): the same
answer as torch.softmax, computed twice, so `solbench compare` must call exactly it SLOWER."""

import torch


def softmax_twice(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    torch.softmax(x, dim=dim)
    return torch.softmax(x, dim=dim)
