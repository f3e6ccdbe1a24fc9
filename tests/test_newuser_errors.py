"""Issue 11, silent or misleading (#5, #7-#11, #13): flags that were ignored, errors that did not name
the culprit, and files written the wrong way. Through the CLI, on the CPU."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from solbench.cli import app

pytest.importorskip("torch")
from tests import cheats  # noqa: E402

FAST = ["--no-isolate", "--budget", "0.05", "--min-samples", "3", "--rse", "0.5"]
NEGATE = {
    "op": "negate", "summary": "y = -x", "cases": [{"N": 64}], "dtypes": ["float32"],
    "inputs": {"x": {"shape": ["N"]}}, "outputs": {"y": {"shape": ["N"]}},
    "flops": "N", "bytes": "auto", "compute": "simt",
    "reference": "torch.neg", "baselines": {"eager": "torch.neg"},
    "tolerance": {"float32": {"atol": 1e-6, "rtol": 1e-6}},
}


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("results")
    cheats.seed_cpu_peaks(folder)        # no CPU measurement: these tests check messages, not speed
    return folder


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def spec_folder(tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    spec = {**NEGATE, **changes}
    (folder / f"{spec['op']}.yaml").write_text(yaml.safe_dump(spec))
    return folder


def one_line_error(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    for w in words:
        assert w in res.output, res.output


# ---------------------------------------------------------------- #5 flags that were ignored


def test_bad_peaks_are_refused_before_anything_runs(out_dir):
    one_line_error(invoke("run", "--ops", "add", "--peaks", "nosuch", "--out", str(out_dir)),
                   "field '--peaks'", "'nosuch'")
    one_line_error(invoke("env", "--peaks", "/nonexistent.yaml", "--out", str(out_dir)),
                   "field '--peaks'", "/nonexistent.yaml")


def test_cuda_only_flags_on_a_cpu_say_so_and_the_file_records_the_peaks_used(tmp_path, out_dir):
    path = tmp_path / "r.json"
    res = invoke("run", "--specs", str(spec_folder(tmp_path)), "--ops", "negate", "--peaks", "datasheet",
                 "--timer", "cupti", "--out", str(out_dir), "--json", str(path), *FAST)
    assert res.exit_code == 0, res.output
    assert "--timer cupti is a CUDA timer: this CPU run uses the wall clock" in res.output
    assert "--peaks datasheet: a CPU has no datasheet" in res.output
    data = json.loads(path.read_text())
    assert data["peaks"]["source"] == "cpu-measured"
    assert data["config"]["peaks"] == "cpu-measured" and data["config"]["peaks_requested"] == "datasheet"
    assert {r["timer"] for r in data["records"]} == {"wall"}


# ---------------------------------------------------------------- #7 a crash or hang listed first


CRASH_FIRST = """\
op: trap_crash_first
summary: the crashing implementation comes first; the others must still run
cases: [{M: 64, N: 48}]
dtypes: [float32]
inputs: {x: {shape: [M, N]}}
outputs: {y: {shape: [M, N]}}
flops: 2 * M * N
bytes: auto
compute: simt
reference: {fn: "tests.cheats:reference"}
baselines:
  honest: {fn: "tests.cheats:honest"}
impls:
  crash: {fn: "tests.cheats:crash_segfault"}
  second: {fn: "tests.cheats:honest"}
  hang: {fn: "tests.cheats:hang"}
  third: {fn: "tests.cheats:honest"}
tolerance: {float32: {atol: 1.0e-6, rtol: 1.0e-6}}
"""


def test_a_crash_listed_first_is_named_and_the_other_impls_still_run(tmp_path):
    out = tmp_path / "out"
    cheats.seed_cpu_peaks(out)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "trap_crash_first.yaml").write_text(CRASH_FIRST)
    result_file = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": cheats.REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "solbench", "run", "--ops", "trap_crash_first", "--specs", str(specs),
                           "--out", str(out), "--json", str(result_file), "--device", "cpu", "--timeout", "5",
                           "--budget", "0.05", "--min-samples", "3", "--rse", "0.5"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cheats.REPO)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = {r["impl"]: r for r in json.loads(result_file.read_text())["records"]}
    assert recs["crash"]["status"] == "error"
    assert recs["crash"]["message"].startswith("crashed: worker process killed by SIGSEGV while this ran")
    assert recs["hang"]["status"] == "error" and recs["hang"]["message"].startswith("timed out after 5 s")
    for name in ("honest", "second", "third"):          # a fresh worker ran everything after each culprit
        assert recs[name]["status"] == "ok", recs[name]["message"]


# ---------------------------------------------------------------- #8 input errors before running


def test_an_empty_shape_is_an_input_error(out_dir):
    one_line_error(invoke("run", "--ops", "add", "--shape", "M=0", "--out", str(out_dir)),
                   "field '--shape'", "M=0", "makes input 'a' empty")


def test_a_spec_case_with_an_empty_tensor_is_a_spec_error(tmp_path, out_dir):
    folder = spec_folder(tmp_path, cases=[{"N": 64}, {"N": 0}])
    one_line_error(invoke("run", "--specs", str(folder), "--ops", "negate", "--out", str(out_dir)),
                   "negate.yaml: field 'cases[1]'", "N=0 makes input 'x' empty")


def test_a_baseline_that_does_not_import_is_a_spec_error(tmp_path, out_dir):
    folder = spec_folder(tmp_path, baselines={"eager": "torch.no_such_function"})
    res = invoke("run", "--specs", str(folder), "--ops", "negate", "--out", str(out_dir), *FAST)
    one_line_error(res, f"{folder / 'negate.yaml'}: field 'baselines.eager.fn': cannot import 'torch.no_such_function'")
    assert "setting up" not in res.output


def test_a_tolerance_that_accepts_zeros_is_a_spec_error_through_a_worker_process_too(tmp_path, out_dir):
    folder = spec_folder(tmp_path, tolerance={"float32": {"atol": 10, "rtol": 0}})
    res = invoke("run", "--specs", str(folder), "--ops", "negate", "--out", str(out_dir), "--budget", "0.05")
    one_line_error(res, "negate.yaml: field 'tolerance.float32': atol=10, rtol=0 would accept an all-zero output")


# ---------------------------------------------------------------- #9 errors name the flag


@pytest.mark.parametrize("args, words", [
    (["--out", "/proc/nope"], ["field '--out'", "/proc/nope"]),
    (["--json", "/proc/nope/r.json"], ["field '--json'", "/proc/nope"]),
    (["--csv", "/proc/nope/r.csv"], ["field '--csv'"]),
    (["--device", "tpu"], ["field '--device'", "unknown device 'tpu'"]),
    (["--device", "cuda:0"], ["field '--device'", "torch sees no CUDA device"]),
])
def test_errors_name_the_flag(args, words, out_dir):
    argv = ["run", "--ops", "add", *args]
    if "--out" not in args:
        argv += ["--out", str(out_dir)]
    res = invoke(*argv)
    one_line_error(res, *words)
    assert "probing the device failed" not in res.output


def test_env_and_calibrate_name_their_out_flag():
    one_line_error(invoke("env", "--out", "/proc/nope"), "field '--out'")
    one_line_error(invoke("calibrate", "--device", "cpu", "--quick", "--out", "/proc/nope"), "field '--out'")


# ---------------------------------------------------------------- #10 names, empty lists, --version


def test_a_user_spec_replacing_a_builtin_op_says_so(tmp_path, out_dir):
    from solbench import spec

    folder = tmp_path / "mine"
    folder.mkdir()
    builtin = spec.load_all()["softmax"]
    (folder / "my_softmax.yaml").write_text(builtin.source_text)
    res = invoke("list", "--specs", str(folder))
    assert res.exit_code == 0, res.output
    assert f"op 'softmax' from {folder / 'my_softmax.yaml'} replaces the one in {builtin.path}" in res.output


def test_two_files_of_one_folder_defining_one_op_are_an_error(tmp_path):
    folder = spec_folder(tmp_path)
    (folder / "negate_again.yaml").write_text(yaml.safe_dump(NEGATE))
    one_line_error(invoke("list", "--specs", str(folder)), "negate_again.yaml: field 'op'", "also defined by")


def test_empty_ops_and_version(out_dir):
    one_line_error(invoke("run", "--ops", "", "--out", str(out_dir)), "field '--ops'", "no op named")
    one_line_error(invoke("run", "--ops", " , ", "--out", str(out_dir)), "field '--ops'")
    from solbench import __version__

    res = invoke("--version")
    assert res.exit_code == 0 and res.output.strip() == f"solbench {__version__}"


# ---------------------------------------------------------------- #11 a callable that does not import


def test_an_impl_that_does_not_import_says_which_module_and_pythonpath(tmp_path, out_dir):
    folder = spec_folder(tmp_path, impls={"mine": "no_such_module_i11:negate"})
    path = tmp_path / "r.json"
    res = invoke("run", "--specs", str(folder), "--ops", "negate", "--out", str(out_dir), "--json", str(path), *FAST)
    assert res.exit_code == 1, res.output
    recs = {r["impl"]: r for r in json.loads(path.read_text())["records"]}
    assert recs["eager"]["status"] == "ok"                # the op still ran
    msg = recs["mine"]["message"]
    assert recs["mine"]["status"] == "error"
    assert "module 'no_such_module_i11' could not be imported" in msg and "PYTHONPATH" in msg
    assert "setting up inputs/reference" not in msg


# ---------------------------------------------------------------- #13 results files honour the umask


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o007, 0o660), (0o077, 0o600)])
def test_results_files_honour_the_umask(tmp_path, umask, mode):
    from solbench.results import Run, write_run

    old = os.umask(umask)
    try:
        path = write_run(Run(env={"device": "x"}, peaks={}, config={}, records=[]), tmp_path / "r.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
