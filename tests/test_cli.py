"""The CLI end to end on the CPU, through typer's runner."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from solbench.cli import app

FAST = ["--no-isolate", "--budget", "0.1", "--min-samples", "3"]


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory) -> Path:
    # Generous ceilings instead of measuring this (possibly busy) CPU: these tests check the plumbing,
    # and a ceiling measured under load could turn a baseline 'invalid'. CPU measurement has its own tests.
    from tests import cheats

    folder = tmp_path_factory.mktemp("results")
    cheats.seed_cpu_peaks(folder)
    return folder


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_quick_gemm_attention_run_writes_a_complete_results_file(out_dir):
    path = out_dir / "out.json"
    res = invoke("run", "--ops", "gemm,attention", "--quick", "--json", str(path), "--out", str(out_dir), *FAST)
    assert res.exit_code == 0, res.output
    assert "CUDA implementations were SKIPPED" in res.output
    data = json.loads(path.read_text())
    assert data["schema"] == "solbench.results/1"
    assert data["env"]["device_kind"] == "cpu" and data["env"]["cuda_skipped"] is True
    assert data["peaks"]["source"] == "cpu-measured" and data["peaks"]["memory_bandwidth"] > 0
    records = data["records"]
    ok = [r for r in records if r["status"] == "ok"]
    assert {r["op"] for r in ok} == {"gemm", "attention"}
    for r in ok:
        for field in ("flops", "bytes", "t_sol_s", "bound", "time_s", "samples_s", "tflops", "gbps", "sol",
                      "mfu", "mbu", "speedup", "correct", "max_abs_err", "max_rel_err", "is_baseline"):
            assert r[field] is not None, field
        assert 0 < r["sol"] <= 1
        assert r["correct"] is True
        assert set(r["time_s"]) >= {"median", "mean", "min", "q1", "q3", "std", "n"}
        assert r["time_s"]["n"] == len(r["samples_s"])
        assert r["sol"] == pytest.approx(r["t_sol_s"] / r["time_s"]["median"])
    skipped = {(r["op"], r["impl"]) for r in records if r["status"] == "skipped"}
    assert ("attention", "flash") in skipped     # CUDA-only backends say they were skipped
    assert any(r["dtype"] == "float8_e4m3fn" and r["status"] == "skipped" for r in records)
    gemm = next(r for r in records if r["op"] == "gemm" and r["status"] != "skipped")
    assert gemm["flops"] == 2 * 256**3


def test_csv_output_and_shape_override(out_dir, tmp_path):
    csv = tmp_path / "r.csv"
    res = invoke("run", "--ops", "add", "--shape", "M=64,N=32", "--dtypes", "float32", "--impls", "eager",
                 "--csv", str(csv), "--out", str(out_dir), *FAST)
    assert res.exit_code == 0, res.output
    assert "M=64,N=32" in csv.read_text()


BAD_SPEC = {
    "op": "broken", "summary": "x", "cases": [{"N": 4}], "dtypes": ["float32"],
    "inputs": {"x": {"shape": ["N"]}}, "outputs": {"y": {"shape": ["N"]}},
    "flops": "N * oops", "bytes": "auto", "compute": "simt",
    "reference": "torch.neg", "baselines": {"eager": "torch.neg"},
    "tolerance": {"float32": {"atol": 0, "rtol": 0}},
}


def test_bad_formula_exits_2_naming_file_and_field(tmp_path):
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(BAD_SPEC))
    res = invoke("run", "--specs", str(tmp_path), "--ops", "broken")
    assert res.exit_code == 2
    assert "broken.yaml" in res.output and "field 'flops'" in res.output and "oops" in res.output
    assert "Traceback" not in res.output


def test_user_spec_folder_with_own_callable(tmp_path, out_dir):
    good = dict(BAD_SPEC, op="negate", flops="N")
    (tmp_path / "negate.yaml").write_text(yaml.safe_dump(good))
    res = invoke("run", "--specs", str(tmp_path), "--ops", "negate", "--out", str(out_dir), *FAST)
    assert res.exit_code == 0, res.output
    assert "negate" in res.output


@pytest.mark.parametrize("args, words", [
    (["run", "--ops", "nosuchop"], "unknown op 'nosuchop' (known:"),
    (["run", "--ops", "add", "--shape", "M=abc"], "field '--shape'"),
    (["run", "--ops", "add", "--shape", "Q=4"], "no selected op has parameter 'Q'"),
    (["run", "--ops", "add", "--dtypes", "float99"], "unknown dtype 'float99'"),
    (["run", "--ops", "gemm", "--dtypes", "float8_e4m3fn", "--device", "cpu"], "cannot run on"),
    (["run", "--ops", "add", "--impls", "nosuch"], "no selected op has an implementation named 'nosuch'"),
    (["run", "--ops", "add", "--device", "tpu"], "unknown device 'tpu'"),
    (["run", "--ops", "add", "--device", "cuda"], "torch sees no CUDA device"),
    (["show", "nosuchop"], "unknown op"),
])
def test_bad_input_exits_2_with_one_line(args, words, out_dir):
    res = invoke(*args, "--out", str(out_dir)) if args[0] == "run" else invoke(*args)
    assert res.exit_code == 2, res.output
    assert words in res.output
    assert "Traceback" not in res.output


def test_failing_implementation_is_recorded_and_exits_1(tmp_path, out_dir):
    wrong = dict(BAD_SPEC, op="negate", flops="N", baselines={"eager": "torch.neg"}, impls={"wrong": "torch.abs"})
    (tmp_path / "negate.yaml").write_text(yaml.safe_dump(wrong))
    path = tmp_path / "r.json"
    res = invoke("run", "--specs", str(tmp_path), "--ops", "negate", "--json", str(path), "--out", str(out_dir), *FAST)
    assert res.exit_code == 1
    recs = {r["impl"]: r for r in json.loads(path.read_text())["records"]}
    assert recs["wrong"]["status"] == "failed" and recs["wrong"]["time_s"] is None
    assert "elements outside" in recs["wrong"]["message"]
    assert recs["eager"]["status"] == "ok"


def test_too_loose_tolerance_is_refused(tmp_path, out_dir):
    """Issue 11 #8: a spec error before anything runs (exit 2, file and field named), not a per-record error."""
    loose = dict(BAD_SPEC, op="negate", flops="N", tolerance={"float32": {"atol": 100, "rtol": 0}})
    (tmp_path / "negate.yaml").write_text(yaml.safe_dump(loose))
    path = tmp_path / "r.json"
    res = invoke("run", "--specs", str(tmp_path), "--ops", "negate", "--json", str(path), "--out", str(out_dir), *FAST)
    assert res.exit_code == 2, res.output
    assert f"{tmp_path / 'negate.yaml'}: field 'tolerance.float32': atol=100, rtol=0 would accept an all-zero output" \
        in res.output
    assert "Tolerance(" not in res.output and not path.exists()


def test_list_show_env(out_dir):
    res = invoke("list")
    assert res.exit_code == 0 and "gemm" in res.output and "h200" in res.output
    from solbench import spec

    res = invoke("show", "attention")
    attention = spec.load_all()["attention"]
    assert res.exit_code == 0 and f"flops: {attention.flops.source}" in res.output
    assert " at 0x" not in res.output      # formula kwargs are shown as written, not as Python objects
    res = invoke("env", "--out", str(out_dir))
    assert res.exit_code == 0 and "cpu-measured" in res.output


def test_run_rejects_an_unknown_flush_mode_by_flag(tmp_path):
    from solbench.cli import app as cli_app

    res = CliRunner().invoke(cli_app, ["run", "--ops", "add", "--quick", "--flush", "clean", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "--flush" in res.output and "unknown flush mode 'clean' (use write, read, balanced)" in res.output
    assert "Traceback" not in res.output
