"""Issue 11 #2: a CPU run measures its bandwidth ceiling again, once, before a record is called faster
than light because of a cached figure from a slow measurement (solbench/ceiling_recheck.py).

No real bandwidth is measured: the re-measurement is injected (a `Measure` returning a Figure).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solbench import ceiling_recheck, hardware, peaks, sol
from solbench.ceiling_recheck import Figure, recheck_run
from solbench.peaks import Peaks
from solbench.results import Record
from solbench.worker import score_record

GB = 1e9
MIB = 2**20
INFO = hardware.DeviceInfo(kind="cpu", name="test CPU", cpu_threads=2, cache_bytes=32 * MIB, torch="x", host="h")
COMPUTE = 1e18                     # so every record below is memory-bound


def _peaks(bandwidth: float = 10 * GB, spread: float | None = 0.01) -> Peaks:
    noise = {"memory_bandwidth": spread} if spread is not None else {}
    return Peaks(name="test CPU", source="cpu-measured", memory_bandwidth=bandwidth,
                 simt={k: COMPUTE for k in ("fp32", "fp16", "bf16", "fp64")},
                 tensor={k: COMPUTE for k in ("fp32", "tf32", "bf16", "fp16", "fp64")}, notes="test", noise=noise)


def _record(p: Peaks, sol_vs_cached: float, nbytes: float = 256 * MIB, impl: str = "eager") -> Record:
    """A memory-bound record measured as the worker scores it: `sol_vs_cached` times the cached ceiling."""
    tsol, bound = sol.t_sol(1.0, nbytes, COMPUTE, p.memory_bandwidth)
    rec = Record(op="row_sum", case="M=4096,N=4096", params={}, dtype="float32", impl=impl, kind="baseline",
                 status="ok", compute_unit="simt", peak_key="fp32", flops=1.0, bytes=nbytes, peak_flops=COMPUTE,
                 peak_bandwidth=p.memory_bandwidth, t_sol_s=tsol, bound=bound, host=INFO.host)
    median = tsol / sol_vs_cached
    rec.time_s = {"median": median}
    score_record(rec, median, p, INFO.flushed_cache_bytes)
    return rec


class Counting:
    """An injected re-measurement that counts its calls."""

    def __init__(self, figure: Figure):
        self.figure, self.calls = figure, 0

    def __call__(self, info: hardware.DeviceInfo) -> Figure:
        self.calls += 1
        return self.figure


def _seed_cache(cache_dir: Path, p: Peaks, monkeypatch) -> Path:
    """The CPU ceiling cache as peaks.cpu_peaks writes it, holding `p`."""
    monkeypatch.setattr(peaks, "measure_cpu_peaks", lambda *a, **k: p)
    peaks.cpu_peaks(cache_dir, INFO)
    path = peaks.cpu_peaks_path(cache_dir, INFO)
    assert path.is_file()
    return path


def test_a_record_over_a_low_cached_ceiling_is_ok_with_a_note_when_the_fresh_one_is_higher(tmp_path):
    p = _peaks(10 * GB)
    rec = _record(p, 1.2)
    assert rec.status == "invalid" and "faster than the speed of light" in rec.message     # as today, before
    measure = Counting(Figure(15 * GB, 0.005))
    rechecked = recheck_run([rec], p, INFO, tmp_path / "cpu-x.json", measure)
    assert rec.status == "ok" and rec.message == ""
    assert rec.sol == pytest.approx(0.8) and rec.peak_bandwidth == 15 * GB
    note = next(w for w in rec.warnings if "re-measured in this process" in w)
    assert "15.0 GB/s (cached calibration: 10.0 GB/s from " in note and "cpu-x.json" in note
    assert "scored against the higher" in note
    # The run's peaks keep both figures, and score against the higher.
    assert rechecked is not None and rechecked.memory_bandwidth == 15 * GB
    both = rechecked.to_json()["bandwidth_recheck"]
    assert both["cached"] == 10 * GB and both["fresh"] == 15 * GB and both["ceiling"] == 15 * GB
    assert both["cached_spread"] == 0.01 and both["fresh_spread"] == 0.005 and both["over_cached"] == 1


def test_a_record_beating_even_the_re_measured_ceiling_stays_invalid(tmp_path):
    p = _peaks(10 * GB)
    rec = _record(p, 2.5)
    measure = Counting(Figure(15 * GB, 0.005))
    rechecked = recheck_run([rec], p, INFO, tmp_path / "cpu-x.json", measure)
    assert rec.status == "invalid" and rec.sol == pytest.approx(2.5 / 1.5)
    # Its message names the cause as today, against the re-measured ceiling and its tolerance.
    s = sol.score(rec.flops, rec.bytes, rec.time_s["median"], COMPUTE, 15 * GB)
    assert rec.message == sol.invalid_reason(s, "cpu-measured", tolerance=rechecked.noise_of("memory"),
                                             cache_bytes=INFO.flushed_cache_bytes)
    assert "not explained by caching" in rec.message
    assert any("re-measured in this process" in w for w in rec.warnings)


def test_a_lower_fresh_figure_changes_no_ceiling(tmp_path):
    p = _peaks(10 * GB)
    rec = _record(p, 1.5)
    rechecked = recheck_run([rec], p, INFO, tmp_path / "cpu-x.json", Counting(Figure(8 * GB, 0.005)))
    assert rechecked.memory_bandwidth == 10 * GB and rec.status == "invalid" and rec.sol == pytest.approx(1.5)


def test_a_failed_re_measurement_leaves_the_cached_verdict(tmp_path):
    p = _peaks(10 * GB)
    rec = _record(p, 1.5)
    message = rec.message
    rechecked = recheck_run([rec], p, INFO, tmp_path / "cpu-x.json", Counting(ceiling_recheck.NOT_MEASURED))
    assert rechecked.memory_bandwidth == 10 * GB and rec.status == "invalid" and rec.message == message
    assert any("could not be measured again" in w for w in rec.warnings)


def test_the_tie_tolerance_is_the_chosen_figures_own_spread_not_the_gap_between_figures(tmp_path):
    p = _peaks(10 * GB, spread=0.01)
    # 1.35x the cached figure = 1.08x the fresh one: beyond the fresh figure's own 0.5% spread. The two
    # measurements differ by 20%, but the slower one was a slow draw, not an uncertainty of the faster:
    # still invalid (a 20% wider tolerance would pass a byte formula 20% too small).
    rec = _record(p, 1.35)
    rechecked = recheck_run([rec], p, INFO, tmp_path / "cpu-x.json", Counting(Figure(12.5 * GB, 0.005)))
    assert rechecked.noise_of("memory") == pytest.approx(0.005)
    assert rechecked.bandwidth_recheck["between"] == pytest.approx(0.2)
    assert rec.status == "invalid"
    # Within the fresh figure's own spread: a tie.
    p2 = _peaks(10 * GB, spread=0.01)
    rec2 = _record(p2, 1.254)
    recheck_run([rec2], p2, INFO, tmp_path / "cpu-y.json", Counting(Figure(12.5 * GB, 0.005)))
    assert rec2.status == "ok" and any("ties its measured memory ceiling" in w for w in rec2.warnings)


def test_the_ceiling_is_measured_again_at_most_once_per_run(tmp_path):
    p = _peaks(10 * GB)
    records = [_record(p, x, impl=f"i{i}") for i, x in enumerate((1.2, 1.3, 2.5, 0.5, 1.1))]
    measure = Counting(Figure(15 * GB, 0.005))
    recheck_run(records, p, INFO, tmp_path / "cpu-x.json", measure)
    assert measure.calls == 1
    assert [r.status for r in records] == ["ok", "ok", "invalid", "ok", "ok"]
    # Every record of the run is scored against the one ceiling, the one already ok too.
    assert {r.peak_bandwidth for r in records} == {15 * GB} and records[3].sol == pytest.approx(0.5 / 1.5)
    # No record over the cached ceiling: nothing is measured.
    quiet = Counting(Figure(15 * GB, 0.005))
    assert recheck_run([_record(p, 0.9)], p, INFO, tmp_path / "cpu-x.json", quiet) is None and quiet.calls == 0


def test_only_the_sol_verdict_asks_for_a_re_measurement(tmp_path):
    p = _peaks(10 * GB)
    tampered = _record(p, 1.5)
    tampered.message, tampered.time_s = "timer integrity: time.perf_counter replaced while timing", None
    outside = _record(p, 1.5)
    outside.message = "work outside the timed window: ..."
    measure = Counting(Figure(15 * GB, 0.005))
    assert recheck_run([tampered, outside], p, INFO, tmp_path / "cpu-x.json", measure) is None
    assert measure.calls == 0 and tampered.status == outside.status == "invalid"
    # Nor is a GPU run's or a datasheet's ceiling measured again here.
    gpu = Peaks(**{**p.to_json(), "source": "datasheet"})
    assert recheck_run([_record(gpu, 1.5)], gpu, INFO, tmp_path / "cpu-x.json", measure) is None


def test_a_higher_fresh_figure_raises_the_cache_for_the_next_run(tmp_path, monkeypatch):
    p = _peaks(10 * GB, spread=0.01)
    cache = _seed_cache(tmp_path, p, monkeypatch)
    recheck_run([_record(p, 1.2)], p, INFO, cache, Counting(Figure(15 * GB, 0.004)))
    kept = json.loads(cache.read_text())
    assert kept["memory_bandwidth"] == 15 * GB and kept["noise"]["memory_bandwidth"] == 0.004
    assert kept["simt"] == p.simt and kept["bandwidth_recheck"] is None
    monkeypatch.setattr(peaks, "measure_cpu_peaks", lambda *a, **k: pytest.fail("measured instead of cached"))
    assert peaks.cpu_peaks(tmp_path, INFO).memory_bandwidth == 15 * GB     # where the next run starts
    # Lower or busy figures never lower or overwrite what is kept.
    again = peaks.cpu_peaks(tmp_path, INFO)
    recheck_run([_record(again, 1.2)], again, INFO, cache, Counting(Figure(12 * GB, 0.004)))
    recheck_run([_record(again, 1.2)], again, INFO, cache, Counting(Figure(20 * GB, 0.04, busy=True)))
    assert json.loads(cache.read_text())["memory_bandwidth"] == 15 * GB


def test_a_run_re_measures_once_across_its_ops_and_says_so(tmp_path, monkeypatch):
    """Through the pipeline: two ops (two jobs) over a cached ceiling far too low, one re-measurement."""
    pytest.importorskip("torch")
    from solbench import pipeline, plan, spec
    from solbench.exec import InlineExecutor
    from solbench.measure import TimingConfig
    from tests import cheats

    real = hardware.probe_device("cpu")
    low = _peaks(1e6, spread=0.01)                      # 1 MB/s: every record beats it
    monkeypatch.setattr(peaks, "measure_cpu_peaks", lambda *a, **k: low)
    peaks.cpu_peaks(tmp_path / "cache", real)
    measure = Counting(Figure(1e15, 0.005))
    monkeypatch.setattr(ceiling_recheck, "measure_here", measure)
    folder = tmp_path / "specs"
    ops = (cheats.write_spec(folder, "honest", op="recheck_a"), cheats.write_spec(folder, "honest", op="recheck_b"))
    config = pipeline.RunConfig(selection=plan.Selection(ops=ops), device="cpu", cache_dir=tmp_path / "cache",
                                timing=TimingConfig(rse_target=0.5, budget_s=0.05, min_samples=3))
    run = pipeline.execute(pipeline.prepare(config, spec.load_all([folder]), executor=InlineExecutor()))
    assert measure.calls == 1
    assert {r.status for r in run.records} == {"ok"} and len(run.records) == 4
    assert all(any("re-measured in this process" in w for w in r.warnings) for r in run.records)
    assert run.peaks["memory_bandwidth"] == 1e15 and run.peaks["bandwidth_recheck"]["cached"] == 1e6
    assert run.peaks["bandwidth_recheck"]["cache_updated"] is True
    assert json.loads(peaks.cpu_peaks_path(tmp_path / "cache", real).read_text())["memory_bandwidth"] == 1e15
