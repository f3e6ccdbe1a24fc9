"""Histograms of integers: counts [bins] of the values equal to each bin index."""

from __future__ import annotations

import torch

HOT_BIN = 7              # where the skewed generator puts almost everything
HOT_FRACTION = 0.999     # of the values; the rest spread over [0, 256) so the input is not constant
SPREAD = 256             # valid for uint8 and every bins >= 256


def skewed_values(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
                  device: str) -> torch.Tensor:
    """Nearly every value in one bin: the case that serialises naive shared-memory atomics."""
    spread = torch.randint(0, SPREAD, shape, generator=generator, device=device)
    cold = torch.rand(shape, generator=generator, device=device) > HOT_FRACTION
    return torch.where(cold, spread, torch.full_like(spread, HOT_BIN)).to(dtype)


def bincount(x: torch.Tensor, bins: int) -> torch.Tensor:
    """torch.bincount: what users call (it reads the max back to size its output: one sync)."""
    return torch.bincount(x.reshape(-1), minlength=bins)


def scatter_count(x: torch.Tensor, bins: int) -> torch.Tensor:
    """The same counts as a scatter-add into a fixed-size result, a form torch.compile can trace
    (bincount's output size depends on the data)."""
    counts = torch.zeros(bins, dtype=torch.int64, device=x.device)
    return counts.index_add_(0, x.reshape(-1).long(), torch.ones_like(x.reshape(-1), dtype=torch.int64))


def histogram_reference(x: torch.Tensor, bins: int) -> torch.Tensor:
    """Values outside [0, bins) do not count; the rest are counted by sorting (torch.unique), a
    route independent of bincount and of scatter-adds."""
    flat = x.reshape(-1).long()
    flat = flat[(flat >= 0) & (flat < bins)]
    values, counts = torch.unique(flat, return_counts=True)
    out = torch.zeros(bins, dtype=torch.int64, device=x.device)
    out[values] = counts
    return out
