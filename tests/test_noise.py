"""The noise model, the stopping rule and the sampler: pure logic, no device."""

from __future__ import annotations

import pytest

from solbench.measure import TimingConfig
from solbench.measure.noise import GROUP_MIN, MIN_BATCHES, Noise, NoiseTarget, StoppingRule, batch_rse, noise_of
from solbench.noise_model import DEFAULT_MODELS, RunToRunModel
from solbench.measure.sampler import Sampler
from solbench.telemetry import ClockMonitor


def _cpu_monitor() -> ClockMonitor:
    return ClockMonitor.open("cpu")


def test_between_batch_noise_needs_enough_batches_and_sees_drift():
    steady = [[1.0, 1.01, 0.99, 1.0, 1.0]] * MIN_BATCHES
    assert batch_rse(steady[:-1]) is None
    assert batch_rse(steady) == pytest.approx(0.0)
    # Batches individually tight but drifting 1% each: the pooled median SE cannot see the drift.
    drift = [[1.0 + 0.01 * k] * 20 for k in range(MIN_BATCHES)]
    nz = noise_of(drift)
    assert nz.batches > 0.004 and nz.within == nz.batches and nz.batches > nz.sampling


def test_one_sample_batches_are_pooled_into_groups():
    singles = [[1.0 + 0.001 * (k % 3)] for k in range(GROUP_MIN * MIN_BATCHES)]
    assert batch_rse(singles) is not None
    assert batch_rse(singles[:-1]) is None


def test_reported_rse_adds_clock_overhead_and_the_run_to_run_model_in_quadrature():
    nz = Noise(sampling=0.003, batches=0.004, clock=0.002, overhead=0.001, modelled=0.01)
    assert nz.within == 0.004
    assert nz.run_to_run == pytest.approx((0.002 ** 2 + 0.001 ** 2 + 0.01 ** 2) ** 0.5)
    assert nz.total == pytest.approx((0.004 ** 2 + 0.002 ** 2 + 0.001 ** 2 + 0.01 ** 2) ** 0.5)
    assert nz.to_json()["rse"] == nz.total and nz.to_json()["run_to_run"] == nz.run_to_run


def test_the_modelled_part_is_the_model_at_the_median():
    model = RunToRunModel(rel=0.003, abs_s=0.1e-6, source="measured:test")
    nz = noise_of([[2e-6] * 10] * MIN_BATCHES, model=model)
    assert nz.modelled == pytest.approx(((0.003 ** 2) + (0.1 / 2) ** 2) ** 0.5)
    assert nz.source == "measured:test"


def test_the_tare_error_is_relative_to_the_median():
    nz = noise_of([[2e-6] * 10] * MIN_BATCHES, overhead_s=0.1e-6)
    assert nz.overhead == pytest.approx(0.05)


def test_noise_target_rule_needs_batches_samples_and_low_within_noise():
    rule = NoiseTarget(rse_target=0.01, min_samples=10)
    tight = [[1.0, 1.001, 0.999, 1.0, 1.0]] * MIN_BATCHES     # 25 samples, 5 batches
    assert rule.done(tight)
    assert not rule.done(tight[:-1]) and "only 4 batches" in rule.shortfall(tight[:-1])
    assert not NoiseTarget(0.01, min_samples=50).done(tight)   # too few samples
    noisy = [[1.0, 1.5, 0.6, 1.2, 0.8]] * MIN_BATCHES
    assert not rule.done(noisy) and "within-run rse" in rule.shortfall(noisy)


def test_the_sampler_follows_any_stopping_rule():
    class AfterThree:
        def done(self, batches):
            return len(batches) >= 3

        def shortfall(self, batches):
            return f"{len(batches)} of 3 batches"

    rule: StoppingRule = AfterThree()
    s = Sampler(TimingConfig(budget_s=60.0), _cpu_monitor(), rule=rule)
    assert not s.add([1.0], None) and not s.add([1.0], None)
    assert s.add([1.0], None)
    m = s.result("wall", 0)
    assert m.reached_target and m.stats.n == 3


def test_throttled_batches_are_discarded_then_accepted_with_a_warning():
    cfg = TimingConfig(min_samples=3, max_discards=2, throttle_pause_s=0.0, rse_target=0.5)
    s = Sampler(cfg, _cpu_monitor())
    assert not s.add([1.0, 1.0], "throttle reason sw_thermal_slowdown")
    assert not s.add([1.0, 1.0], "throttle reason sw_thermal_slowdown")
    assert s.samples == [] and s.discards == 2
    s.add([1.0, 1.0, 1.0], "throttle reason sw_thermal_slowdown")     # persistent: kept, flagged
    m = s.result("events", 0)
    assert m.throttled and any("throttled" in n for n in m.notes) and m.stats.n == 3


def test_record_rse_is_the_total_and_the_target_uses_the_within_run_part():
    cfg = TimingConfig(rse_target=0.05, min_samples=3, run_to_run=RunToRunModel(0.02, 0.0, "given"),
                       throttle_pause_s=0.0)
    s = Sampler(cfg, _cpu_monitor(), device_kind="cuda")
    for _ in range(MIN_BATCHES - 1):
        assert not s.add([1.0, 1.001, 0.999, 1.0, 1.0], None)
    assert s.add([1.0, 1.001, 0.999, 1.0, 1.0], None)     # fifth batch: target met on the within-run part
    m = s.result("events", 0)
    t = m.time_json()
    assert m.reached_target and t["rse_within"] < 0.05
    assert t["rse"] == m.stats.rse == pytest.approx((t["rse_within"] ** 2 + 0.02 ** 2) ** 0.5)
    assert m.noise.modelled == 0.02 and t["run_to_run"] == pytest.approx(0.02)
    assert t["run_to_run_source"] == "given"


def test_drifting_batches_do_not_reach_the_target():
    cfg = TimingConfig(rse_target=0.005, min_samples=3, budget_s=60.0, max_samples=100)
    s = Sampler(cfg, _cpu_monitor())
    stop = False
    for k in range(5):
        stop = s.add([1.0 + 0.03 * k] * 20, None)
    assert stop      # max_samples, not the target
    m = s.result("events", 0)
    assert not m.reached_target and any("within-run rse" in n for n in m.notes)


def test_run_to_run_model_defaults_by_device_and_is_validated():
    cfg = TimingConfig()
    assert cfg.model_for("cuda") == DEFAULT_MODELS["cuda"] and cfg.model_for("cpu") == DEFAULT_MODELS["cpu"]
    given = RunToRunModel(0.0, 0.0, "given")
    assert TimingConfig(run_to_run=given).model_for("cuda") is given
    with pytest.raises(ValueError, match="rel"):
        RunToRunModel(1.5, 0.0, "given")
    assert Sampler(cfg, _cpu_monitor(), device_kind="cuda").run_to_run_model == DEFAULT_MODELS["cuda"]
    assert Sampler(cfg, _cpu_monitor(), device_kind="cpu").run_to_run_model == DEFAULT_MODELS["cpu"]
