"""The /proc CPU accounting that serve_check and scripts/dev/serve_cost.py report (solbench/serve/cpuuse.py)."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from solbench.serve.cpuuse import cpu_use, during, per_request, thread_ticks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_busy_thread_shows_up_as_busy_and_an_idle_one_does_not() -> None:
    stop = threading.Event()
    sleeper = threading.Thread(target=stop.wait, name="idle")
    sleeper.start()
    try:
        with cpu_use({"me": os.getpid()}) as use:
            _spin(0.3)
    finally:
        stop.set()
        sleeper.join()
    me = use["me"]
    # CPU seconds, not cores: on a busy machine the 0.3 s of CPU may take longer than 0.3 s (ticks: 10 ms).
    assert me["threads"]["main"] * use["seconds"] >= 0.25, use
    assert me["total"] == pytest.approx(me["user"] + me["system"], abs=0.01)
    idle = [v for t, v in me["threads"].items() if t != "main"]
    assert all(v * use["seconds"] <= 0.03 for v in idle), use
    assert use["seconds"] >= 0.3 and use["cores"] == os.cpu_count()
    assert use["machine_busy_cores"] >= me["total"] * 0.5


# A 2 s block: the process at 0.5 cores (1 CPU second), its main thread 0.4, another 0.1.
USE = {"seconds": 2.0, "cores": 2, "machine_busy_cores": 1.0,
       "srv": {"total": 0.5, "user": 0.3, "system": 0.2, "threads": {"main": 0.4, "x:1": 0.1}}}


def test_per_request_divides_cpu_seconds_by_requests() -> None:
    # 2 s block at 0.5 cores = 1 CPU second over 2,000 requests: 500 us each, whatever the load's length.
    got = per_request(USE, 2000)
    assert got == {"srv": {"total": 500, "user": 300, "system": 200, "threads": {"main": 400, "x:1": 100}}}
    assert per_request(USE, 0) == {}


def test_during_rescales_cores_to_the_load_inside_the_block() -> None:
    # The load filled 1.6 s of the 2 s block: the main thread's 0.4 cores over the block were 0.5 during it.
    got = during(USE, 1.6)
    assert got == {"srv": {"total": 0.625, "user": 0.375, "system": 0.25, "threads": {"main": 0.5, "x:1": 0.125}}}
    assert during(USE, 0.0) == {}


def test_thread_ticks_names_the_main_thread() -> None:
    ticks = thread_ticks(os.getpid())
    assert "main" in ticks and all(len(v) == 2 for v in ticks.values())


def test_a_process_that_ended_is_marked_gone() -> None:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    with cpu_use({"child": child.pid}) as use:
        child.wait()
    assert use["child"] == {"gone": True}
