"""Embedding gather: rows of a table [V, D] picked by int64 indices."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def embedding(table: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """F.embedding(indices, table): the call a model's nn.Embedding makes."""
    return F.embedding(indices, table)


def embedding_reference(table: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Row by row through a flat view: out[i, j] = table.flatten()[indices[i] * D + j]."""
    dim = table.shape[1]
    flat = table.reshape(-1)
    cols = torch.arange(dim, device=table.device)
    return flat[indices.reshape(-1, 1) * dim + cols].reshape(*indices.shape, dim)
