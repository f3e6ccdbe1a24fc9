"""The regression gate's planted slowdown (scripts/h200/gate.sh): a copy that moves ~7% more bytes.

The op `gate_copy` copies the first M rows of an [M + M // 14, N] input. The honest implementation
copies exactly those rows; the planted one copies the whole input (M // 14 extra rows, 7.1% more bytes
read and written, in the same single copy kernel) and returns a view of the rows asked for. Both give
the same answer, so only the time can tell them apart, and `solbench compare` must call exactly the
planted one SLOWER.
"""

from __future__ import annotations

import torch


def copy_head(x: torch.Tensor, rows: int) -> torch.Tensor:
    """The honest copy: the first `rows` rows, nothing more."""
    return x[:rows].clone()


def copy_head_padded(x: torch.Tensor, rows: int) -> torch.Tensor:
    """The planted slowdown: copies every row of `x`, keeps the first `rows`."""
    return x.clone()[:rows]


def head_reference(x: torch.Tensor, rows: int) -> torch.Tensor:
    return x[:rows].clone()
