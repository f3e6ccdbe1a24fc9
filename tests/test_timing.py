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


# ---------------------------------------------------------------- noise model

def test_between_batch_noise_needs_enough_batches_and_sees_drift():
    steady = [[1.0, 1.01, 0.99, 1.0, 1.0]] * timing.MIN_BATCHES
    assert timing.batch_rse(steady[:-1]) is None
    assert timing.batch_rse(steady) == pytest.approx(0.0)
    # Batches individually tight but drifting 1% each: the pooled median SE cannot see the drift.
    drift = [[1.0 + 0.01 * k] * 20 for k in range(timing.MIN_BATCHES)]
    nz = timing.noise_of(drift)
    assert nz.batches > 0.004 and nz.within == nz.batches and nz.batches > nz.sampling


def test_one_sample_batches_are_pooled_into_groups():
    singles = [[1.0 + 0.001 * (k % 3)] for k in range(timing._GROUP_MIN * timing.MIN_BATCHES)]
    assert timing.batch_rse(singles) is not None
    assert timing.batch_rse(singles[:-1]) is None


def test_reported_rse_adds_clock_overhead_and_floor_in_quadrature():
    nz = timing.Noise(sampling=0.003, batches=0.004, clock=0.002, overhead=0.001, floor=0.01)
    assert nz.within == 0.004
    assert nz.total == pytest.approx((0.004 ** 2 + 0.002 ** 2 + 0.001 ** 2 + 0.01 ** 2) ** 0.5)
    assert nz.to_json()["rse"] == nz.total


def test_record_rse_is_the_total_and_the_target_uses_the_within_run_part():
    cfg = timing.TimingConfig(rse_target=0.05, min_samples=3, rse_floor=0.02, throttle_pause_s=0.0)
    s = timing._Sampler(cfg, ClockMonitor.open("cpu"), floor=cfg.floor_for("cuda"))
    for k in range(timing.MIN_BATCHES - 1):
        assert not s.add([1.0, 1.001, 0.999, 1.0, 1.0], None)
    assert s.add([1.0, 1.001, 0.999, 1.0, 1.0], None)     # fifth batch: target met on the within-run part
    m = s.result("events", 0)
    t = m.time_json()
    assert m.reached_target and t["rse_within"] < 0.05
    assert t["rse"] == m.stats.rse == pytest.approx((t["rse_within"] ** 2 + 0.02 ** 2) ** 0.5)
    assert m.noise.floor == 0.02


def test_drifting_batches_do_not_reach_the_target():
    cfg = timing.TimingConfig(rse_target=0.005, min_samples=3, budget_s=60.0, max_samples=100)
    s = timing._Sampler(cfg, ClockMonitor.open("cpu"))
    stop = False
    for k in range(5):
        stop = s.add([1.0 + 0.03 * k] * 20, None)
    assert stop      # max_samples, not the target
    m = s.result("events", 0)
    assert not m.reached_target and any("within-run rse" in n for n in m.notes)


def test_run_to_run_floor_defaults_by_device_and_is_validated():
    cfg = timing.TimingConfig()
    assert cfg.floor_for("cuda") == timing.RUN_TO_RUN_FLOOR["cuda"] > 0
    assert cfg.floor_for("cpu") == 0.0
    assert timing.TimingConfig(rse_floor=0.0).floor_for("cuda") == 0.0
    with pytest.raises(ValueError, match="rse_floor"):
        timing.TimingConfig(rse_floor=1.5)


def test_clock_spread_is_a_noise_component():
    mon = ClockMonitor.open("cpu")
    assert mon.sm_rel_sd() == 0.0
    mon.sm_max_mhz = 1980.0
    mon.during_samples = [_sample(1980), _sample(1940), _sample(1960)]
    assert mon.sm_rel_sd() == pytest.approx(20 / 1960, rel=1e-6)
    mon.during_samples.append(_sample(1000))   # a throttled sample is discarded, not counted
    assert mon.sm_rel_sd() == pytest.approx(20 / 1960, rel=1e-6)


# ---------------------------------------------------------------- events overhead (tare)

def _probe(name, ev_us, dev_us, se_us=0.01):
    return {"probe": name, "events_median_s": ev_us * 1e-6, "cupti_median_s": dev_us * 1e-6,
            "events_se_s": se_us * 1e-6, "cupti_se_s": se_us * 1e-6}


def test_overhead_is_the_mean_gap_between_events_and_cupti():
    tare = timing.overhead_from([_probe("tiny", 4.2, 1.1), _probe("spin", 23.3, 20.1)], 2**27)
    assert tare.overhead_s == pytest.approx(3.15e-6)
    assert tare.floor_s == pytest.approx(1.1e-6) and tare.note is None
    assert 0.05e-6 <= tare.se_s <= 0.2e-6       # half the 0.1 us disagreement, plus the statistical part
    assert tare.to_json()["probes"][0]["probe"] == "tiny"


def test_disagreeing_or_negative_overheads_are_reported():
    tare = timing.overhead_from([_probe("tiny", 4.0, 1.0), _probe("spin", 26.0, 20.0)], 0)
    assert "differs between probe kernels" in tare.note and tare.se_s >= 1.5e-6
    neg = timing.overhead_from([_probe("tiny", 1.0, 1.5), _probe("spin", 20.0, 20.6)], 0)
    assert neg.overhead_s == 0.0 and "negative" in neg.note


def test_overhead_subtraction_never_goes_below_the_floor_nor_raises_a_sample():
    tare = timing.EventOverhead(overhead_s=3e-6, se_s=0.1e-6, floor_s=1e-6, flush_bytes=0)
    got = timing.apply_overhead([5.5e-6, 52e-6, 3.5e-6, 0.8e-6], tare)
    assert got == pytest.approx([2.5e-6, 49e-6, 1e-6, 0.8e-6])
    assert timing.apply_overhead([5e-6], None) == [5e-6]


def test_events_record_says_what_was_subtracted():
    tare = timing.EventOverhead(3e-6, 0.1e-6, 1e-6, 0, (_probe("tiny", 4.1, 1.1),))
    m = timing.Measurement([2e-6] * 12, timing.summarize([2e-6] * 12), "events", True, 0.005)
    timing._record_tare(m, tare, tare, at_floor=10, total=12)
    assert m.time_json()["overhead_s"] == 3e-6 and m.correction["overhead_s"] == 3e-6
    assert any("hit the floor" in n for n in m.notes)
    off = timing.Measurement([5e-6], timing.summarize([5e-6]), "events", False, 0.005)
    cupti_missing = timing.EventOverhead(0.0, 0.0, 0.0, 0, (), "events overhead not calibrated (CUPTI unavailable)")
    timing._record_tare(off, cupti_missing, None, 0, 0)
    assert off.overhead_s == 0.0 and any("not calibrated" in n for n in off.notes)
