"""CPU time of a server's processes while a load runs, from /proc (Linux): what each process and each of
its threads used, in cores (CPU seconds per second) and in microseconds per request served.

A load test's rate alone cannot say which stage sets it; these figures can (the thread at a core's limit,
or the process whose CPU per request grew). Off Linux the figures are empty, and say so.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Iterator

PROC = Path("/proc")


def thread_ticks(pid: int) -> dict[str, tuple[int, int]]:
    """(user, system) clock ticks of each thread of `pid`; the thread that is the process is 'main', the
    others are 'name:tid'. Threads that end while being read are left out."""
    out: dict[str, tuple[int, int]] = {}
    for task in (PROC / str(pid) / "task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the ")" that ends the command name: state is field 0, utime 11, stime 12.
        out["main" if task.name == str(pid) else f"{name}:{task.name}"] = (int(fields[11]), int(fields[12]))
    return out


def machine_busy_ticks() -> int:
    """All CPUs' busy ticks (user, nice, system, irq, softirq, steal; guest time is inside user)."""
    fields = [int(x) for x in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]) - fields[3] - fields[4]      # less idle and iowait


@contextlib.contextmanager
def cpu_use(pids: dict[str, int], top: int = 5) -> Iterator[dict[str, Any]]:
    """CPU use of each named process and of its `top` busiest threads while the block runs, filled in
    when the block ends: {"machine_busy_cores", "cores", "seconds", name: {"total", "user", "system",
    "threads": {thread: cores}}}, cores averaged over the whole block. `per_request(use, requests)` turns
    it into microseconds per request; `during(use, seconds)` into cores while a load of `seconds` inside
    the block ran (a load generator's start-up inside the block would otherwise dilute them)."""
    use: dict[str, Any] = {}
    if not (PROC / "stat").exists():
        use["unavailable"] = "no /proc on this system"
        yield use
        return
    t0, busy0 = time.monotonic(), machine_busy_ticks()
    before = {name: thread_ticks(pid) for name, pid in pids.items()}
    yield use
    dt, hz = time.monotonic() - t0, os.sysconf("SC_CLK_TCK")
    use.update(machine_busy_cores=round((machine_busy_ticks() - busy0) / hz / dt, 3), cores=os.cpu_count(),
               seconds=round(dt, 3))
    for name, pid in pids.items():
        try:
            after = thread_ticks(pid)
        except OSError:          # the process ended during the block
            use[name] = {"gone": True}
            continue
        spent = {t: (u - before[name].get(t, (0, 0))[0], s - before[name].get(t, (0, 0))[1])
                 for t, (u, s) in after.items()}
        cores = {t: (u + s) / hz / dt for t, (u, s) in spent.items()}
        use[name] = {"total": round(sum(cores.values()), 3),
                     "user": round(sum(u for u, _ in spent.values()) / hz / dt, 3),
                     "system": round(sum(s for _, s in spent.values()) / hz / dt, 3),
                     "threads": {t: round(v, 3) for t, v in sorted(cores.items(), key=lambda kv: -kv[1])[:top]}}


def _scaled(use: dict[str, Any], factor: float, digits: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, v in use.items():
        if isinstance(v, dict) and "total" in v:
            out[name] = {k: round(v[k] * factor, digits) for k in ("total", "user", "system")}
            out[name]["threads"] = {t: round(c * factor, digits) for t, c in v["threads"].items()}
    return out


def per_request(use: dict[str, Any], requests: int) -> dict[str, Any]:
    """`cpu_use`'s figures as CPU microseconds per request, `requests` served in the block (to 1 us).
    CPU seconds over requests: right however much of the block the load filled."""
    if not requests or "seconds" not in use:
        return {}
    return _scaled(use, use["seconds"] / requests * 1e6, None)


def during(use: dict[str, Any], seconds: float) -> dict[str, Any]:
    """`cpu_use`'s figures as cores while a load of `seconds` ran inside the block, taking the processes
    to be idle for the rest of it (a server waiting for its load generator to start)."""
    if not seconds or "seconds" not in use:
        return {}
    return _scaled(use, use["seconds"] / seconds, 3)
