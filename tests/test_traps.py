"""Every cheat in tests/cheats.py that can be shown on a CPU is caught, through the real CLI (in-process)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from solbench.cli import app  # noqa: E402
from tests import cheats  # noqa: E402

FAST = ["--device", "cpu", "--no-isolate", "--budget", "0.05", "--min-samples", "3", "--rse", "0.5"]


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("out")
    cheats.seed_cpu_peaks(d)
    return d


def run_trap(tmp_path, out_dir, impl: str, **spec_kw) -> dict:
    """Run spec trap_<impl> through `solbench run`; returns {(case, impl): record}."""
    specs = tmp_path / "specs"
    op = cheats.write_spec(specs, impl, **spec_kw)
    result_file = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["run", "--ops", op, "--specs", str(specs), "--out", str(out_dir),
                                   "--json", str(result_file), *FAST])
    assert res.exit_code in (0, 1), res.output
    return cheats.records_by_impl(result_file)


def only_case(recs: dict, impl: str = "cheat") -> dict:
    found = [r for (case, name), r in recs.items() if name == impl]
    assert len(found) == 1
    return found[0]


def test_honest_implementation_passes(tmp_path, out_dir):
    recs = run_trap(tmp_path, out_dir, "honest")
    for r in recs.values():
        assert r["status"] == "ok", r["message"]
        assert r["timer"] == "wall"
        assert r["time_s"]["median"] > 0 and "rse_target" in r["time_s"] and "reached_target" in r["time_s"]
        assert r["telemetry"]["enabled"] is False and "telemetry off" in r["telemetry"]["reason"]


@pytest.mark.parametrize("impl, expect", [
    ("cached_by_pointer", "rewritten in place"),
    ("cached_by_id", "rewritten in place"),
    ("cached_by_fingerprint", "scattered input elements"),
    ("lazy_output", "subclass"),
    ("mutates_input", "modified its inputs"),
    ("mutates_input_when_timed", "modified its inputs during the timed iterations"),
    ("right_first_call_only", "elements outside"),
    ("right_first_three_calls", "timed iterations gave wrong results"),
])
def test_cheat_fails_correctness(tmp_path, out_dir, impl, expect):
    recs = run_trap(tmp_path, out_dir, impl)
    r = only_case(recs)
    assert r["status"] == "failed", (r["status"], r["message"])
    assert expect in r["message"]
    assert r["time_s"] is None and r["sol"] is None          # never scored
    assert only_case(recs, "honest")["status"] == "ok"       # the baseline beside it is unaffected


def test_wrong_only_at_odd_sizes(tmp_path, out_dir):
    recs = run_trap(tmp_path, out_dir, "wrong_at_odd_sizes", cases="[{M: 64, N: 48}, {M: 33, N: 33}]")
    assert recs[("M=64,N=48", "cheat")]["status"] == "ok"
    odd = recs[("M=33,N=33", "cheat")]
    assert odd["status"] == "failed" and "elements outside" in odd["message"]


def test_patched_timer_is_invalid_and_restored(tmp_path, out_dir):
    real = time.perf_counter
    recs = run_trap(tmp_path, out_dir, "patches_perf_counter")
    r = only_case(recs)
    assert r["status"] == "invalid"
    assert "timer integrity" in r["message"] and "time.perf_counter" in r["message"]
    assert r["time_s"] is None
    assert time.perf_counter is real, "the harness must put the real clock back"


def test_faster_than_light_is_invalid(tmp_path, out_dir):
    # Declares 1e15 bytes per call: no honest timer can make that possible, so SOL > 1 must be flagged.
    recs = run_trap(tmp_path, out_dir, "honest", op="trap_ftl", nbytes="1.0e15 * M")
    for r in recs.values():
        assert r["status"] == "invalid" and "SOL" in r["message"] and r["sol"] > 1


def test_degenerate_inputs_are_refused():
    import torch

    from solbench.spec import parse_spec
    from solbench.inputs import make_inputs
    from solbench.job import Case

    raw = {"op": "c", "summary": "s", "cases": [{"M": 4, "N": 4}], "dtypes": ["float32"],
           "inputs": {"x": {"shape": ["M", "N"], "init": "randint", "low": 3, "high": 4}},
           "outputs": {"y": {"shape": ["M", "N"]}}, "flops": "M", "bytes": "auto", "compute": "simt",
           "reference": {"fn": "torch.neg"}, "baselines": {"e": {"fn": "torch.neg"}},
           "tolerance": {"float32": {"atol": 1e-6, "rtol": 1e-6}}}
    from pathlib import Path

    spec = parse_spec(raw, Path("c.yaml"))
    with pytest.raises(ValueError, match="constant"):
        make_inputs(spec, Case("c", {"M": 4, "N": 4}, "float32"), "cpu", 0)
    raw["inputs"]["x"] = {"shape": ["M", "N"], "scale": 1.0}
    spec = parse_spec(raw, Path("c.yaml"))
    (x,) = make_inputs(spec, Case("c", {"M": 512, "N": 512}, "float32"), "cpu", 0)
    assert bool((x != 0).all()) and float(x.std()) > 0.5
    assert x.dtype == torch.float32
