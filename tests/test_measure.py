"""The measure package without a GPU: CUPTI interval arithmetic, the tare, the cross-check, the timer
table, the wall timer, the bench() facade and the profiler's start-up notice."""

from __future__ import annotations

import subprocess
import sys
import time
import types
import warnings

import pytest
import torch

from solbench.measure import (TIMERS, EventOverhead, Measurement, TimerCache, TimingConfig, bench, describe,
                              measure)
from solbench.measure.crosscheck import CROSS_CHECK_TOL, cross_check, judge
from solbench.measure.l2flush import MIN_FLUSH_BYTES, L2Flush, flush_bytes
from solbench.measure.timers import cupti, timer_named
from solbench.measure.timers.cupti import merged_length, profiler_window, split_iterations
from solbench.measure.timers.events import apply_overhead, overhead_from, record_tare
from solbench.stats import summarize

# ---------------------------------------------------------------- CUPTI arithmetic


def test_merged_length_counts_overlapping_streams_once():
    assert merged_length([]) == 0
    assert merged_length([(0, 10), (5, 15), (20, 25)]) == 20
    assert merged_length([(0, 10), (2, 3)]) == 10


def test_split_iterations_excludes_flush_and_merges_streams():
    flush = frozenset({"flush"})
    # Two iterations: flush, kernel + overlapping side-stream kernel; flush, kernel.
    events = [(0, 100, "flush"), (110, 130, "k"), (120, 140, "side"),
              (200, 300, "flush"), (310, 320, "k")]
    samples, note = split_iterations(events, flush, 2)
    assert note is None
    assert samples == pytest.approx([30e-9, 10e-9])


def test_split_iterations_falls_back_to_window_average_when_flushes_are_ambiguous():
    events = [(0, 10, "flush"), (20, 40, "k"), (50, 60, "k")]
    samples, note = split_iterations(events, frozenset({"flush"}), 3)
    assert samples == pytest.approx([10e-9] * 3) and "average" in note


# ---------------------------------------------------------------- the timer table, the wall timer


def test_the_timer_table_names_the_cuda_timers_and_wall():
    assert list(TIMERS) == ["events", "graph", "cupti", "wall"]
    assert all(callable(fn) for fn in TIMERS.values())
    assert timer_named("cupti") is TIMERS["cupti"]
    with pytest.raises(ValueError, match="unknown timer 'stopwatch' \\(have: events, graph, cupti, wall\\)"):
        timer_named("stopwatch")


def test_unknown_timer_is_rejected_on_every_device():
    with pytest.raises(ValueError, match="unknown timer"):
        measure(lambda i: None, "cpu", TimingConfig(timer="stopwatch"))


def test_wall_timer_stops_at_the_noise_target_and_says_so():
    cfg = TimingConfig(rse_target=0.5, min_samples=5, budget_s=1.0, warmup_s=0.0)
    m = measure(lambda i: sum(range(200)), "cpu", cfg)
    assert m.timer == "wall" and m.reached_target and m.stats.n >= 5
    assert m.time_json()["reached_target"] is True and m.time_json()["rse_target"] == 0.5


def test_a_cpu_is_timed_with_wall_whatever_the_config_says():
    m = measure(lambda i: None, "cpu", TimingConfig(timer="cupti", budget_s=0.05, warmup_s=0.0))
    assert m.timer == "wall" and m.flush_bytes >= 64 * 2**20      # and its caches are evicted (issue 11 #1)


def test_unreachable_target_is_flagged_not_hidden():
    cfg = TimingConfig(rse_target=1e-9, min_samples=3, budget_s=0.02, warmup_s=0.0)
    m = measure(lambda i: time.sleep(0.001 * (1 + i % 3)), "cpu", cfg)
    assert not m.reached_target
    assert any("noise target" in n for n in m.notes)


def test_the_wall_timer_measures_what_the_call_takes():
    m = measure(lambda i: time.sleep(0.002), "cpu", TimingConfig(budget_s=0.3, warmup_s=0.0))
    assert 0.002 <= m.stats.median < 0.02 and min(m.samples_s) >= 0.002
    assert describe(m).startswith("wall: median ")


def test_flush_size_rule():
    assert flush_bytes(60 * 2**20) == 120 * 2**20         # twice the L2
    assert flush_bytes(None) == flush_bytes(4 * 2**20) == MIN_FLUSH_BYTES
    assert flush_bytes(60 * 2**20, enabled=False) == 0
    off = L2Flush(0)
    off()                                                 # a no-op, no device needed
    assert off.buf is None and off.nbytes == 0


def test_timer_cache_measures_each_calibration_once():
    cache, made = TimerCache(), []
    first = cache.get("event_overhead", 64, lambda: made.append(1) or "tare")
    again = cache.get("event_overhead", 64, lambda: made.append(1) or "other")
    assert first == again == "tare" and made == [1]
    assert cache.get("event_overhead", 128, lambda: "bigger flush") == "bigger flush"


# ---------------------------------------------------------------- events overhead (tare)


def _probe(name, ev_us, dev_us, se_us=0.01):
    return {"probe": name, "events_median_s": ev_us * 1e-6, "cupti_median_s": dev_us * 1e-6,
            "events_se_s": se_us * 1e-6, "cupti_se_s": se_us * 1e-6}


def test_overhead_is_the_mean_gap_between_events_and_cupti():
    tare = overhead_from([_probe("tiny", 4.2, 1.1), _probe("spin", 23.3, 20.1)], 2**27)
    assert tare.overhead_s == pytest.approx(3.15e-6)
    assert tare.floor_s == pytest.approx(1.1e-6) and tare.note is None
    assert 0.05e-6 <= tare.se_s <= 0.2e-6       # half the 0.1 us disagreement, plus the statistical part
    assert tare.to_json()["probes"][0]["probe"] == "tiny"


def test_disagreeing_or_negative_overheads_are_reported():
    tare = overhead_from([_probe("tiny", 4.0, 1.0), _probe("spin", 26.0, 20.0)], 0)
    assert "differs between probe kernels" in tare.note and tare.se_s >= 1.5e-6
    neg = overhead_from([_probe("tiny", 1.0, 1.5), _probe("spin", 20.0, 20.6)], 0)
    assert neg.overhead_s == 0.0 and "negative" in neg.note


def test_overhead_subtraction_never_goes_below_the_floor_nor_raises_a_sample():
    tare = EventOverhead(overhead_s=3e-6, se_s=0.1e-6, floor_s=1e-6, flush_bytes=0)
    got = apply_overhead([5.5e-6, 52e-6, 3.5e-6, 0.8e-6], tare)
    assert got == pytest.approx([2.5e-6, 49e-6, 1e-6, 0.8e-6])
    assert apply_overhead([5e-6], None) == [5e-6]


def test_events_record_says_what_was_subtracted():
    tare = EventOverhead(3e-6, 0.1e-6, 1e-6, 0, (_probe("tiny", 4.1, 1.1),))
    m = Measurement([2e-6] * 12, summarize([2e-6] * 12), "events", True, 0.005)
    record_tare(m, tare, tare, at_floor=10, total=12)
    assert m.time_json()["overhead_s"] == 3e-6 and m.correction["overhead_s"] == 3e-6
    assert any("hit the floor" in n for n in m.notes)
    off = Measurement([5e-6], summarize([5e-6]), "events", False, 0.005)
    cupti_missing = EventOverhead(0.0, 0.0, 0.0, 0, (), "events overhead not calibrated (CUPTI unavailable)")
    record_tare(off, cupti_missing, None, 0, 0)
    assert off.overhead_s == 0.0 and any("not calibrated" in n for n in off.notes)


# ---------------------------------------------------------------- cross-check, with a stand-in profiler

NOTICE = ("Warning: Profiler clears events at the end of each cycle.Only events from the current cycle will be "
          "reported.To keep events across cycles, set acc_events=True.")


class _Event:
    def __init__(self, start: int, end: int, name: str) -> None:
        self._s, self._e, self._n = start, end, name

    def device_type(self):
        return torch.autograd.DeviceType.CUDA

    def start_ns(self):
        return self._s

    def end_ns(self):
        return self._e

    def name(self):
        return self._n

    def activity_type(self):
        return "kernel"


class FakeProfile:
    """torch.profiler.profile as torch 2.11 behaves on start (the notice), with kernels the call 'ran'."""

    running: FakeProfile | None = None

    def __init__(self, activities=None) -> None:
        self.events: list[_Event] = []
        self.profiler = types.SimpleNamespace(kineto_results=types.SimpleNamespace(events=lambda: self.events))

    def __enter__(self) -> FakeProfile:
        warnings.warn(NOTICE, UserWarning, stacklevel=2)
        FakeProfile.running = self
        return self

    def __exit__(self, *exc) -> None:
        FakeProfile.running = None


@pytest.fixture
def fake_profiler(monkeypatch):
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    return FakeProfile


def _kernel_call(duration_ns: int):
    """A call(i) that 'runs' one kernel of `duration_ns` in the current profiler window."""
    def call(i: int) -> None:
        prof = FakeProfile.running
        if prof is not None:
            start = 1_000_000 * len(prof.events)   # far apart: no overlap
            prof.events.append(_Event(start, start + duration_ns, "k"))
    return call


def _timed(median_s: float) -> Measurement:
    return Measurement([median_s] * 10, summarize([median_s] * 10), "events", True, 0.005)


def test_the_profiler_notice_never_reaches_the_user(fake_profiler):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):              # every window, not only the first
            with profiler_window():
                warnings.warn("the timed call's own warning", UserWarning, stacklevel=1)
    messages = [str(w.message) for w in seen]
    assert not any("Profiler clears events" in m for m in messages), messages
    assert messages.count("the timed call's own warning") == 3     # only that one notice is silenced


def test_the_notice_filter_is_installed_once(fake_profiler):
    with warnings.catch_warnings():
        with profiler_window():
            pass
        filters = list(warnings.filters)
        with profiler_window():
            pass
        assert warnings.filters == filters    # no second change (each change re-shows once-warnings)


def test_cross_check_passes_honest_timers_without_leaking_the_notice(fake_profiler):
    m = _timed(2.1e-6)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cross_check(m, _kernel_call(2000), L2Flush(0))
    assert m.cross_check["ok"] is True and m.cross_check["cupti_median_s"] == pytest.approx(2e-6)
    assert m.invalid is None
    assert not [w for w in seen if "Profiler clears events" in str(w.message)]


def test_cross_check_flags_work_that_escaped_the_timed_window(fake_profiler):
    m = _timed(1e-6)                    # the timer saw 1 us, the GPU ran 10 us per call
    cross_check(m, _kernel_call(10_000), L2Flush(0))
    assert m.cross_check["ok"] is False and "work outside the timed window" in m.invalid


def test_cross_check_tolerance_and_slow_timer_note():
    ok = _timed(10e-6 * (1 - CROSS_CHECK_TOL) + 0.1e-6)
    judge(ok, 10e-6)
    assert ok.invalid is None and ok.cross_check["ratio"] == pytest.approx(0.76)
    slow = _timed(30e-6)
    judge(slow, 10e-6)
    assert slow.invalid is None and any("3.0x the kernels' device time" in n for n in slow.notes)


def test_cross_check_without_cupti_says_so(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(cupti, "profile", broken, raising=False)
    monkeypatch.setattr(torch.profiler, "profile", broken)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    m = _timed(1e-6)
    cross_check(m, _kernel_call(1000), L2Flush(0))
    assert m.cross_check is None and any("cross-check unavailable" in n for n in m.notes)


# ---------------------------------------------------------------- bench(), the notebook facade


def test_bench_times_a_cpu_function_with_the_wall_clock():
    x = torch.randn(64, 64)
    m = bench(lambda: x @ x, budget_s=0.2)
    assert isinstance(m, Measurement) and m.timer == "wall" and m.stats.n >= 3
    assert 0 < m.stats.median < 0.1 and m.rse_target == 0.005


def test_bench_reports_the_time_the_function_takes():
    m = bench(lambda: time.sleep(0.003), device="cpu", rse=0.05, budget_s=0.5)
    assert 0.003 <= m.stats.median < 0.03


def test_bench_without_tensors_or_cuda_runs_on_the_cpu():
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="pass device='cuda' or device='cpu'"):
            bench(lambda: None, budget_s=0.05)
    else:
        assert bench(lambda: None, budget_s=0.05).timer == "wall"


@pytest.mark.parametrize("kwargs,match", [
    ({"timer": "stopwatch"}, "unknown timer 'stopwatch'"),
    ({"rse": 0.0}, "rse must be a fraction"),
    ({"rse": 5}, "rse must be a fraction"),
    ({"budget_s": -1.0}, "budget_s must be positive"),
    ({"device": "tpu:0"}, "device must be 'cpu', 'cuda' or 'cuda:N', got 'tpu:0'"),
    ({"device": "banana"}, "device must be"),
])
def test_bench_rejects_bad_arguments_by_name(kwargs, match):
    ran = []
    with pytest.raises(ValueError, match=match):
        bench(lambda: ran.append(1), **kwargs)
    assert ran == []             # nothing ran before the arguments were checked


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_bench_on_a_missing_gpu_says_so():
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        bench(lambda: None, device="cuda")


# ---------------------------------------------------------------- layering


def test_the_measure_package_imports_no_higher_module():
    code = ("import sys, solbench.measure, solbench.integrity, solbench.nvml, solbench.measure.throughput\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('solbench'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    allowed = {"solbench", "solbench.stats", "solbench.telemetry", "solbench.nvml", "solbench.integrity",
               "solbench.noise_model", "solbench.errors"}   # the run-to-run model a measurement is stamped with
    assert {m for m in out if not m.startswith("solbench.measure")} <= allowed, out


def test_flush_modes_are_checked_and_default_to_balanced():
    from solbench.measure import TimingConfig, bench
    from solbench.measure.l2flush import FLUSH_MODES, check_mode

    assert TimingConfig().flush_mode == "balanced" and FLUSH_MODES == ("write", "read", "balanced")
    assert check_mode("read") == "read"
    with pytest.raises(ValueError, match="unknown L2 flush mode 'clean' \\(use write, read, balanced\\)"):
        L2Flush(0, "clean")
    with pytest.raises(ValueError, match="unknown L2 flush mode"):
        bench(lambda: None, flush_mode="clean", device="cpu")
    assert L2Flush(0, "read").buf is None          # size 0: a no-op in either mode
    L2Flush(0, "read")()


def test_the_read_flush_sums_whole_rows_of_the_buffer(monkeypatch):
    import torch

    from solbench.measure import l2flush

    monkeypatch.setattr(l2flush, "_device_buffer", lambda n: torch.zeros(n, dtype=torch.uint8))
    f = l2flush.L2Flush(3 * l2flush.READ_ROW_BYTES + 100, "read")
    assert tuple(f._rows.shape) == (3, l2flush.READ_ROW_BYTES // 8) and f._rows.dtype == torch.float64
    f.buf[: 3 * l2flush.READ_ROW_BYTES].view(torch.float64)[l2flush.READ_ROW_BYTES // 8] = 2.5   # row 1
    f()
    assert f._sums.tolist() == [0.0, 2.5, 0.0]
    w = l2flush.L2Flush(64, "write")
    w()
    assert int(w.buf[0]) == 255                     # bitwise_not of zeros


def test_the_balanced_flush_reads_then_rewrites_the_outputs_size_at_most_half_the_buffer(monkeypatch):
    import torch

    from solbench.measure import l2flush

    monkeypatch.setattr(l2flush, "_device_buffer", lambda n: torch.zeros(n, dtype=torch.uint8))
    n = 4 * l2flush.READ_ROW_BYTES
    f = l2flush.L2Flush(n, "balanced", dirty_bytes=100)
    assert f.dirty_bytes == 100 and f.kernels_per_flush == 2
    f()
    assert int(f.buf[:100].min()) == 255 and int(f.buf[100:].max()) == 0 and f._sums.shape == (4,)
    assert l2flush.L2Flush(n, "balanced", dirty_bytes=10 * n).dirty_bytes == n // 2     # at most the L2
    assert l2flush.L2Flush(n, "balanced").kernels_per_flush == 1                      # writes nothing: the read only
    assert l2flush.L2Flush(n, "read", dirty_bytes=100).dirty_bytes == 0               # only balanced rewrites


def test_split_iterations_takes_a_flush_of_several_kernels_as_one():
    names = frozenset({"sum", "not"})
    events = [(0, 50, "sum"), (50, 60, "not"), (70, 90, "k"), (100, 150, "sum"), (150, 160, "not"), (170, 180, "k")]
    samples, note = split_iterations(events, names, 2, per_flush=2)
    assert note is None and [round(s * 1e9) for s in samples] == [20, 10]
    samples, note = split_iterations(events[:-1] + [(170, 180, "not")], names, 2, per_flush=2)
    assert "found 5 flush kernels for 2 iterations of 2" in note      # an impl's kernel named like the flush


def test_returned_bytes_counts_the_tensors_a_call_returns():
    import torch

    from solbench.measure import returned_bytes

    a, b = torch.zeros(4, 8), torch.zeros(3, dtype=torch.bfloat16)
    assert returned_bytes(a) == 128
    assert returned_bytes((a, {"b": b})) == 134       # nested containers, each tensor once
    assert returned_bytes(None) == 0                  # an in-place op that returns nothing writes nothing known
