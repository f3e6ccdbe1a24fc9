"""Losses: cross entropy of logits [N, V] against integer targets [N]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100        # PyTorch's default ignore_index
MIN_VOCAB = 4096           # the smallest vocabulary of the specs' cases
IGNORED_FRACTION = 8       # one target in this many is ignore_index


def targets_with_ignored(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
                         device: str) -> torch.Tensor:
    """Class indices with one in IGNORED_FRACTION set to IGNORE_INDEX (padding tokens).

    A generator sees only the shape, not the vocabulary: classes are drawn from [0, MIN_VOCAB),
    valid for every case of the specs that use it (whose V >= MIN_VOCAB). Targets over the whole
    vocabulary are the cross_entropy_rows spec's.
    """
    t = torch.randint(0, MIN_VOCAB, shape, generator=generator, device=device)
    ignored = torch.randint(0, IGNORED_FRACTION, shape, generator=generator, device=device) == 0
    return torch.where(ignored, torch.full_like(t, IGNORE_INDEX), t).to(dtype)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = IGNORE_INDEX,
                  reduction: str = "mean") -> torch.Tensor:
    """F.cross_entropy as users call it; the loss comes back in fp32 (for bf16 logits PyTorch
    computes and rounds it in bf16, and .float() only widens that result)."""
    return F.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction).float()


def cross_entropy_reference(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = IGNORE_INDEX,
                            reduction: str = "mean") -> torch.Tensor:
    """logsumexp(row) - row[target], 0 for ignored rows; mean over the rows that count."""
    counted = target != ignore_index
    safe = torch.where(counted, target, torch.zeros_like(target))
    row_max = logits.amax(dim=-1, keepdim=True)
    logz = (logits - row_max).exp().sum(dim=-1).log() + row_max.squeeze(-1)
    picked = logits.gather(-1, safe[:, None]).squeeze(-1)
    losses = torch.where(counted, logz - picked, torch.zeros_like(logz))
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / counted.sum()
