"""The run-to-run noise model: the spread formula, the fit, the file keyed by fingerprint, the defaults,
where a run picks it up, and `solbench noise` (with a fake and with a real worker process)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from solbench import noise_calibrate, pipeline
from solbench.calibration import fingerprint_for
from solbench.cli import app
from solbench.errors import UserError
from solbench.hardware import DeviceInfo
from solbench.noise_model import (DEFAULT_MODELS, SCHEMA, KernelRepeats, RunToRunModel, assemble, default_model,
                                  device_fingerprint, fit_model, load_model, load_noise_file, model_for,
                                  noise_path, write_noise)

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", sm_count=132, memory_bytes=150_000_000_000)
CPU = DeviceInfo(kind="cpu", name="AMD EPYC 9B14", cpu_threads=2)


def synthetic_repeats(rel: float, abs_s: float, kernels: int, runs: int, seed: int,
                      wild: int | None = None) -> list[KernelRepeats]:
    """Kernels from 2 us to 10 ms whose run medians scatter as the model says (kernel `wild`: 20x more)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, t in enumerate(np.logspace(np.log10(2e-6), np.log10(1e-2), kernels)):
        sigma = math.hypot(rel, abs_s / t) * (20.0 if i == wild else 1.0)
        out.append(KernelRepeats(f"k{i}", tuple(float(m) for m in t * np.exp(sigma * rng.standard_normal(runs)))))
    return out


# ---------------------------------------------------------------- the model


def test_spread_is_a_relative_and_an_absolute_term_in_quadrature():
    m = RunToRunModel(rel=0.003, abs_s=0.1e-6, source="given")
    assert m.spread(1e-3) == pytest.approx(math.hypot(0.003, 1e-4))
    assert m.spread(2e-6) == pytest.approx(math.hypot(0.003, 0.05))    # the absolute term rules short kernels
    assert m.spread(0.0) == math.inf


@pytest.mark.parametrize("rel, abs_s", [(-0.1, 0.0), (1.0, 0.0), (0.01, -1e-6), (0.01, math.nan)])
def test_a_model_with_impossible_parameters_is_refused(rel, abs_s):
    with pytest.raises(ValueError):
        RunToRunModel(rel, abs_s, "given")


def test_defaults_would_not_have_raised_the_false_alarms_the_issue_reports():
    """H200: gelu 3.14 -> 3.27 us (+4.3%) between two runs; a CPU: softmax (~100 us) 14.4% faster."""
    from solbench.verdict import z_for

    z = z_for(0.999)
    cuda, cpu = default_model("cuda"), default_model("cpu")
    assert math.log(3.27 / 3.14) < z * math.sqrt(2) * cuda.spread(3.14e-6)
    assert abs(math.log(1 - 0.144)) < z * math.sqrt(2) * cpu.spread(100e-6)
    assert cuda.is_default and cuda.source == "default:cuda" and cpu.source == "default:cpu"
    assert default_model("tpu") == DEFAULT_MODELS["cpu"]            # unknown kinds get the widest


# ---------------------------------------------------------------- the fit


@pytest.mark.parametrize("rel, abs_s", [(0.004, 0.05e-6), (0.01, 0.2e-6), (0.002, 0.5e-6)])
def test_the_fit_recovers_known_parameters(rel, abs_s):
    for seed in range(3):
        fit = fit_model(synthetic_repeats(rel, abs_s, kernels=30, runs=8, seed=seed))
        assert fit.rel == pytest.approx(rel, rel=0.2), seed
        assert fit.abs_s == pytest.approx(abs_s, rel=0.3), seed


def test_one_kernel_the_model_cannot_describe_does_not_drag_the_fit():
    fit = fit_model(synthetic_repeats(0.004, 0.05e-6, kernels=20, runs=6, seed=1, wild=15))
    assert fit.rel == pytest.approx(0.004, rel=0.35)


def test_the_stored_model_is_the_upper_confidence_bound_of_the_fit():
    reps = synthetic_repeats(0.004, 0.05e-6, kernels=14, runs=5, seed=2)
    fit = fit_model(reps)
    assert fit.dof == 14 * 4 and 1.05 < fit.inflation < 1.3
    model = fit.model("measured:x")
    assert model.rel == pytest.approx(fit.rel * fit.inflation) and model.abs_s > fit.abs_s


def test_identical_medians_and_too_few_kernels():
    flat = [KernelRepeats(f"k{i}", (t, t, t)) for i, t in enumerate((2e-6, 1e-4, 1e-2))]
    fit = fit_model(flat)                    # timer resolution, not an error: a tiny model
    assert fit.rel < 1e-3 and math.isfinite(fit.abs_s)
    with pytest.raises(ValueError, match="at least 3 kernels"):
        fit_model(flat[:2])


# ---------------------------------------------------------------- the file, by fingerprint


def _calibration(fp: str = "nvidia-h200-132sm-140gib"):
    return assemble(synthetic_repeats(0.003, 0.08e-6, 14, 5, seed=3), fingerprint_=fp, device_kind="cuda",
                    device="NVIDIA H200", torch_version="2.11", budget_s=0.25, timer="events")


def test_the_model_is_stored_beside_the_calibration_under_the_same_fingerprint(tmp_path):
    fp = device_fingerprint(H200)
    assert fp == fingerprint_for(H200)
    path = write_noise(_calibration(fp), tmp_path)
    assert path == noise_path(fp, tmp_path) == tmp_path / f"{fp}-noise.json"
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA and len(data["kernels"]) == 14 and data["fit"]["dof"] == 56
    model = load_model(fp, tmp_path)
    assert model.source == f"measured:{fp}" and model.rel == pytest.approx(data["model"]["rel"])
    assert model_for(H200, tmp_path) == model
    assert load_model("another-gpu-108sm-40gib", tmp_path) is None
    assert model_for(DeviceInfo(kind="cuda", name="NVIDIA A100", sm_count=108), tmp_path) == DEFAULT_MODELS["cuda"]


def test_a_cpu_fingerprint_names_its_threads(tmp_path):
    assert device_fingerprint(CPU) == "amd-epyc-9b14-2t"
    assert model_for(CPU, tmp_path) == DEFAULT_MODELS["cpu"]


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(schema="solbench.calibration/1"), "schema"),
    (lambda d: d["model"].update(rel=1.5), "model.rel"),
    (lambda d: d["model"].update(abs_s="fast"), "model.abs_s"),
    (lambda d: d.pop("model"), "model"),
    (lambda d: d.update(fingerprint=""), "fingerprint"),
])
def test_a_bad_noise_file_is_a_user_error_naming_file_and_field(tmp_path, edit, field):
    path = write_noise(_calibration(), tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as exc:
        load_noise_file(path)
    assert exc.value.field == field and exc.value.file == str(path)


def test_an_unreadable_noise_file_is_a_user_error(tmp_path):
    bad = tmp_path / "x-noise.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="cannot read"):
        load_noise_file(bad)
    with pytest.raises(UserError, match="not found"):
        load_noise_file(tmp_path / "missing.json")


# ---------------------------------------------------------------- a run picks it up


def test_a_run_is_stamped_with_the_measured_model_else_the_default(tmp_path):
    config = pipeline.RunConfig(cache_dir=tmp_path / "cache")
    assert pipeline.with_noise_model(config, H200).timing.run_to_run == DEFAULT_MODELS["cuda"]
    write_noise(_calibration(device_fingerprint(H200)), tmp_path / "calibration")
    measured = pipeline.with_noise_model(config, H200).timing.run_to_run
    assert measured.source == f"measured:{device_fingerprint(H200)}"
    assert pipeline.with_noise_model(config, H200).to_json()["run_to_run"]["source"] == measured.source
    given = RunToRunModel(0.02, 0.0, "given")
    chosen = pipeline.RunConfig(timing=pipeline.TimingConfig(run_to_run=given), cache_dir=tmp_path / "cache")
    assert pipeline.with_noise_model(chosen, H200).timing.run_to_run is given


# ---------------------------------------------------------------- solbench noise


def _fake_worker(rel: float, abs_s: float, fp: str = "nvidia-h200-132sm-140gib"):
    reps = synthetic_repeats(rel, abs_s, kernels=14, runs=6, seed=4)
    calls = []

    def worker(device: str, budget_s: float, quick: bool) -> dict:
        i = len(calls)
        calls.append((device, budget_s, quick))
        return {"fingerprint": fp, "device_kind": "cuda", "device": "NVIDIA H200", "torch": "2.11",
                "timer": "events", "kernels": [{"name": k.name, "median_s": k.medians_s[i]} for k in reps]}
    return worker, calls


def test_noise_measurement_fits_the_medians_of_fresh_processes():
    worker, calls = _fake_worker(0.004, 0.06e-6)
    cal = noise_calibrate.calibrate_noise("cuda", 6, 0.25, False, worker=worker)
    assert len(calls) == 6 and calls[0] == ("cuda", 0.25, False)
    assert cal.runs == 6 and cal.budget_s == 0.25 and cal.timer == "events"
    assert cal.fit["rel"] == pytest.approx(0.004, rel=0.5)
    assert cal.model["rel"] > cal.fit["rel"]


def test_repetitions_on_different_devices_are_refused():
    seen = []

    def worker(device: str, budget_s: float, quick: bool) -> dict:
        seen.append(1)
        return {"fingerprint": f"gpu-{len(seen)}", "device_kind": "cuda", "device": "x", "torch": "", "timer": "",
                "kernels": [{"name": "k", "median_s": 1e-5}]}
    with pytest.raises(noise_calibrate.NoiseRunFailed, match="different devices"):
        noise_calibrate.calibrate_noise("cuda", 3, 0.1, True, worker=worker)


def test_probe_kernels_span_microseconds_to_milliseconds():
    cuda = [name for name, _, _ in noise_calibrate.probe_kernels("cuda", quick=False)]
    assert "copy 4 KiB" in cuda and "matmul fp32 6144" in cuda and len(cuda) >= 12
    assert len(noise_calibrate.probe_kernels("cuda", quick=True)) == 4
    assert len(noise_calibrate.probe_kernels("cpu", quick=True)) == 4


def test_one_real_repetition_in_a_fresh_process_on_this_cpu():
    data = noise_calibrate.run_worker("cpu", 0.02, True, timeout_s=120)
    assert data["device_kind"] == "cpu" and data["timer"] == "wall" and data["fingerprint"].endswith("t")
    assert len(data["kernels"]) == 4 and all(k["median_s"] > 0 for k in data["kernels"])


def test_a_missing_gpu_is_a_user_error_naming_the_device_flag():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the message on a machine without CUDA")
    with pytest.raises(UserError) as exc:
        noise_calibrate.run_worker("cuda:0", 0.02, True, timeout_s=120)
    assert exc.value.field == "--device" and "no CUDA device" in str(exc.value)


@pytest.mark.parametrize("args, flag", [(["--runs", "2"], "--runs"), (["--budget", "0"], "--budget")])
def test_noise_command_flags_are_checked(args, flag):
    res = CliRunner().invoke(app, ["noise", *args])
    assert res.exit_code == 2 and flag in res.output and "Traceback" not in res.output


def test_noise_command_writes_the_model(tmp_path, monkeypatch):
    worker, _ = _fake_worker(0.004, 0.06e-6)
    monkeypatch.setattr(noise_calibrate, "run_worker", worker)
    res = CliRunner().invoke(app, ["noise", "--runs", "5", "--out", str(tmp_path), "--json", str(tmp_path / "n.json")])
    assert res.exit_code == 0, res.output
    path = tmp_path / "calibration" / "nvidia-h200-132sm-140gib-noise.json"
    assert path.is_file() and json.loads((tmp_path / "n.json").read_text()) == json.loads(path.read_text())
    assert "spread between runs" in res.output and "upper bound of the fit" in res.output


def test_an_implementation_that_widens_the_noise_model_is_caught_by_the_tamper_guard(monkeypatch):
    """A wider run-to-run spread on its records would let a slower kernel pass the gate as SAME."""
    from solbench.noise_model import RunToRunModel as Model
    from solbench.worker import WorkerState

    state = WorkerState.open("cpu")
    monkeypatch.setattr(Model, "spread", lambda self, median_s: 0.5)
    assert "solbench.noise_model.RunToRunModel.spread" in state.guard.tampered()
    state.guard.restore()
    assert Model(0.01, 0.0, "given").spread(1e-3) == pytest.approx(0.01)
