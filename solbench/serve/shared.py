"""What the front ends of one server share (`solbench serve --frontends N`): one small file in /dev/shm
that the supervisor creates and every front end maps, holding each front end's published state and the
rate limiter's counters (sharedrate.py); and beside it, in the same private folder, the folder where every
front end writes its Prometheus values for /metrics to merge (metrics.py). `remove` takes both away.

Why a mapped file and not multiprocessing's shared memory: every process opens the file itself, so each
has its own open file description and `flock` excludes one process from another; the kernel drops the
lock of a process that dies, even inside its critical section (a multiprocessing Lock held by a killed
process stays held, and every front end would hang on it). A threading lock excludes the threads of one
process, which share their description. Nothing here is a secret: key names, counts and process ids.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import secrets
import shutil
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

MAGIC = b"SBSHARE1"
_HEADER = struct.Struct("<8sqq16s")          # magic, front ends, rate slots, salt of the identity hash
_FRONTEND = struct.Struct("<qqqq")           # pid, ready, op requests served, last publish (monotonic ns)
RATE_SLOT = struct.Struct("<qqqqq")          # identity hash, window index, its count, the last window's, expiry ns
PUBLISH_S = 0.1          # how often a front end writes its slot
STALE_S = 1.0


@dataclass(frozen=True)
class Layout:
    frontends: int
    rate_slots: int

    @property
    def frontends_at(self) -> int:
        return _HEADER.size

    @property
    def rate_at(self) -> int:
        return self.frontends_at + self.frontends * _FRONTEND.size

    @property
    def size(self) -> int:
        return self.rate_at + self.rate_slots * RATE_SLOT.size


@dataclass(frozen=True)
class FrontendState:
    index: int
    pid: int
    ready: bool
    served: int
    age_s: float | None   # since it last published (None: never; one that stopped publishing is gone or stuck)

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "pid": self.pid, "ready": self.ready, "served": self.served,
                "age_s": None if self.age_s is None else round(self.age_s, 3)}


def create(frontends: int, rate_slots: int) -> Path:
    """A fresh shared file (zeroed, with a random salt) in a private folder; remove it with `remove`."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None     # memory, never written back to a disk
    folder = Path(tempfile.mkdtemp(prefix="solbench-serve-", dir=base))   # mode 0700: this user only
    layout = Layout(frontends, rate_slots)
    path = folder / "shared"
    with path.open("wb") as f:
        f.truncate(layout.size)
        f.write(_HEADER.pack(MAGIC, frontends, rate_slots, secrets.token_bytes(16)))
    metrics_dir(path).mkdir()
    return path


def metrics_dir(path: Path) -> Path:
    """The folder beside the shared file `path` where the front ends' Prometheus values go (metrics.py)."""
    return Path(path).parent / "metrics"


def remove(path: Path) -> None:
    shutil.rmtree(path.parent, ignore_errors=True)


class SharedArea:
    """One process's view of the shared file. Writes to a front end's own slot need no lock (one writer);
    anything read-modify-write goes through `locked()`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._file = self.path.open("r+b")
        self.map = mmap.mmap(self._file.fileno(), 0)
        magic, frontends, rate_slots, self.salt = _HEADER.unpack_from(self.map, 0)
        if magic != MAGIC:
            raise ValueError(f"{path} is not a solbench serve shared file")
        self.layout = Layout(frontends, rate_slots)
        self._thread_lock = threading.Lock()

    @contextlib.contextmanager
    def locked(self) -> Iterator[mmap.mmap]:
        with self._thread_lock:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
            try:
                yield self.map
            finally:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)

    def publish(self, index: int, ready: bool, served: int) -> None:
        _FRONTEND.pack_into(self.map, self.layout.frontends_at + index * _FRONTEND.size, os.getpid(), int(ready),
                            served, time.monotonic_ns())

    def frontends(self) -> list[FrontendState]:
        now, out = time.monotonic_ns(), []
        for i in range(self.layout.frontends):
            pid, ready, served, at = _FRONTEND.unpack_from(self.map, self.layout.frontends_at + i * _FRONTEND.size)
            age = (now - at) / 1e9 if at else None
            # A slot not written for STALE_S is a front end that died (or hangs): not ready, whatever it said.
            out.append(FrontendState(i, pid, bool(ready) and age is not None and age < STALE_S, served, age))
        return out

    def served(self) -> int:
        """Op requests answered by all front ends, as each last published it (PUBLISH_S ago at most)."""
        return sum(f.served for f in self.frontends())

    def close(self) -> None:
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()
        self._file.close()


def publish_until(area: SharedArea, index: int, stop: threading.Event, ready: Callable[[], bool],
                  served: Callable[[], int], tick: Callable[[], None] = lambda: None) -> None:
    """A front end's publisher thread: its slot every PUBLISH_S until `stop`, then once more as not ready;
    `tick` (its metrics' gauges) is written as often."""
    while not stop.wait(PUBLISH_S):
        area.publish(index, ready(), served())
        tick()
    area.publish(index, False, served())
    tick()
