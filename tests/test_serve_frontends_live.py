"""`solbench serve --frontends 2` as a user runs it: real uvicorn processes on one loopback port, asked
over fresh connections (so the kernel spreads them over both front ends). Both answer, and answer right;
one rate budget per key; a run queued through one is polled and fetched through either; a front end that
dies is replaced; a stop leaves no process and no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import torch
from safetensors.torch import load, save

from solbench.serve import auth
from solbench.serve.localserver import LocalServer, children

FRESH = 20          # fresh connections: all on one of two front ends by chance has odds 2^-19


class Frontends(LocalServer):
    def __init__(self, tmp: Path, keys: Path, *args: str):
        log = tmp / f"server-{len(list(tmp.glob('server-*.log')))}.log"
        super().__init__(["--device", "cpu", "--api-keys", str(keys), "--out", str(tmp / "results"), "--test-ops",
                          "--frontends", "2", *args], log=log, cwd=tmp)
        try:
            self.ready = self.wait_ready(180)
        except RuntimeError:
            self.stop()
            raise

    def every_pid(self) -> list[int]:
        """The supervisor, both front ends, and every process under them."""
        pids = [self.proc.pid]
        for pid in pids:
            pids.extend(p for p in children(pid) if p not in pids)
        return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """Those of `pids` still running after `seconds` (multiprocessing's resource tracker, a child of the
    supervisor, leaves a moment after it: it waits for the supervisor's end of its pipe to close)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and [p for p in pids if alive(p)]:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    ci, other, slow = auth.add_key(path, "ci"), auth.add_key(path, "other"), auth.new_key()
    with path.open("a") as f:
        f.write(f"slow sha256:{auth.hash_key(slow).hex()} rate=5/minute\n")
    return {"path": path, "ci": ci, "other": other, "slow": slow}


@pytest.fixture(scope="module")
def server(tmp_path_factory, keys) -> Iterator[Frontends]:
    tmp = tmp_path_factory.mktemp("frontends")
    from tests import cheats

    cheats.seed_cpu_peaks(tmp / "results")
    srv = Frontends(tmp, keys["path"], "--rate", "100000/second")
    yield srv
    srv.stop()


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_both_front_ends_answer_and_answer_right(server: Frontends, keys: dict[str, Any]):
    fronts = server.ready["frontends"]
    pids = {f["pid"] for f in fronts}
    assert len(fronts) == 2 and all(f["ready"] for f in fronts) and len(pids) == 2 and server.proc.pid not in pids
    answered = set()
    for i in range(FRESH):
        x = torch.randn(8, 32 + i)
        r = httpx.post(f"{server.url}/v1/ops/softmax", content=save({"x": x}), headers=h(keys["ci"]), timeout=60)
        assert r.status_code == 200, r.text
        torch.testing.assert_close(load(r.content)["y"], torch.softmax(x, -1))
        answered.add(r.headers["x-solbench-frontend"])
    assert answered == {"0", "1"}
    seen = {httpx.get(f"{server.url}/readyz", timeout=30).json()["pid"] for _ in range(FRESH)}
    assert seen == pids                                           # /readyz speaks for the process answering
    time.sleep(0.3)                                               # the front ends publish every 0.1 s
    total = httpx.get(f"{server.url}/readyz", timeout=30).json()
    assert sum(f["served"] for f in total["frontends"]) >= FRESH
    metrics = httpx.get(f"{server.url}/metrics", headers=h(keys["ci"]), timeout=30).text
    assert 'solbench_frontend{frontend="' in metrics and "solbench_requests_total" in metrics


def test_the_rate_limit_is_one_budget_across_front_ends(server: Frontends, keys: dict[str, Any]):
    small = save({"x": torch.randn(4, 4)})
    codes, fronts = [], set()
    for _ in range(15):
        r = httpx.post(f"{server.url}/v1/ops/softmax", content=small, headers=h(keys["slow"]), timeout=60)
        codes.append(r.status_code)
        fronts.add(r.headers.get("x-solbench-frontend"))
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1 and "5/minute" in r.json()["error"]
    assert codes == [200] * 5 + [429] * 10, codes                 # 5 a minute for the server, not 5 per process
    assert fronts == {"0", "1"}


def test_a_run_queued_on_one_front_end_is_polled_and_fetched_on_any(server: Frontends, keys: dict[str, Any]):
    r = httpx.post(f"{server.url}/v1/runs", json={"ops": "add", "quick": True, "dtypes": "float32",
                                                   "impls": "eager", "budget": 0.1, "min_samples": 3},
                   headers=h(keys["ci"]), timeout=120)
    assert r.status_code == 202, r.text
    job = r.json()
    fronts = set()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        s = httpx.get(f"{server.url}/v1/runs/{job['id']}", headers=h(keys["ci"]), timeout=30)
        assert s.status_code == 200, s.text
        fronts.add(s.headers["x-solbench-frontend"])
        if s.json()["state"] in ("done", "failed"):
            break
        time.sleep(0.2)
    assert s.json()["state"] == "done", s.json()
    for _ in range(FRESH):
        res = httpx.get(f"{server.url}/v1/runs/{job['id']}/results", headers=h(keys["ci"]), timeout=30)
        assert res.status_code == 200, res.text
        fronts.add(res.headers["x-solbench-frontend"])
    assert fronts == {"0", "1"}
    data = res.json()
    assert data["env"]["serve"]["run"] == job["id"] and "op_requests_during_run" in data["env"]["serve"]
    assert any(x["op"] == "add" and x["impl"] == "eager" and x["status"] == "ok" for x in data["records"])
    hidden = {httpx.get(f"{server.url}/v1/runs/{job['id']}", headers=h(keys["other"]), timeout=30).status_code
              for _ in range(6)}
    assert hidden == {404}                                        # another key's run, on either front end
    assert (server.log.parent / "results" / "runs" / f"{job['id']}.json").is_file()


def test_a_dead_front_end_is_replaced(server: Frontends, keys: dict[str, Any]):
    old = {f["index"]: f["pid"] for f in server.ready["frontends"]}
    os.kill(old[1], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        fronts = httpx.get(f"{server.url}/readyz", timeout=30).json()["frontends"]
        if fronts[1]["pid"] != old[1] and fronts[1]["ready"]:
            break
        time.sleep(0.3)
    assert fronts[1]["pid"] != old[1] and fronts[1]["ready"] and fronts[0]["pid"] == old[0], fronts
    codes = {httpx.post(f"{server.url}/v1/ops/softmax", content=save({"x": torch.randn(4, 4)}),
                        headers=h(keys["ci"]), timeout=60).status_code for _ in range(10)}
    assert codes == {200}
    assert "front end 1" in server.log.read_text() and "starting it again" in server.log.read_text()


def test_stopping_leaves_no_process_and_no_traceback(server: Frontends):
    pids = server.every_pid()
    assert len(pids) >= 5, pids                                   # supervisor, 2 front ends, 2 workers
    server.stop()                                                 # SIGINT to the group, as Ctrl-C
    assert not gone_within(pids, 10)
    text = server.log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert text.count("Finished server process") >= 2 and "all 2 front ends stopped" in text


def test_sigterm_to_the_supervisor_alone_stops_everything(tmp_path, keys: dict[str, Any]):
    srv = Frontends(tmp_path, keys["path"])
    try:
        pids = srv.every_pid()
        os.kill(srv.proc.pid, signal.SIGTERM)                     # a service manager stopping the main process
        srv.proc.wait(60)
        assert not gone_within(pids, 10)
        text = srv.log.read_text()
        assert srv.proc.returncode == 0 and "Traceback" not in text and "all 2 front ends stopped" in text, text
    finally:
        srv.stop()


def test_a_port_in_use_is_one_clear_error_even_to_a_reuseport_holder(tmp_path):
    # Held as another `solbench serve --frontends` holds it (SO_REUSEPORT): the kernel would let the new
    # server's sockets join it and take half its connections, were it not refused.
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "solbench", "serve", "--device", "cpu", "--frontends", "2",
                              "--port", str(port), "--out", str(tmp_path)], capture_output=True, text=True,
                             timeout=120)
    assert res.returncode == 2 and "--port" in res.stderr + res.stdout, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
