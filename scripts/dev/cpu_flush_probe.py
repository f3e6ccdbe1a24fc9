"""The CPU analogue of scripts/tune/flush_probe.py: does rewriting the cache-flush buffer (what
solbench/measure/cpu.py's CacheFlush does) slow the next call by the write-back of its dirty lines?
A read-only sum and a copy of 256 MiB, each timed after a rewrite flush and after a read-only flush of
136 MiB (four times this VM's 34 MiB of L2 + L3), alternating, median of 35 calls, the better of two rounds.

    python scripts/dev/cpu_flush_probe.py
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

MiB = 2**20


def main() -> int:
    torch.set_num_threads(2)
    buf = torch.zeros(136 * MiB, dtype=torch.uint8)
    rows = buf.view(torch.float64).view(-1, 1024)
    sums = torch.empty(rows.shape[0], dtype=torch.float64)
    flushes: dict[str, Callable[[], object]] = {"write": buf.bitwise_not_,
                                                 "read": lambda: torch.sum(rows, dim=1, out=sums)}
    x = torch.rand(64 * MiB)
    y = torch.empty_like(x)
    ops: dict[str, Callable[[], object]] = {"sum 256 MiB (reads only)": x.sum, "copy 256 MiB": lambda: y.copy_(x)}
    for name, op in ops.items():
        best = {mode: float("inf") for mode in flushes}
        for order in (("write", "read"), ("read", "write")):
            for mode in order:
                times = []
                for _ in range(40):
                    flushes[mode]()
                    t0 = time.perf_counter()
                    op()
                    times.append(time.perf_counter() - t0)
                best[mode] = min(best[mode], statistics.median(times[5:]))
        print(f"{name:26} after a rewrite {best['write'] * 1e3:6.2f} ms, after a read {best['read'] * 1e3:6.2f} ms: "
              f"{best['write'] / best['read']:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
