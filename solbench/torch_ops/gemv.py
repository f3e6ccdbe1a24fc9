"""Matrix-vector products of decode-time linear layers: y [B, M] = x [B, K] @ a [M, K]^T."""

from __future__ import annotations

import torch


def gemv(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The linear layer's product as users write it (cuBLAS)."""
    return x @ a.t()


def gemv_reference(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Each output a dot product, accumulated in the reference dtype (float64), in row chunks so
    the elementwise products never need more than a few hundred MiB."""
    rows = max(1, (1 << 25) // max(1, a.shape[1] * x.shape[0]))
    return torch.cat([(x[:, None, :] * a[i:i + rows][None]).sum(-1)
                      for i in range(0, a.shape[0], rows)], dim=1)
