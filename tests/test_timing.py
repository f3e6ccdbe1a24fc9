"""Timer internals that need no GPU: CUPTI interval arithmetic, stopping rule, throttle handling, guard."""

from __future__ import annotations

import time

import pytest

from solbench import timing
from solbench.telemetry import ClockMonitor, Sample, is_throttled


def test_merged_length_counts_overlapping_streams_once():
    assert timing.merged_length([]) == 0
    assert timing.merged_length([(0, 10), (5, 15), (20, 25)]) == 20
    assert timing.merged_length([(0, 10), (2, 3)]) == 10


def test_split_iterations_excludes_flush_and_merges_streams():
    flush = frozenset({"flush"})
    # Two iterations: flush, kernel + overlapping side-stream kernel; flush, kernel.
    events = [(0, 100, "flush"), (110, 130, "k"), (120, 140, "side"),
              (200, 300, "flush"), (310, 320, "k")]
    samples, note = timing.split_iterations(events, flush, 2)
    assert note is None
    assert samples == pytest.approx([30e-9, 10e-9])


def test_split_iterations_falls_back_to_window_average_when_flushes_are_ambiguous():
    events = [(0, 10, "flush"), (20, 40, "k"), (50, 60, "k")]
    samples, note = timing.split_iterations(events, frozenset({"flush"}), 3)
    assert samples == pytest.approx([10e-9] * 3) and "average" in note


def test_wall_timer_stops_at_the_noise_target_and_says_so():
    cfg = timing.TimingConfig(rse_target=0.5, min_samples=5, budget_s=1.0, warmup_s=0.0)
    m = timing.measure(lambda i: sum(range(200)), "cpu", cfg)
    assert m.timer == "wall" and m.reached_target and m.stats.n >= 5
    assert m.time_json()["reached_target"] is True and m.time_json()["rse_target"] == 0.5


def test_unreachable_target_is_flagged_not_hidden():
    cfg = timing.TimingConfig(rse_target=1e-9, min_samples=3, budget_s=0.02, warmup_s=0.0)
    m = timing.measure(lambda i: time.sleep(0.001 * (1 + i % 3)), "cpu", cfg)
    assert not m.reached_target
    assert any("noise target" in n for n in m.notes)


def test_unknown_timer_is_rejected():
    with pytest.raises(ValueError, match="unknown timer"):
        timing.TimingConfig(timer="stopwatch")


def _sample(sm: float, reasons: int = 0) -> Sample:
    return Sample(0.0, sm, 3201.0, 50.0, 300.0, reasons)


def test_throttle_rules():
    assert is_throttled(_sample(1980), 1980) is None
    assert "75%" in is_throttled(_sample(1200), 1980)
    assert "sw_thermal" in is_throttled(_sample(1980, 0x20), 1980)
    assert "sw_power_cap" in is_throttled(_sample(1980, 0x4), 1980)
    assert is_throttled(_sample(1980, 0x1), 1980) is None    # GPU idle is not throttling


def test_throttled_batches_are_discarded_then_accepted_with_a_warning():
    cfg = timing.TimingConfig(min_samples=3, max_discards=2, throttle_pause_s=0.0, rse_target=0.5)
    s = timing._Sampler(cfg, ClockMonitor.open("cpu"))
    assert not s.add([1.0, 1.0], "throttle reason sw_thermal_slowdown")
    assert not s.add([1.0, 1.0], "throttle reason sw_thermal_slowdown")
    assert s.samples == [] and s.discards == 2
    s.add([1.0, 1.0, 1.0], "throttle reason sw_thermal_slowdown")     # persistent: kept, flagged
    m = s.result("events", 0)
    assert m.throttled and any("throttled" in n for n in m.notes) and m.stats.n == 3


def test_monitor_without_nvml_is_off_and_says_so():
    mon = ClockMonitor.open("cpu")
    assert not mon.enabled and mon.during() is None and mon.sample() is None
    assert mon.summary(False) == {"enabled": False, "reason": "telemetry off: not a CUDA device"}


def test_guard_sees_a_patched_clock_and_restores_it():
    g = timing.Guard.capture()
    assert g.tampered() == []
    real = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert "time.perf_counter" in g.tampered()
        g.restore()
        assert time.perf_counter is real and g.tampered() == []
    finally:
        time.perf_counter = real


def test_guard_covers_the_checker():
    from solbench import check

    g = timing.Guard.capture()
    real = check.compare
    try:
        check.compare = lambda *a, **k: None
        assert "solbench.check.compare" in g.tampered()
    finally:
        check.compare = real
