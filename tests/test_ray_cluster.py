"""--executor ray on a real two-node Ray cluster on loopback, running CPU work units end to end.

The fixture starts `ray start --head` and a second `ray start --address` (separate temp folders, both
nodes on 127.0.0.x) and stops every process they started afterwards. The runs go through the real CLI,
as a user types them: the same record keys as the inline executor; an implementation that crashes its
worker costs its own record; one that kills the Ray worker running its unit is retried --retries times,
then its unit's records are errors and the run goes on; --resume measures only what is missing; a
driver killed mid-run and started again with --resume completes the run; --accelerators writes one
file per GPU model (fake accelerator types here) and `compare --metric sol` reads them.

Ray is in the `test` extra: without it this module fails, it is not skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import ray  # noqa: F401  (a missing Ray must fail this module, not skip it)

pytest.importorskip("torch")
from tests import cheats  # noqa: E402

HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"     # loopback: Ray would pick this machine's public address
START_TIMEOUT_S = 90
FAST = ["--budget", "0.05", "--min-samples", "3", "--rse", "0.5"]
MODELS = ("FAKEA", "FAKEB")


# ---------------------------------------------------------------- implementations the specs below use

def kill_ray_worker(x):
    """Kills the Ray worker whose task runs this unit (its worker process's parent): a lost worker."""
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    if parent.startswith(b"ray::"):        # never the driver or a test process
        os.kill(os.getppid(), signal.SIGKILL)
    return x * 2 + 1


def slow(x):
    """Right, and slow enough (0.3 s a call) that a driver can be killed between records."""
    time.sleep(0.3)
    return x * 2 + 1


def write_spec(folder: Path, op: str, fn: str, cases: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    text = cheats.SPEC.format(op=op, impl="PLACEHOLDER", cases=cases, bytes="auto", device="")
    (folder / f"{op}.yaml").write_text(text.replace("tests.cheats:PLACEHOLDER", fn))
    return op


# ---------------------------------------------------------------- the cluster

def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _descendants(pids: list[int]) -> list[int]:
    """Every live process below `pids` (Ray's workers start sessions of their own, so not one group)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stop(procs: list[subprocess.Popen]) -> None:
    pids = [p.pid for p in procs]
    for pid in pids + _descendants(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait(timeout=30)


def _ray_start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    ray_bin = Path(sys.executable).with_name("ray")
    cmd = [str(ray_bin) if ray_bin.exists() else shutil.which("ray") or "ray", "start", "--block",
           "--disable-usage-stats", *args]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_for(what: str, ready, procs: list[subprocess.Popen], logs: list[Path]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            _stop(procs)
            tail = "\n".join(log.read_text()[-2000:] for log in logs)
            pytest.fail(f"the Ray cluster did not come up ({what}):\n{tail}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster():
    # A short folder: Ray's socket paths must stay under the 107 characters a Unix socket allows.
    root = Path(tempfile.mkdtemp(prefix="sbray", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": cheats.REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "RAY_USAGE_STATS_ENABLED": "0"}
    port = _free_port(HEAD_IP)
    logs = [root / "head.log", root / "worker.log"]
    head = _ray_start(["--head", f"--port={port}", f"--node-ip-address={HEAD_IP}", "--num-cpus=2",
                       "--include-dashboard=false", f"--temp-dir={root / 'h'}",
                       f"--resources={json.dumps({'accelerator_type:' + MODELS[0]: 1})}"], logs[0], env)
    procs = [head]

    def head_up() -> bool:
        try:
            socket.create_connection((HEAD_IP, port), 0.5).close()
            return True
        except OSError:
            return False

    _wait_for("head", head_up, procs, logs)
    procs.append(_ray_start([f"--address={HEAD_IP}:{port}", f"--node-ip-address={WORKER_IP}", "--num-cpus=1",
                             f"--temp-dir={root / 'w'}",
                             f"--resources={json.dumps({'accelerator_type:' + MODELS[1]: 1})}"], logs[1], env))
    _wait_for("second node", lambda: "Ray runtime started" in logs[1].read_text(), procs, logs)
    try:
        yield f"{HEAD_IP}:{port}"
    finally:
        _stop(procs)
        shutil.rmtree(root, ignore_errors=True)


def solbench(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": cheats.REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "solbench", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cheats.REPO)


def seed_peaks(out: Path) -> None:
    """CPU ceilings for this process's thread count and for a Ray task's (Ray sets OMP_NUM_THREADS=1)."""
    import torch

    threads = torch.get_num_threads()
    cheats.seed_cpu_peaks(out)
    torch.set_num_threads(1)
    try:
        cheats.seed_cpu_peaks(out)
    finally:
        torch.set_num_threads(threads)


def records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["records"]


# ---------------------------------------------------------------- one sweep on the cluster, several checks

@pytest.fixture(scope="module")
def sweep(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("ray_sweep")
    out, specs = root / "out", root / "specs"
    seed_peaks(out)
    ops = [write_spec(specs, "ray_ok", "tests.cheats:honest", "[{M: 64, N: 48}, {M: 32, N: 16}]"),
           write_spec(specs, "ray_crash", "tests.cheats:crash_segfault", "[{M: 64, N: 48}, {M: 32, N: 16}]"),
           write_spec(specs, "ray_lost", "tests.test_ray_cluster:kill_ray_worker", "[{M: 64, N: 48}]")]
    path = root / "ray.json"
    proc = solbench(["run", "--ops", ",".join(ops), "--specs", str(specs), "--out", str(out), "--json", str(path),
                     "--executor", "ray", "--ray-address", cluster, "--retries", "1", *FAST])
    return dict(root=root, out=out, specs=specs, ops=ops, path=path, proc=proc)


def test_ray_run_gives_the_record_keys_of_the_inline_executor(sweep):
    assert sweep["proc"].returncode == 1, sweep["proc"].stdout + sweep["proc"].stderr   # errors -> exit 1
    inline = sweep["root"] / "inline.json"
    proc = solbench(["run", "--ops", "ray_ok", "--specs", str(sweep["specs"]), "--out", str(sweep["out"]),
                     "--json", str(inline), "--no-isolate", *FAST])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    on_ray = [(r["op"], r["case"], r["dtype"], r["impl"], r["status"]) for r in records(sweep["path"])
              if r["op"] == "ray_ok"]
    here = [(r["op"], r["case"], r["dtype"], r["impl"], r["status"]) for r in records(inline)]
    assert on_ray == here and {s for *_, s in here} == {"ok"}
    data = json.loads(sweep["path"].read_text())
    assert data["config"]["executor"] == "ray" and data["env"]["host"]
    assert all(r["device"] and r["device_fingerprint"] for r in data["records"] if r["op"] == "ray_ok")


def test_a_crashing_implementation_costs_only_its_own_record(sweep):
    recs = {(r["op"], r["case"], r["impl"]): r for r in records(sweep["path"])}
    for case in ("M=64,N=48", "M=32,N=16"):
        assert recs[("ray_crash", case, "honest")]["status"] == "ok"      # measured before the crash, kept
        crashed = recs[("ray_crash", case, "cheat")]
        assert crashed["status"] == "error" and "SIGSEGV" in crashed["message"]


def test_a_lost_ray_worker_is_retried_then_recorded_as_error_and_the_run_goes_on(sweep):
    lost = [r for r in records(sweep["path"]) if r["op"] == "ray_lost"]
    assert [r["impl"] for r in lost] == ["honest", "cheat"]
    for r in lost:
        assert r["status"] == "error" and "lost 2 times (retried 1)" in r["message"], r["message"]
    others = [r for r in records(sweep["path"]) if r["op"] != "ray_lost" and r["status"] == "error"]
    assert len(others) == 2                                              # only the two crashing calls


def test_resume_measures_only_what_is_missing_and_keeps_the_rest(sweep, cluster):
    partial = sweep["root"] / "partial.json"
    data = json.loads(sweep["path"].read_text())
    dropped = ("ray_ok", "M=32,N=16", "cheat")
    data["records"] = [r for r in data["records"] if (r["op"], r["case"], r["impl"]) != dropped]
    partial.write_text(json.dumps(data))
    before = {(r["op"], r["case"], r["impl"]): r["samples_s"] for r in data["records"]}
    proc = solbench(["run", "--ops", "ray_ok", "--specs", str(sweep["specs"]), "--out", str(sweep["out"]),
                     "--resume", str(partial), "--executor", "ray", "--ray-address", cluster, *FAST])
    assert proc.returncode == 1, proc.stdout + proc.stderr      # the kept error records of the other ops
    said = " ".join(proc.stdout.split())                      # rich wraps long lines
    assert "3 records reused" in said and "1 to measure" in said, proc.stdout
    after = {(r["op"], r["case"], r["impl"]): r for r in records(partial)}
    assert set(after) == set(before) | {dropped}
    assert after[dropped]["status"] == "ok" and after[dropped]["samples_s"]
    for key, samples in before.items():
        assert after[key]["samples_s"] == samples, key          # reused or kept, never measured again


def test_a_killed_driver_restarted_with_resume_completes_the_run(cluster, tmp_path):
    out, specs = tmp_path / "out", tmp_path / "specs"
    seed_peaks(out)
    cases = "[" + ", ".join(f"{{M: {8 * i}, N: 8}}" for i in range(1, 5)) + "]"
    op = write_spec(specs, "ray_slow", "tests.test_ray_cluster:slow", cases)
    path = tmp_path / "sweep.json"
    args = ["run", "--ops", op, "--specs", str(specs), "--out", str(out), "--executor", "ray",
            "--ray-address", cluster, *FAST]
    env = {**os.environ, "PYTHONPATH": cheats.REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    driver = subprocess.Popen([sys.executable, "-m", "solbench", *args, "--json", str(path)], cwd=cheats.REPO,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    try:
        while not (path.is_file() and records(path)):
            assert driver.poll() is None, "the driver ended before it wrote a record"
            assert time.monotonic() < deadline, "no record within 180 s"
            time.sleep(0.1)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    first = {(r["case"], r["impl"]): r["samples_s"] for r in records(path)}
    assert 0 < len(first) < 8, first.keys()
    proc = solbench(["run", *args[1:], "--resume", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    final = {(r["case"], r["impl"]): r for r in records(path)}
    assert len(final) == 8 and {r["status"] for r in final.values()} == {"ok"}
    for key, samples in first.items():
        assert final[key]["samples_s"] == samples, key


def test_accelerators_write_one_file_per_model_that_compare_reads(cluster, tmp_path):
    out, specs = tmp_path / "fleet", tmp_path / "specs"
    seed_peaks(out)
    op = write_spec(specs, "ray_fleet", "tests.cheats:honest", "[{M: 64, N: 48}]")
    proc = solbench(["run", "--ops", op, "--specs", str(specs), "--out", str(out), "--executor", "ray",
                     "--ray-address", cluster, "--accelerators", ",".join(MODELS), *FAST])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = [out / f"{m.lower()}.json" for m in MODELS]
    for f in files:
        assert [(r["impl"], r["status"]) for r in records(f)] == [("honest", "ok"), ("cheat", "ok")], f
        assert json.loads(f.read_text())["config"]["accelerators"] == [f.stem.upper()]
    report = tmp_path / "compare.json"
    cmp = solbench(["compare", "--metric", "sol", *map(str, files), "--fail-on", "missing,failed",
                    "--json", str(report)])
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    assert len(json.loads(report.read_text())["pairs"]) == 2


def test_an_accelerator_no_node_has_is_refused(cluster, tmp_path):
    proc = solbench(["run", "--ops", "add", "--quick", "--out", str(tmp_path), "--executor", "ray",
                     "--ray-address", cluster, "--accelerators", "H100"])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--accelerators" in proc.stderr and "FAKEA" in proc.stderr and "Traceback" not in proc.stderr
