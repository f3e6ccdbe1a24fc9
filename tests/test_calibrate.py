"""Calibration files: format round trip, what `measured_peaks` returns, and a real (tiny) CPU calibration."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from solbench import calibrate as cal
from solbench import calibration
from solbench.errors import UserError
from solbench.hardware import DeviceInfo
from solbench import peaks as peaks_mod
from solbench.peaks import Peaks
from solbench.measure.throughput import best_call_wall_s


def fake_gpu_calibration() -> calibration.Calibration:
    """A calibration as measure_gpu would assemble it, from made-up H200-like measurements."""
    gib = 2**30
    results = [
        calibration.Measured("copy", "B/s", gib, 2.0 * gib, 2.0 * gib / 4.2e12, 4.2e12),
        calibration.Measured("copy", "B/s", 2 * gib, 4.0 * gib, 4.0 * gib / 4.3e12, 4.3e12),   # the best size wins
        calibration.Measured("read", "B/s", gib, 1.0 * gib, gib / 4.4e12, 4.4e12),            # read beats copy
        calibration.Measured("write", "B/s", gib, 1.0 * gib, gib / 4.1e12, 4.1e12),
        calibration.Measured("l2_read", "B/s", 15 * 2**20, 1.0, 1.0, 9.0e12),
        calibration.Measured("matmul_fp32", "FLOP/s", 8192, 1.1e12, 1.1e12 / 51e12, 51e12),
        calibration.Measured("matmul_tf32", "FLOP/s", 8192, 1.1e12, 1.1e12 / 361e12, 361e12),
        calibration.Measured("matmul_bf16", "FLOP/s", 8192, 1.1e12, 1.1e12 / 700e12, 700e12),
        calibration.Measured("matmul_fp16", "FLOP/s", 8192, 1.1e12, 1.1e12 / 664e12, 664e12),
        calibration.Measured("matmul_fp8", "FLOP/s", 0, 0.0, float("inf"), 0.0, note="failed: RuntimeError"),
    ]
    return calibration.assemble(results, device_kind="cuda", name="NVIDIA H200", sm_count=132, memory_bytes=150_121_545_728,
                         cc="9.0", l2_bytes=62914560, driver="580.159.04", cuda="13.0", torch_version="2.11.0+cu130",
                         clocks={"sm_mhz_min": 1755, "sm_mhz_max": 1980}, quick=False)


def test_fingerprint_is_file_safe_and_distinguishes_memory_sizes() -> None:
    a = calibration.fingerprint("NVIDIA A100-SXM4-40GB", 108, 40 * 2**30)
    b = calibration.fingerprint("NVIDIA A100-SXM4-80GB", 108, 80 * 2**30)
    assert a == "nvidia-a100-sxm4-40gb-108sm-40gib"
    assert a != b and all(ch.isalnum() or ch == "-" for ch in a + b)
    info = DeviceInfo(kind="cuda", name="NVIDIA H200", sm_count=132, memory_bytes=150_121_545_728)
    assert calibration.fingerprint_for(info) == fake_gpu_calibration().fingerprint


def test_assemble_picks_best_rates_and_drops_failed_measurements() -> None:
    c = fake_gpu_calibration()
    assert c.schema == "solbench.calibration/1"
    assert c.memory_bandwidth == 4.3e12          # copy: best of the sizes
    assert c.read_bandwidth == 4.4e12 and c.write_bandwidth == 4.1e12 and c.l2_bandwidth == 9.0e12
    assert c.simt == {"fp32": 51e12}
    assert c.tensor == {"tf32": 361e12, "bf16": 700e12, "fp16": 664e12}   # the failed fp8 is absent, not zero
    assert any(m["note"].startswith("failed") for m in c.measurements)    # but the failure is recorded


def test_json_round_trip_through_file(tmp_path: Path) -> None:
    c = fake_gpu_calibration()
    path = calibration.write_calibration(c, tmp_path)
    assert path == tmp_path / f"{c.fingerprint}.json"
    by_fingerprint = calibration.load_calibration(c.fingerprint, tmp_path)
    by_path = calibration.load_calibration(path)
    assert by_fingerprint == by_path == json.loads(json.dumps(c.to_json()))
    assert [p.name for p in tmp_path.iterdir()] == [path.name]     # the atomic write left nothing behind
    assert stat.S_IMODE(path.stat().st_mode) & 0o044                 # readable by others under a usual umask


def test_measured_peaks_from_a_loaded_calibration(tmp_path: Path) -> None:
    c = fake_gpu_calibration()
    calibration.write_calibration(c, tmp_path)
    peaks = peaks_mod.measured_peaks(calibration.load_calibration(c.fingerprint, tmp_path))
    assert isinstance(peaks, Peaks) and peaks.source == "measured" and peaks.name == "NVIDIA H200"
    # The ceiling is the best direction measured (read here), so no streaming kernel scores SOL > 1 against it.
    assert peaks.memory_bandwidth == 4.4e12
    assert peaks.simt == c.simt and peaks.tensor == c.tensor
    assert peaks.compute_peak("tensor", "bf16") == 700e12
    assert peaks.clock_mhz == 1980 and peaks.l2_bytes == 62914560


def test_measured_peaks_borrows_unmeasured_keys_from_the_fallback() -> None:
    sheet = Peaks(name="NVIDIA H200 SXM", source="datasheet", memory_bandwidth=4.8e12,
                  simt={"fp32": 66.9e12, "fp64": 33.5e12}, tensor={"bf16": 989.4e12, "fp8": 1978.9e12})
    peaks = peaks_mod.measured_peaks(fake_gpu_calibration().to_json(), fallback=sheet)
    assert peaks.simt["fp32"] == 51e12                 # measured wins
    assert peaks.simt["fp64"] == 33.5e12 and peaks.tensor["fp8"] == 1978.9e12
    assert "simt.fp64" in peaks.notes and "tensor.fp8" in peaks.notes


def test_measured_peaks_for_a_probed_device(tmp_path: Path) -> None:
    cache_dir = tmp_path / "results" / "cache"              # what the runner passes
    c = fake_gpu_calibration()
    calibration.write_calibration(c, tmp_path / "results" / "calibration")
    info = DeviceInfo(kind="cuda", name="NVIDIA H200", sm_count=132, memory_bytes=150_121_545_728)
    peaks = peaks_mod.measured_peaks(info, cache_dir)
    assert peaks.source == "measured" and peaks.tensor["bf16"] == 700e12
    assert peaks.tensor["fp8"] == pytest.approx(1978.9e12)  # borrowed from specs/gpus/h200.yaml
    other = DeviceInfo(kind="cuda", name="NVIDIA L4", sm_count=58, memory_bytes=23 * 2**30)
    with pytest.raises(UserError, match="solbench calibrate"):
        peaks_mod.measured_peaks(other, cache_dir, calibrate_if_missing=False)
    with pytest.raises(UserError, match="CUDA"):
        peaks_mod.measured_peaks(DeviceInfo(kind="cpu", name="cpu"), cache_dir)


def test_load_calibration_missing_and_malformed(tmp_path: Path) -> None:
    assert calibration.load_calibration("nope", tmp_path) is None
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps({"schema": "solbench.calibration/0", "device": "x"}))
    with pytest.raises(UserError) as exc:
        calibration.load_calibration(bad)
    assert exc.value.field == "schema" and "old.json" in str(exc.value)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(UserError, match="cannot read calibration"):
        calibration.load_calibration(broken)
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({**fake_gpu_calibration().to_json(), "memory_bandwidth": 0}))
    with pytest.raises(UserError) as exc:
        calibration.load_calibration(zero)
    assert exc.value.field == "memory_bandwidth"


def test_comparison_rows_give_ratios_against_the_datasheet() -> None:
    sheet = Peaks(name="H200", source="datasheet", memory_bandwidth=4.8e12, simt={"fp32": 66.9e12},
                  tensor={"bf16": 989.4e12})
    rows = {r[0]: r for r in calibration.comparison_rows(fake_gpu_calibration().to_json(), sheet)}
    label, measured, datasheet, ratio = rows["DRAM copy (GB/s)"]
    assert measured == pytest.approx(4300) and datasheet == pytest.approx(4800)
    assert ratio == pytest.approx(4.3 / 4.8)
    assert rows["bf16 tensor (TFLOP/s)"][3] == pytest.approx(700 / 989.4)
    assert rows["tf32 tensor (TFLOP/s)"][2] is None          # no datasheet figure: no ratio invented


def test_cpu_calibration_runs_quickly_with_positive_numbers(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    c = cal.measure_cpu(quick=True, repeats=2)
    assert time.perf_counter() - t0 < 10
    assert c.device_kind == "cpu" and c.fingerprint.endswith("t")
    for value in (c.memory_bandwidth, c.read_bandwidth, c.write_bandwidth, c.simt["fp32"], *c.tensor.values()):
        assert value > 0
    # The calibration keeps each precision as measured (issue 11 #3: bf16 is not fp32's figure);
    # that every precision shares the fastest one is the CPU peaks' scoring rule (peaks.measure_cpu_peaks).
    best = {k: max(m["rate"] for m in c.measurements if m["what"] == f"matmul_{k}") for k in ("fp32", "bf16")}
    assert c.simt["fp32"] == best["fp32"] and c.tensor == best
    path = calibration.write_calibration(c, tmp_path)
    assert peaks_mod.measured_peaks(calibration.load_calibration(path)).memory_bandwidth >= c.memory_bandwidth


def test_calibrate_command_on_cpu_writes_the_file(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    buf = io.StringIO()
    path = cal.calibrate_command("cpu", tmp_path, quick=True, json_out=tmp_path / "copy.json",
                                 console=Console(file=buf, width=160))
    assert path.is_file() and (tmp_path / "copy.json").is_file()
    assert "DRAM copy" in buf.getvalue() and str(path) in buf.getvalue()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_gpu_calibration_is_below_the_datasheet(tmp_path: Path) -> None:
    """A measured ceiling above the datasheet means a timing or byte-count bug, never a fast GPU."""
    from solbench import hardware

    c = cal.measure_gpu("cuda:0", quick=True)
    info = hardware.probe_device("cuda:0")
    table = peaks_mod.match_table(info, peaks_mod.load_gpu_tables())
    assert c.memory_bandwidth > 0 and c.tensor
    if table is not None:
        sheet = table.peaks()
        for label, measured, datasheet, ratio in calibration.comparison_rows(c.to_json(), sheet):
            if ratio is not None:
                assert ratio <= 1.02, f"{label}: measured {measured:.1f} > datasheet {datasheet:.1f}"


def test_gpu_measuring_functions_count_bytes_and_flops_right() -> None:
    """The GPU measurements run on the CPU with the wall clock as their timer: checks the work each one counts."""
    import torch

    dev, size = torch.device("cpu"), 4 * 2**20
    timer = lambda fn: best_call_wall_s(fn, 2)  # noqa: E731
    for what in ("copy", "read", "write"):
        m = cal._dram(dev, what, size, timer)
        assert m.work == size and m.rate > 0, m      # copy: src + dst together make up the working set
    m = cal._l2_read(dev, size, timer)
    assert m.work == cal.L2_READ_PASSES * size and m.rate > 0
    m = cal._matmul(dev, "fp32", 64, timer)
    assert m.work == 2 * 64**3 and m.what == "matmul_fp32" and m.rate > 0


def test_the_best_matmul_size_sets_the_cpu_ceiling():
    ms = [calibration.Measured("copy", "B/s", 1, 1.0, 1.0, 1e10),
          calibration.Measured("matmul_fp32", "FLOP/s", 256, 1.0, 1.0, 9e10),
          calibration.Measured("matmul_fp32", "FLOP/s", 1024, 1.0, 1.0, 6e10),   # a later, slower size must not win
          calibration.Measured("matmul_bf16", "FLOP/s", 256, 1.0, 1.0, 1e9)]
    c = calibration.assemble(ms, device_kind="cpu", name="cpu", sm_count=None, memory_bytes=None, cc=None, l2_bytes=None,
                      driver=None, cuda=None, torch_version="x", clocks={}, quick=True)
    assert c.simt["fp32"] == 9e10 and c.tensor["bf16"] == 1e9   # each precision as measured


def test_matmul_ceiling_is_the_best_layout_and_the_best_timer(monkeypatch) -> None:
    """A batched-only ceiling was beaten on an H200 (power-limited batches): single calls count too."""
    batched = {"slow layout": 2.0, "fast layout": 1.0}
    single = {"slow layout": 1.5, "fast layout": 0.8}
    calls = {label: (lambda label=label: label) for label in batched}
    monkeypatch.setattr(cal, "_matmul_candidates", lambda *a: list(calls.items()))
    m = cal._matmul(None, "bf16", 10, lambda fn: batched[fn()], lambda fn: single[fn()])
    assert m.best_s == 0.8 and m.rate == 2.0 * 10**3 / 0.8
    assert m.note == "fast layout, best single call"
    # Without a single-call timer (the CPU) only batches count.
    m = cal._matmul(None, "bf16", 10, lambda fn: batched[fn()])
    assert m.best_s == 1.0 and m.note == "fast layout, best batched"


def test_matmul_fails_only_when_every_candidate_fails(monkeypatch) -> None:
    def boom() -> None:
        raise RuntimeError("no kernel for this layout")

    monkeypatch.setattr(cal, "_matmul_candidates", lambda *a: [("A @ B", boom), ("A @ B^T", boom)])
    with pytest.raises(RuntimeError, match="A @ B failed: no kernel.*A @ B\\^T failed"):
        cal._matmul(None, "fp8", 10, lambda fn: fn())


def test_matmul_runs_tf32_only_for_tf32(monkeypatch) -> None:
    import torch

    seen = {}

    def candidates(dev, key, n):
        return [("A @ B", lambda: seen.setdefault(key, torch.backends.cuda.matmul.allow_tf32))]

    monkeypatch.setattr(cal, "_matmul_candidates", candidates)
    before = torch.backends.cuda.matmul.allow_tf32
    for key in ("tf32", "fp32", "bf16"):
        cal._matmul(None, key, 10, lambda fn: fn() or 1.0)
    assert seen == {"tf32": True, "fp32": False, "bf16": False}
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_calibrate_command_prints_the_datasheet_it_is_given(monkeypatch, tmp_path: Path) -> None:
    """The datasheet comes from the caller (the peaks layer), not from a table lookup inside calibrate."""
    import io

    import torch
    from rich.console import Console

    info = DeviceInfo(kind="cuda", name="NVIDIA H200", sm_count=132, memory_bytes=150_121_545_728)
    sheet = Peaks(name="H200 sheet", source="datasheet", memory_bandwidth=4.8e12, simt={"fp32": 66.9e12},
                  tensor={"bf16": 989.4e12})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cal, "probe_device", lambda device: info)
    monkeypatch.setattr(cal, "measure_gpu", lambda device, quick, step: fake_gpu_calibration())
    asked = []
    buf = io.StringIO()
    cal.calibrate_command("cuda:0", tmp_path, datasheet_for=lambda i: asked.append(i) or sheet,
                          console=Console(file=buf, width=200))
    assert asked == [info] and "(H200 sheet)" in buf.getvalue() and "4,800.0" in buf.getvalue()
