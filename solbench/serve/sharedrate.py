"""The rate limit of a server with several front ends (`--frontends N`): one budget per identity for the
whole server, kept in the shared file (shared.py) that every front end maps.

The same rule as the one-process limiter (limits' sliding-window counter): a window of the rate's length
keeps its own count and the last window's; a request is allowed while last * (the part of the last window
still inside a sliding window ending now) + this <= the rate's amount. Rates are written and checked
exactly as for one front end (limits.check_rate), and a refusal says how long to wait.

The counters are an open-addressed table of fixed size: an identity (its name and rate, hashed with the
file's random salt, so no client can aim at another's slot) owns the first free slot along a short probe
run; a slot whose windows have both ended is free again. The table holds far more identities than a key
file does. Should its probe run be full of live identities (only a client on loopback, without keys,
using thousands of addresses at once), a new identity is refused for a second rather than given an
uncounted budget: the limit fails closed.
"""

from __future__ import annotations

import hashlib
import math
import time

from solbench.serve.limits import check_rate
from solbench.serve.shared import RATE_SLOT, SharedArea

SLOTS = 16384           # identities counted at once (about 650 KiB of shared memory)
PROBES = 32             # slots looked at for one identity


class SharedRateLimiter:
    def __init__(self, rate: str, area: SharedArea):
        self.rate = rate
        self.item = check_rate(rate, "--rate")
        self.area = area
        self._rates: dict[str, tuple[int, float]] = {rate: (self.item.amount, float(self.item.get_expiry()))}

    def hit(self, identity: str, rate: str | None = None) -> float | None:
        """Count one request against `rate` (default: the server's); None when allowed, else the seconds
        to wait before the next one will be (at least 1)."""
        rate = rate or self.rate
        amount, window = self._window(rate)
        h = self._hash(identity, rate)
        with self.area.locked() as buf:
            now = time.monotonic()
            slot = self._find(buf, h, time.monotonic_ns())
            if slot is None:
                return 1.0
            _, k_seen, current, last, _ = RATE_SLOT.unpack_from(buf, slot)
            k = int(now // window)
            if k_seen != k:      # a new window: the one just ended becomes the last (or both are over)
                current, last = 0, (current if k_seen == k - 1 else 0)
            into = (now - k * window) / window
            allowed = last * (1.0 - into) + current + 1 <= amount
            current += allowed
            RATE_SLOT.pack_into(buf, slot, h, k, current, last, int((k + 2) * window * 1e9))
        if allowed:
            return None
        return float(max(1, math.ceil(_wait(now, k, window, amount, current, last))))

    def _window(self, rate: str) -> tuple[int, float]:
        found = self._rates.get(rate)
        if found is None:        # a key's own rate, checked when the key file was read
            item = check_rate(rate, "rate")
            found = self._rates[rate] = (item.amount, float(item.get_expiry()))
        return found

    def _hash(self, identity: str, rate: str) -> int:
        digest = hashlib.blake2b(f"{identity}\0{rate}".encode(), key=self.area.salt, digest_size=8).digest()
        return int.from_bytes(digest, "little", signed=True) or 1       # 0 marks a slot never used

    def _find(self, buf: object, h: int, now_ns: int) -> int | None:
        """The offset of `h`'s slot (claimed if new), or None when its probe run holds only live others.
        An identity's slot always lies before the first never-used slot of its run: new ones take the
        first free slot, and a used slot never becomes never-used again."""
        base, size = self.area.layout.rate_at, self.area.layout.rate_slots
        free = None
        start = h % size
        for i in range(min(PROBES, size)):
            at = base + ((start + i) % size) * RATE_SLOT.size
            seen, _, _, _, expires = RATE_SLOT.unpack_from(buf, at)      # type: ignore[arg-type]
            if seen == h:
                return at
            if free is None and (seen == 0 or expires <= now_ns):
                free = at
            if seen == 0:
                break
        if free is not None:
            RATE_SLOT.pack_into(buf, free, h, -2, 0, 0, 0)            # type: ignore[arg-type]
        return free


def _wait(now: float, k: int, window: float, amount: int, current: int, last: int) -> float:
    """Seconds from `now` until one more request fits. This window's count never falls, so when it alone
    fills the budget the wait runs into the next window, where it becomes the decaying last count."""
    if current >= amount:
        into_next = window * (1.0 - (amount - 1) / current)
        return (k + 1) * window + into_next - now
    into = window * (1.0 - (amount - 1 - current) / last)
    return k * window + into - now
