"""The tamper guard: it sees what an implementation replaces, puts it back, and covers all of measure/."""

from __future__ import annotations

import subprocess
import sys
import time
import types

import pytest

from solbench import integrity, measure
from solbench.integrity import Guard
from solbench.measure import sampler
from solbench.measure.l2flush import L2Flush
from solbench.measure.timers import events


@pytest.fixture
def guard() -> Guard:
    g = Guard.capture()
    assert g.tampered() == []
    yield g
    g.restore()      # whatever a failing test left patched


def test_guard_sees_a_patched_clock_and_restores_it(guard):
    real = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert "time.perf_counter" in guard.tampered()
        guard.restore()
        assert time.perf_counter is real and guard.tampered() == []
    finally:
        time.perf_counter = real


def test_guard_covers_every_module_of_the_measure_package(guard):
    walked = {m.__name__ for m in integrity.measure_modules()}
    expected = {"solbench.measure", "solbench.measure.config", "solbench.measure.noise", "solbench.measure.sampler",
                "solbench.measure.l2flush", "solbench.measure.crosscheck", "solbench.measure.throughput",
                "solbench.measure.timers", "solbench.measure.timers.base", "solbench.measure.timers.events",
                "solbench.measure.timers.graph", "solbench.measure.timers.cupti", "solbench.measure.timers.wall"}
    assert expected <= walked
    labelled = {label.rsplit(".", 1)[0] for label, *_ in guard.entries}
    assert walked <= labelled      # each module has at least one guarded name


def test_guard_sees_a_replaced_timer_function(guard):
    real = events.event_batch
    try:
        events.event_batch = lambda *a, **k: None
        assert "solbench.measure.timers.events.event_batch" in guard.tampered()
        guard.restore()
        assert events.event_batch is real
    finally:
        events.event_batch = real


def test_guard_sees_a_loosened_constant_and_a_swapped_table_entry(guard):
    from solbench.measure import crosscheck

    real_tol, real_timer = crosscheck.CROSS_CHECK_TOL, measure.TIMERS["events"]
    try:
        crosscheck.CROSS_CHECK_TOL = 1.0                       # no side-stream work would ever be caught
        measure.TIMERS["events"] = lambda ctx: None
        found = guard.tampered()
        assert "solbench.measure.crosscheck.CROSS_CHECK_TOL" in found
        assert any(label.endswith("TIMERS['events']") for label in found)
        guard.restore()
        assert crosscheck.CROSS_CHECK_TOL == real_tol and measure.TIMERS["events"] is real_timer
        assert guard.tampered() == []
    finally:
        crosscheck.CROSS_CHECK_TOL, measure.TIMERS["events"] = real_tol, real_timer


def test_guard_sees_a_patched_method(guard):
    real_add, real_call = sampler.Sampler.add, L2Flush.__call__
    try:
        sampler.Sampler.add = lambda self, batch, throttle: True       # stop after one batch
        L2Flush.__call__ = lambda self: None                            # skip the flush
        found = guard.tampered()
        assert "solbench.measure.sampler.Sampler.add" in found
        assert "solbench.measure.l2flush.L2Flush.__call__" in found
        guard.restore()
        assert sampler.Sampler.add is real_add and L2Flush.__call__ is real_call
    finally:
        sampler.Sampler.add, L2Flush.__call__ = real_add, real_call


def test_guard_covers_extra_modules_and_their_imported_names():
    mod = types.ModuleType("fake_worker")
    exec("from solbench.measure import measure\n"
         "def run(): return measure\n"
         "class State:\n"
         "    @classmethod\n"
         "    def open(cls): return cls()\n", mod.__dict__)
    g = Guard.capture(mod)
    real_measure, real_open = mod.measure, mod.__dict__["State"].__dict__["open"]
    mod.measure = lambda *a, **k: None               # what `from ... import measure` bound
    mod.State.open = classmethod(lambda cls: None)
    assert {"fake_worker.measure", "fake_worker.State.open"} <= set(g.tampered())
    g.restore()
    assert mod.measure is real_measure and mod.State.__dict__["open"] is real_open and g.tampered() == []


def test_guard_sees_removed_and_restores_it(guard):
    import torch

    real = torch.cuda.synchronize
    try:
        del torch.cuda.synchronize
        assert "torch.cuda.synchronize" in guard.tampered()
        guard.restore()
        assert torch.cuda.synchronize is real
    finally:
        torch.cuda.synchronize = real


def test_the_guard_imports_no_worker():
    code = ("import sys\nfrom solbench.integrity import Guard\nGuard.capture()\n"
            "bad = [m for m in sys.modules if m.split('.')[:2] in (['solbench', 'worker'], ['solbench', 'runner'],"
            " ['solbench', 'cli'], ['solbench', 'results'], ['solbench', 'pipeline'])]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_measuring_changes_nothing_the_guard_watches(guard):
    from solbench.measure import TimingConfig, bench

    measure.measure(lambda i: sum(range(100)), "cpu", TimingConfig(budget_s=0.05, warmup_s=0.0))
    bench(lambda: sum(range(100)), device="cpu", budget_s=0.05)
    assert guard.tampered() == []
