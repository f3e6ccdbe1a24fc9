"""Evicting the L2 between timed calls, so a kernel is timed reading its inputs from DRAM.

A kernel timed back to back on the same inputs finds them in the L2 (60 MiB on an H200) and looks
faster than it runs in a model. The flush touches a buffer at least twice the L2's size before every
timed call, outside the timed window. Three ways (FLUSH_MODES):

- write (the default until 2026-12-01, what the results committed before then used): the buffer is
  rewritten. The L2 is then full of dirty lines, which the timed call's misses write back inside its
  window: on the H200 that cost calls that only read 6-9 us, 1.06-1.27x their time (SDPA decoding at
  16k keys 29.7 us against 23.9 under `read`; results/h200/issue16/flushprobe/).
- read: the buffer is only read (one row sum per 8 KiB). Lines the previous call left dirty are
  written back during the flush, and the L2 the timed call meets holds clean lines only. Fair to a
  call that writes little; a call whose outputs are an L2 or more is undercharged by up to an L2 (its
  last outputs are written back after its window): a 64 MiB copy, 30.4 us against 33.8 under `write`.
- balanced (the default): read, then rewrite as many bytes of the buffer as the call's outputs (at most
  an L2: `dirty_bytes`, from the spec). The call then writes back inside its window as many dirty lines
  as it leaves behind after it, so it pays for its own writes, all of them, and for no one else's: the
  decodes time as under `read`, the copies as under `write`.

`scripts/tune/flush_probe.py` measures how far the three differ on a GPU.
"""

from __future__ import annotations

MIN_FLUSH_BYTES = 64 * 2**20    # also when the L2 size is unknown
L2_MULTIPLE = 2                 # a buffer of twice the L2 leaves none of the previous data in it
FLUSH_MODES = ("write", "read", "balanced")
DEFAULT_FLUSH_MODE = "balanced"   # since 2026-12-01; `write` before (the docstring says why)
READ_ROW_BYTES = 8192           # the read flush sums rows of this many bytes: one kernel, no global reduce


def flush_bytes(l2_bytes: int | None, enabled: bool = True) -> int:
    """Size of the flush buffer for an L2 of `l2_bytes` (0: flushing off)."""
    return max(L2_MULTIPLE * (l2_bytes or 0), MIN_FLUSH_BYTES) if enabled else 0


def check_mode(mode: str) -> str:
    if mode not in FLUSH_MODES:
        raise ValueError(f"unknown L2 flush mode {mode!r} (use {', '.join(FLUSH_MODES)})")
    return mode


class L2Flush:
    """Evicts the L2 by touching a buffer at least twice its size; a no-op of size 0 (CPU, flush off).

    write: bitwise_not on uint8 (read + write of every byte) rather than zero_(): its kernel has a name
    no implementation is likely to launch, so the CUPTI timer can recognise and exclude it by name.
    read: a float64 sum of each 8 KiB row into a small output, likewise one kernel of its own name (a
    whole-buffer sum would add a memset for its global reduction, a second activity per flush).
    balanced: the read, then bitwise_not on the first `dirty_bytes` (capped at half the buffer, the
    L2): two kernels per flush where dirty_bytes > 0 (`kernels_per_flush`, for CUPTI's split).
    """

    def __init__(self, nbytes: int, mode: str = "write", dirty_bytes: int = 0):
        self.nbytes = nbytes
        self.mode = check_mode(mode)
        self.buf = _device_buffer(nbytes) if nbytes else None
        self.dirty_bytes = min(max(0, int(dirty_bytes)), nbytes // L2_MULTIPLE) if mode == "balanced" else 0
        self._rows = self._sums = None
        if self.buf is not None and mode in ("read", "balanced"):
            rows = nbytes // READ_ROW_BYTES
            self._rows = self.buf[: rows * READ_ROW_BYTES].view(_float64()).view(rows, READ_ROW_BYTES // 8)
            self._sums = self._rows.new_empty(rows)

    @property
    def kernels_per_flush(self) -> int:
        return 2 if self.buf is not None and self.dirty_bytes > 0 else 1

    def __call__(self) -> None:
        if self.buf is None:
            return
        if self.mode == "write":
            self.buf.bitwise_not_()
            return
        import torch

        torch.sum(self._rows, dim=1, out=self._sums)
        if self.dirty_bytes:
            self.buf[: self.dirty_bytes].bitwise_not_()


def _device_buffer(nbytes: int) -> object:
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")


def _float64() -> object:
    import torch

    return torch.float64
