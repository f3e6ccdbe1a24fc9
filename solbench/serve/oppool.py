"""Several op services for one device (`solbench serve --workers N`): each its own worker process, CUDA
context and queue; a request goes to the ready one with the fewest requests queued or running.

Why: one worker runs its requests one after another, and its own Python work per request (decoding,
the host-device copies, encoding the reply) was what set the H200's rate (0.90 of a core busy at
1,157 requests/s: results/h200/issue17/run4). Two workers do that work side by side; the GPU runs their
kernels in turn. Each worker may take 1/N of --gpu-memory and holds 1/N of --queue, so N workers ask
for no more than one did.

To the app a pool looks like one service: the device's facts come from the first worker, counts are
summed, and /readyz lists every worker's process id.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from solbench.serve.limits import MemoryBudget
from solbench.serve.opsvc import WINDOW, DeviceFacts, OpReply, OpService
from solbench.serve.opworker import WorkerSetup


def _total(name: str) -> property:
    return property(lambda pool: sum(getattr(m, name) for m in pool.members))


class OpPool(DeviceFacts):
    def __init__(self, setup: WorkerSetup, workers: int = 1, queue_size: int = 64, timeout_s: float = 60.0,
                 gpu_memory: float = 0.9, window: int = WINDOW, frontends: int = 1):
        """`frontends`: how many pools (one per front end, --frontends) share the device and the flags'
        totals; each worker takes 1/(workers x frontends) of --queue and of --gpu-memory."""
        if workers < 1 or frontends < 1:
            raise ValueError(f"a pool needs at least one worker and one front end, got {workers}, {frontends}")
        self.frontends = frontends
        shares = workers * frontends
        share = max(1, math.ceil(queue_size / shares))
        self.members = [OpService(setup, share, timeout_s, gpu_memory / shares, window) for _ in range(workers)]

    # ------------------------------------------------------------ what the app reads

    @property
    def first(self) -> OpService:
        return self.members[0]

    @property
    def setup(self) -> WorkerSetup:
        return self.first.setup

    @property
    def window(self) -> int:
        return self.first.window

    @property
    def hello(self) -> dict[str, Any] | None:
        return next((m.hello for m in self.members if m.hello), None)

    @property
    def ready(self) -> bool:
        """True when a worker can take a request (a replaced one may still be starting)."""
        return any(m.ready for m in self.members)

    @property
    def start_error(self) -> str | None:
        return next((m.start_error for m in self.members if m.start_error), None)

    @property
    def pids(self) -> list[int | None]:
        return [m.hello.get("pid") if m.hello else None for m in self.members]

    # Counts over the workers: summed.
    restarts = _total("restarts")
    served = _total("served")
    depth = _total("depth")
    queue_size = _total("queue_size")
    last_memory = _total("last_memory")

    def budget(self) -> MemoryBudget | None:
        b = self.first.budget()
        n, f = len(self.members), self.frontends
        if b is None or n * f == 1:
            return b
        among = f"{n} workers (--workers)" if f == 1 else f"{n} workers (--workers) on each of {f} front ends " \
                                                          f"(--frontends)"
        return MemoryBudget(b.limit, f"{b.source}, shared by {among}: each takes 1/{n * f}")

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        for m in self.members:
            m.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        for m in self.members:
            m.stop(timeout_s)

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until every worker has said hello (True) or one failed to start (False)."""
        return all(m.wait_ready(timeout_s) for m in self.members)

    # ------------------------------------------------------------ requests

    async def call(self, meta: dict[str, Any], body: bytes = b"") -> OpReply:
        return await self._pick().call(meta, body)

    async def stats(self, trim: bool = False) -> dict[str, Any]:
        """One worker: its figures. Several: the sums of their memory figures, and each one's."""
        live = [m for m in self.members if m.ready]
        if len(self.members) == 1 or not live:
            return await self.first.stats(trim)
        each = await asyncio.gather(*[m.stats(trim) for m in live])
        total: dict[str, Any] = {k: sum(int(s.get(k) or 0) for s in each)
                                 for k in ("memory_allocated", "memory_reserved", "rss_bytes") if k in each[0]}
        return {**total, "workers": list(each)}

    def _pick(self) -> OpService:
        live = [m for m in self.members if m.ready]
        # None ready: the first queues the request while its worker starts, or says why it cannot (503).
        return min(live, key=lambda m: m.depth) if live else self.first
