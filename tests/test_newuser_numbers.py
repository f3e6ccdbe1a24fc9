"""Issue 11, numbers that cannot be right (#1-#4): CPU caches, the CPU bandwidth ceiling, calibrate's
bf16 row, and a measured ceiling tied by the code it was measured with."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from solbench import calibrate as cal  # noqa: E402
from solbench import calibration, hardware, sol  # noqa: E402
from solbench.measure import TimingConfig, measure  # noqa: E402
from solbench.measure.cpu import CACHE_MULTIPLE, CacheFlush, Preemptions, timed_call  # noqa: E402
from solbench.measure.throughput import BestTime  # noqa: E402
from solbench.peaks import Peaks, peaks_from_calibration  # noqa: E402
from solbench.results import Record  # noqa: E402
from solbench.worker import score_record  # noqa: E402


# ---------------------------------------------------------------- #1 the CPU timer evicts the caches


def test_cpu_measurements_flush_four_times_all_caches():
    cache = hardware.cpu_cache_bytes()
    assert cache and cache >= 2**20          # Linux lists the caches in sysfs: this machine has some
    m = measure(lambda i: None, "cpu", TimingConfig(budget_s=0.05, warmup_s=0.0), cache)
    assert m.timer == "wall" and m.flush_bytes == max(CACHE_MULTIPLE * cache, 64 * 2**20)
    assert hardware.probe_device("cpu").cache_bytes == cache


def test_cache_sizes_are_read_once_per_physical_cache(tmp_path):
    for cpu in (0, 1):
        for index, (level, kind, size, shared) in enumerate((("1", "Data", "48K", str(cpu)),
                                                             ("2", "Unified", "1024K", str(cpu)),
                                                             ("3", "Unified", "32768K", "0-1"))):
            d = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
            d.mkdir(parents=True)
            for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
                (d / name).write_text(value + "\n")
    # Two private 1 MiB L2s and one shared 32 MiB L3; the L1s are not counted.
    assert hardware.cpu_cache_bytes(tmp_path) == 34 * 2**20


def _best_sum_s(x: torch.Tensor, flush, calls: int) -> float:
    seen = Preemptions()
    return min(timed_call(lambda i: x.sum(), i, flush, seen) for i in range(calls))


def _l2_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """One core's L2 (Linux sysfs), 1 MiB where it is not listed."""
    for index in root.glob("index[0-9]*"):
        try:
            if (index / "level").read_text().strip() == "2":
                return hardware._cache_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
    return 2**20


def test_the_flush_really_evicts_a_cache_sized_input():
    """A buffer half one core's L2, summed back to back, is read from cache; after the flush, which
    covers every level (CACHE_MULTIPLE times all the caches), it is not. (A quarter of all the caches
    was the size until a VM listed a 480 MiB L3: its 120 MiB summed warm at 27 GB/s, cold at 21, too
    close to tell, on two cores that the L3 does not feed much faster than DRAM.)"""
    cache = hardware.cpu_cache_bytes() or 32 * 2**20
    x = torch.ones(_l2_bytes() // 2 // 4)
    warm = _best_sum_s(x, lambda: None, 400)          # best of many: a busy machine only slows calls down
    cold = _best_sum_s(x, CacheFlush(CACHE_MULTIPLE * cache), 40)
    assert cold > 1.5 * warm, (warm, cold)


def _score(flops: float, nbytes: float, median_s: float, peak_flops: float = 1e12, bw: float = 1e10) -> sol.Score:
    return sol.score(flops, nbytes, median_s, peak_flops, bw)


def test_invalid_says_cache_resident_or_true_contradiction():
    mib = 2**20
    small = _score(1.0, 12 * mib, 12 * mib / 1.5e10)          # memory-bound, SOL 1.5, 12 MiB
    reason = sol.invalid_reason(small, "cpu-measured", cache_bytes=34 * mib)
    assert "cache-resident working set: its 12.0 MiB fit in the 34.0 MiB of cache" in reason
    assert "size the case past the cache" in reason
    big = _score(1.0, 512 * mib, 512 * mib / 1.5e10)
    reason = sol.invalid_reason(big, "cpu-measured", cache_bytes=34 * mib)
    assert "not explained by caching (its 512 MiB working set is larger than the 34.0 MiB cache" in reason
    compute = _score(2e12, 1.0, 1.0)                          # compute-bound, SOL 2: caches cannot explain it
    assert "a true contradiction" in sol.invalid_reason(compute, cache_bytes=34 * mib)


# ---------------------------------------------------------------- #2 a repeatable CPU bandwidth ceiling


def _bandwidth() -> tuple[float, bool]:
    cache = hardware.cpu_cache_bytes()
    ms = cal.measure_cpu_bandwidth(cal.cpu_bandwidth_bytes(cache), cal.cpu_chunk_bytes(cache))
    best = max(ms, key=lambda m: m.rate)
    assert best.spread is not None and best.size >= cal.CPU_CACHE_MULTIPLE * cache
    return best.rate, cal.BUSY not in best.note


def test_cpu_bandwidth_ceiling_is_repeatable_within_5_percent():
    """Back-to-back measurements agree within 5%, or the measurement says the machine was busy (and
    peaks.cpu_peaks then does not cache it).

    The 2-core CI VM's memory bandwidth itself changes between regimes lasting tens of seconds (about 57
    and 92 GB/s, each measured with its windows agreeing within 2%: the host's doing, not the buffers'
    placement, which a test of fresh and held buffer sets ruled out). So the claim is checked on
    consecutive pairs of up to four measurements: one regime change between two measurements is the
    machine, measurements that never agree are the method. A run that meets a slow regime is scored
    against the higher figure once its records beat it (ceiling_recheck.py). Six measurements, not four:
    a clean clone's CI run on 2026-12-02 met three regimes in four (74.9, 49.2, 57.6, 73.5 GB/s)."""
    got = []
    for _ in range(6):
        rate, ok = _bandwidth()
        if not ok:
            pytest.skip(f"other processes kept preempting the measurement ({rate / 1e9:.1f} GB/s): flagged "
                        f"busy, so not cached; repeatability needs a quiet moment")
        got.append(rate)
        if len(got) >= 2 and abs(got[-1] - got[-2]) / max(got[-2:]) <= 0.05:
            return
    pytest.fail(f"no two consecutive measurements agree within 5%: {[round(r / 1e9, 1) for r in got]} GB/s")


def test_cpu_ceiling_records_its_spread_and_a_busy_one_is_not_cached(tmp_path, monkeypatch):
    from solbench import peaks as peaks_mod

    ms = cal.measure_cpu_bandwidth(64 * 2**20, 8 * 2**20, window_s=0.03, cap_s=0.3)
    assert all(m.spread is not None and m.spread >= 0 for m in ms)
    c = calibration.assemble(ms, device_kind="cpu", name="cpu", sm_count=None, memory_bytes=None, cc=None,
                             l2_bytes=None, driver=None, cuda=None, torch_version="x", clocks={}, quick=True)
    assert c.noise["memory_bandwidth"] == max(ms, key=lambda m: m.rate).spread
    info = hardware.probe_device("cpu")
    busy = Peaks(name="cpu", source="cpu-measured", memory_bandwidth=1e10, simt={}, tensor={},
                 notes=f"x; read {peaks_mod.BUSY_NOTE}")
    monkeypatch.setattr(peaks_mod, "measure_cpu_peaks", lambda *a, **k: busy)
    assert peaks_mod.cpu_peaks(tmp_path, info) is busy and not list(tmp_path.glob("cpu-*.json"))
    _, warnings = peaks_mod.resolve(info, "datasheet", tmp_path, busy)
    assert warnings and "busy machine" in warnings[0]


# ---------------------------------------------------------------- #3 calibrate's bf16 row


def test_calibrate_prints_each_cpu_precision_as_measured(tmp_path):
    from rich.console import Console

    buf = io.StringIO()
    path = cal.calibrate_command("cpu", tmp_path, quick=True, console=Console(file=buf, width=160))
    data = calibration.load_calibration(path)
    text = buf.getvalue()
    for key in ("fp32", "bf16"):
        measured = max(m["rate"] for m in data["measurements"] if m["what"] == f"matmul_{key}")
        assert data["tensor"][key] == measured
        row = re.search(rf"{key} matmul \(GFLOP/s\)[\s│|]+([\d,.]+)", text)
        assert row and float(row.group(1).replace(",", "")) == pytest.approx(measured / 1e9, abs=0.06)
    assert "TFLOP/s" not in text          # a CPU's rates in TFLOP/s round to 0.0


# ---------------------------------------------------------------- #4 a tie with a measured ceiling


def _record(flops: float, nbytes: float, peak_flops: float, bw: float) -> Record:
    tsol, bound = sol.t_sol(flops, nbytes, peak_flops, bw)
    return Record(op="gemm", case="M=1", params={}, dtype="float32", impl="eager", kind="baseline", status="ok",
                  compute_unit="simt", peak_key="fp32", flops=flops, bytes=nbytes, peak_flops=peak_flops,
                  peak_bandwidth=bw, t_sol_s=tsol, bound=bound)


def test_a_baseline_tying_its_measured_ceiling_is_a_tie_not_invalid():
    peaks = Peaks(name="cpu", source="cpu-measured", memory_bandwidth=1e10, simt={"fp32": 1e11}, tensor={},
                  noise={"simt.fp32": 0.02, "memory_bandwidth": 0.01})
    tie = _record(1e11, 1.0, 1e11, 1e10)
    score_record(tie, 1 / 1.001, peaks)                       # SOL 1.001, inside the ceiling's 2% spread
    assert tie.status == "ok" and tie.sol == pytest.approx(1.001)
    assert any("ties its measured compute ceiling" in w for w in tie.warnings)
    beyond = _record(1e11, 1.0, 1e11, 1e10)
    score_record(beyond, 1 / 1.05, peaks)                     # 5% above: beyond the spread
    assert beyond.status == "invalid" and "spread 2.0%" in beyond.message
    datasheet = _record(1e11, 1.0, 1e11, 1e10)
    score_record(datasheet, 1 / 1.001, "datasheet")            # a datasheet has no spread: no tie
    assert datasheet.status == "invalid"


def test_calibrations_carry_the_spread_of_each_ceiling_into_the_peaks(monkeypatch):
    calls = {"A @ B": lambda: "A @ B"}
    monkeypatch.setattr(cal, "_matmul_candidates", lambda *a: list(calls.items()))
    m = cal._matmul(None, "bf16", 10, lambda fn: BestTime(1.0, 0.004), lambda fn: BestTime(0.9, 0.013))
    assert m.best_s == 0.9 and m.spread == 0.013             # the spread of the timing that won
    copy = calibration.Measured("copy", "B/s", 1, 1.0, 1.0, 4e12, spread=0.006)
    c = calibration.assemble([copy, m], device_kind="cuda", name="gpu", sm_count=1, memory_bytes=1, cc="9.0",
                             l2_bytes=1, driver=None, cuda=None, torch_version="x", clocks={}, quick=True)
    assert c.noise == {"memory_bandwidth": 0.006, "tensor.bf16": 0.013}
    peaks = peaks_from_calibration(c.to_json())
    assert peaks.noise_of("compute", "tensor", "bf16") == 0.013 and peaks.noise_of("memory") == 0.006
    assert peaks.noise_of("compute", "simt", "fp32") == 0.0
