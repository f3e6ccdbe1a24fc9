"""Process isolation through the real CLI (subprocesses, one worker process per op), on the CPU.

A crashing implementation (SIGSEGV, os._exit) or one that outlives --timeout becomes one `error` record
with the reason; the op's other records measured before the crash survive, and the run goes on with the
next op. --fail-fast stops after the first failing op instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
from tests import cheats  # noqa: E402


def solbench(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": cheats.REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "solbench", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cheats.REPO)


def test_crash_and_hang_become_error_records_and_the_run_goes_on(tmp_path):
    out = tmp_path / "out"
    cheats.seed_cpu_peaks(out)
    specs = tmp_path / "specs"
    ops = [cheats.write_spec(specs, impl) for impl in ("crash_segfault", "hang")]
    ops.append(cheats.write_spec(specs, "honest", op="trap_after"))
    result_file = tmp_path / "r.json"
    proc = solbench(["run", "--ops", ",".join(ops), "--specs", str(specs), "--out", str(out),
                     "--json", str(result_file), "--device", "cpu", "--timeout", "5",
                     "--budget", "0.05", "--min-samples", "3", "--rse", "0.5"])
    assert proc.returncode == 1, proc.stdout + proc.stderr       # errors -> exit 1, not a traceback
    recs = {(r["op"], r["impl"]): r for r in json.loads(result_file.read_text())["records"]}
    for op in ops:
        # The baseline ran before the bad implementation and its measurement survived the crash.
        assert recs[(op, "honest")]["status"] == "ok", recs[(op, "honest")]["message"]
    segv = recs[("trap_crash_segfault", "cheat")]
    assert segv["status"] == "error" and "SIGSEGV" in segv["message"]
    hung = recs[("trap_hang", "cheat")]
    assert hung["status"] == "error" and "timed out" in hung["message"]
    assert recs[("trap_after", "cheat")]["status"] == "ok"       # the op after the hang still ran
    assert len([r for r in recs.values() if r["status"] == "error"]) == 2


def test_fail_fast_stops_after_the_first_failing_op(tmp_path):
    out = tmp_path / "out"
    cheats.seed_cpu_peaks(out)
    specs = tmp_path / "specs"
    first = cheats.write_spec(specs, "right_first_call_only", op="trap_a_first")
    second = cheats.write_spec(specs, "honest", op="trap_b_second")
    result_file = tmp_path / "r.json"
    proc = solbench(["run", "--ops", f"{first},{second}", "--specs", str(specs), "--out", str(out),
                     "--json", str(result_file), "--device", "cpu", "--no-isolate", "--fail-fast",
                     "--budget", "0.05", "--min-samples", "3", "--rse", "0.5"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    ops = {r["op"] for r in json.loads(result_file.read_text())["records"]}
    assert ops == {first}
