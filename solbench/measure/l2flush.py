"""Evicting the L2 between timed calls, so a kernel is timed reading its inputs from DRAM.

A kernel timed back to back on the same inputs finds them in the L2 (60 MiB on an H200) and looks
faster than it runs in a model. The flush rewrites a buffer at least twice the L2's size before every
timed call, outside the timed window.
"""

from __future__ import annotations

MIN_FLUSH_BYTES = 64 * 2**20    # also when the L2 size is unknown
L2_MULTIPLE = 2                 # a buffer of twice the L2 leaves none of the previous data in it


def flush_bytes(l2_bytes: int | None, enabled: bool = True) -> int:
    """Size of the flush buffer for an L2 of `l2_bytes` (0: flushing off)."""
    return max(L2_MULTIPLE * (l2_bytes or 0), MIN_FLUSH_BYTES) if enabled else 0


class L2Flush:
    """Evicts the L2 by rewriting a buffer at least twice its size; a no-op of size 0 (CPU, flush off).

    bitwise_not on uint8 (read + write of every byte) rather than zero_(): its kernel has a name no
    implementation is likely to launch, so the CUPTI timer can recognise and exclude it by name.
    """

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.buf = _device_buffer(nbytes) if nbytes else None

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.bitwise_not_()


def _device_buffer(nbytes: int) -> object:
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")
