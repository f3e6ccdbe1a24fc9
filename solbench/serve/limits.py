"""How much a client may ask for: requests per key per time window (the `limits` package) and the size
of a request body, both checked before any work is queued.
"""

from __future__ import annotations

import math
import re
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Protocol

from solbench.errors import UserError

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: str, flag: str) -> int:
    """'64MiB', '1GB', '1048576' -> bytes."""
    m = _SIZE.match(value)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise UserError(f"'{value}' is not a size (e.g. 64MiB, 1GB, 1048576)", field=flag)
    size = int(float(m.group(1)) * _UNITS[unit])
    if size <= 0:
        raise UserError(f"must be positive, got '{value}'", field=flag)
    return size


def format_size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def check_rate(rate: str, field_: str, file: str | Path | None = None) -> Any:
    """A rate like '50/second' as a `limits` item; a UserError naming the field otherwise."""
    from limits import parse

    try:
        item = parse(rate)
    except ValueError:
        raise UserError(f"'{rate}' is not a rate (e.g. 50/second, 1000/minute, 10 per second)", field=field_,
                        file=file) from None
    if item.amount < 1:
        raise UserError(f"'{rate}' allows no request at all", field=field_, file=file)
    return item


class Limiter(Protocol):
    """What the routes ask of a rate limiter: this one (one front end) or sharedrate's (several)."""

    rate: str

    def hit(self, identity: str, rate: str | None = None) -> float | None: ...


class RateLimiter:
    """A sliding-window counter per client identity (O(1) memory per client, no burst at window edges),
    in this process's memory: the limiter of a server with one front end."""

    def __init__(self, rate: str):
        from limits import storage, strategies

        self.rate = rate
        self.item = check_rate(rate, "--rate")
        self._items = {rate: self.item}
        self._limiter = strategies.SlidingWindowCounterRateLimiter(_swept_memory_storage(storage.MemoryStorage)())

    def hit(self, identity: str, rate: str | None = None) -> float | None:
        """Count one request against `rate` (default: the server's); None when allowed, else the seconds
        to wait before the next one will be."""
        rate = rate or self.rate
        item = self._items.get(rate)
        if item is None:     # a key's own rate, checked when the key file was read
            item = self._items[rate] = check_rate(rate, "rate")
        if self._limiter.hit(item, identity):
            return None
        stats = self._limiter.get_window_stats(item, identity)
        return max(1.0, math.ceil(stats.reset_time - time.time()))


SWEEP_S = 1.0     # how often idle rate-limit counters are dropped (they are expired on read regardless)


def _swept_memory_storage(base: type) -> type:
    """limits' in-memory storage, its expired counters dropped by one daemon thread every SWEEP_S.

    The stock storage starts a new threading.Timer (10 ms) whenever the last one has finished, i.e. a
    thread every 10 ms under load: profiled under 16 clients, starting them took 8% of the event loop's
    time and their wake-ups competed with it for the GIL. Correctness does not depend on the sweep (every
    read expires its own key first); it only keeps idle clients' counters from piling up. If a limits
    version has no such hook, its own storage is used as it is.
    """
    if not hasattr(base, "_MemoryStorage__schedule_expiry") or not hasattr(base, "_MemoryStorage__expire_events"):
        return base

    class SweptMemoryStorage(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.timer.cancel()
            ref = weakref.ref(self)
            threading.Thread(target=_sweep, args=(ref,), daemon=True, name="solbench-rate-sweep").start()

        def _MemoryStorage__schedule_expiry(self) -> None:   # the stock per-10-ms timer: not needed
            pass

    return SweptMemoryStorage


def _sweep(ref: Any) -> None:
    while True:
        time.sleep(SWEEP_S)
        storage = ref()
        if storage is None:      # the limiter is gone: so is its sweeper
            return
        storage._MemoryStorage__expire_events()
        del storage


class BodyTooLarge(Exception):
    def __init__(self, limit: int, seen: int | None):
        self.limit, self.seen = limit, seen
        said = f"{format_size(seen)}" if seen is not None else "more"
        super().__init__(f"request body is {said}, over this server's limit of {format_size(limit)} (--max-body)")


async def read_body(chunks: AsyncIterator[bytes], content_length: str | None, limit: int) -> bytes:
    """The whole body, refusing it as soon as it is known to be over `limit`: from Content-Length before
    reading anything, else (chunked uploads) as the bytes arrive, never buffering more than the limit."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = None
        if declared is not None and declared > limit:
            raise BodyTooLarge(limit, declared)
    parts: list[bytes] = []
    seen = 0
    async for chunk in chunks:
        seen += len(chunk)
        if seen > limit:
            raise BodyTooLarge(limit, None)
        parts.append(chunk)
    return b"".join(parts)


@dataclass(frozen=True)
class MemoryBudget:
    """How many bytes one request may need on the device, and what sets that figure."""

    limit: int
    source: str           # e.g. "90% of cuda:0's 139.8 GiB, less 1.2 GiB in use at start (--gpu-memory 0.9)"

    def refuse(self, need: int) -> str | None:
        if need <= self.limit:
            return None
        return (f"needs {format_size(need)} of device memory, more than the {format_size(self.limit)} one request "
                f"may use: {self.source}")
