"""Layout ops: transposes into new contiguous tensors."""

from __future__ import annotations

import torch


def transpose(x: torch.Tensor) -> torch.Tensor:
    """2-D: x.t().contiguous(), as users write it."""
    return x.t().contiguous()


def transpose_last2(x: torch.Tensor) -> torch.Tensor:
    """The last two dims swapped (batched matrices), into a new contiguous tensor."""
    return x.transpose(-2, -1).contiguous()


def transpose_reference(x: torch.Tensor) -> torch.Tensor:
    """Element by element: y[..., j, i] = x[..., i, j], written through index arithmetic, not a view."""
    *batch, rows, cols = x.shape
    flat = x.reshape(-1, rows * cols)
    j = torch.arange(cols, device=x.device)[:, None]
    i = torch.arange(rows, device=x.device)[None, :]
    return flat[:, (i * cols + j).reshape(-1)].reshape(*batch, cols, rows)
