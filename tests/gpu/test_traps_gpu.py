"""Cheats that only a GPU can show: side streams, patched CUDA event timers, sticky CUDA errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from typer.testing import CliRunner  # noqa: E402

from solbench.cli import app  # noqa: E402
from tests import cheats  # noqa: E402

CASE = "[{M: 2048, N: 2048}]"


def run_trap(tmp_path, impl: str, *extra: str, cases: str = CASE) -> dict:
    specs = tmp_path / "specs"
    op = cheats.write_spec(specs, impl, cases=cases, cuda=True)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["run", "--ops", op, "--specs", str(specs), "--out", str(tmp_path),
                                   "--json", str(out), "--no-isolate", "--budget", "0.3", *extra])
    assert res.exit_code in (0, 1), res.output
    return cheats.records_by_impl(out)


def cheat_record(recs: dict) -> dict:
    (r,) = [r for (_, impl), r in recs.items() if impl == "cheat"]
    return r


def test_side_stream_work_is_invalid_under_events(tmp_path):
    r = cheat_record(run_trap(tmp_path, "side_stream"))
    assert r["status"] == "invalid", (r["status"], r["message"])
    assert "outside the timed window" in r["message"]


def test_side_stream_work_cannot_hide_from_the_graph_timer(tmp_path):
    r = cheat_record(run_trap(tmp_path, "side_stream", "--timer", "graph"))
    assert r["status"] in ("error", "invalid"), (r["status"], r["message"])


def test_patched_event_timer_is_invalid(tmp_path):
    real = torch.cuda.Event.elapsed_time
    r = cheat_record(run_trap(tmp_path, "patches_event_timer"))
    assert r["status"] == "invalid" and "torch.cuda.Event.elapsed_time" in r["message"]
    assert torch.cuda.Event.elapsed_time is real


@pytest.mark.parametrize("impl, expect", [("cached_by_pointer", "rewritten in place"),
                                          ("cached_by_fingerprint", "scattered input elements"),
                                          ("lazy_output", "subclass"),
                                          ("right_first_three_calls", "timed iterations gave wrong results")])
def test_caches_and_lazy_outputs_fail_on_gpu(tmp_path, impl, expect):
    r = cheat_record(run_trap(tmp_path, impl))
    assert r["status"] == "failed" and expect in r["message"], (r["status"], r["message"])


def test_sticky_cuda_error_fails_the_rest_of_the_op_clearly(tmp_path):
    pytest.importorskip("triton")
    specs = tmp_path / "specs"
    op = cheats.write_spec(specs, "illegal_memory_access", cases="[{M: 256, N: 256}, {M: 512, N: 512}]", cuda=True)
    op2 = cheats.write_spec(specs, "honest", op="trap_next", cuda=True)
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": cheats.REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "solbench", "run", "--ops", f"{op},{op2}", "--specs", str(specs),
                           "--out", str(tmp_path), "--json", str(out), "--budget", "0.2"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cheats.REPO)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = {(r["op"], r["case"], r["impl"]): r for r in json.loads(out.read_text())["records"]}
    first = recs[(op, "M=256,N=256", "cheat")]
    assert first["status"] == "error"
    later = recs[(op, "M=512,N=512", "honest")]
    # Either the worker saw the sticky error (clear "not run" message) or the worker died with it.
    assert later["status"] == "error" and ("CUDA context is unusable" in later["message"]
                                           or "worker" in later["message"]), later["message"]
    assert recs[("trap_next", "M=64,N=48", "cheat")]["status"] == "ok"   # a fresh worker for the next op
