"""`solbench serve --frontends 2` as a user runs it: real uvicorn processes on one loopback port, asked
over fresh connections (so the kernel spreads them over both front ends). Both answer, and answer right;
one rate budget per key; a run queued through one is polled and fetched through either; one scrape of
/metrics counts both front ends' requests, whichever answers it; a faulting kernel replaces only its front
end's worker; a front end that dies is replaced and its counts stay; HTTPS through both; a stop leaves no
process and no traceback."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import torch
from safetensors.torch import load, save

from solbench.serve import auth
from solbench.serve.localserver import LocalServer, children
from tests.scrape import Scrape
from tests.tlscert import make_cert

FRESH = 20          # fresh connections: all on one of two front ends by chance has odds 2^-19


class Frontends(LocalServer):
    def __init__(self, tmp: Path, keys: Path, *args: str, scheme: str = "http", verify: Any = True):
        log = tmp / f"server-{len(list(tmp.glob('server-*.log')))}.log"
        super().__init__(["--device", "cpu", "--api-keys", str(keys), "--out", str(tmp / "results"), "--test-ops",
                          "--frontends", "2", *args], log=log, scheme=scheme, verify=verify, cwd=tmp)
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
    assert 'solbench_frontend_up{frontend="' in metrics and "solbench_requests_total" in metrics


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


def scrapes(server: Frontends, key: str) -> dict[int, Scrape]:
    """/metrics as each front end answers it."""
    return {i: Scrape.parse(r.text) for i, r in server.per_frontend("/metrics", headers=h(key)).items()}


# What a scrape must give for the whole server, whichever front end answers it.
WHOLE = ("solbench_requests_total", "solbench_request_seconds_count", "solbench_op_device_seconds_count",
         "solbench_errors_total", "solbench_worker_restarts", "solbench_queue_depth")


def test_one_scrape_counts_every_front_ends_requests(server: Frontends, keys: dict[str, Any]):
    before = scrapes(server, keys["ci"])
    assert [before[0].total(n) for n in WHOLE] == [before[1].total(n) for n in WHOLE]
    k, answered = 24, Counter()
    for _ in range(k):                                             # fresh connections: either front end
        r = httpx.post(f"{server.url}/v1/ops/add", content=save({"a": torch.ones(4, 4), "b": torch.ones(4, 4)}),
                       headers=h(keys["ci"]), timeout=60)
        assert r.status_code == 200, r.text
        answered[r.headers["x-solbench-frontend"]] += 1
    r = httpx.post(f"{server.url}/v1/ops/test_raise", content=save({"x": torch.randn(16)}), headers=h(keys["ci"]),
                   timeout=60)
    assert r.status_code == 500
    answered[r.headers["x-solbench-frontend"]] += 1
    assert set(answered) == {"0", "1"}, answered
    pids = {str(f["pid"]) for f in server.ready["frontends"]}
    for i, s in scrapes(server, keys["ci"]).items():

        def grew(name: str, **labels: str) -> float:
            return s.total(name, **labels) - before[0].total(name, **labels)

        assert grew("solbench_requests_total", route="ops", op="add", status="200") == k, i
        assert grew("solbench_requests_total") == k + 1
        assert grew("solbench_request_seconds_count", op="add") == k
        assert grew("solbench_request_seconds_bucket", op="add", le="+Inf") == k
        assert grew("solbench_op_device_seconds_count", op="add") == k
        assert grew("solbench_requests_total", op="test_raise", status="500") == 1
        assert grew("solbench_errors_total", kind="internal") == 1
        assert [grew("solbench_frontend_requests_total", frontend=f) for f in "01"] == [answered["0"], answered["1"]]
        assert {x.labels["pid"] for x in s.matching("solbench_frontend_up")} == pids


def test_the_queue_depth_is_every_front_ends(server: Frontends, keys: dict[str, Any]):
    # Three requests of a second each on each front end, on connections the kernel gave to that one.
    answers: list[httpx.Response] = []

    def send(c: httpx.Client) -> None:
        answers.append(c.post("/v1/ops/test_sleep", content=save({"x": torch.randn(16)}),
                              params={"kwargs": '{"ms": 1000}'}))

    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(server.client_on(f, headers=h(keys["ci"]), timeout=60)) for f in (0, 0, 0, 1, 1, 1)]
        threads = [threading.Thread(target=send, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        seen, own = [], []
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline and 6 not in seen:
            r = httpx.get(f"{server.url}/metrics", headers=h(keys["ci"]), timeout=30)
            seen.append(Scrape.parse(r.text).total("solbench_queue_depth", device="cpu"))
            own.append(httpx.get(f"{server.url}/readyz", timeout=30).json()["queue"])
            time.sleep(0.05)
        for t in threads:
            t.join(60)
    assert 6 in seen, seen                                         # 3 + 3: one front end alone never has 6
    assert max(own) <= 3, own
    assert sorted(r.headers["x-solbench-frontend"] for r in answers) == ["0"] * 3 + ["1"] * 3
    assert {r.status_code for r in answers} == {200}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and scrapes(server, keys["ci"])[0].total("solbench_queue_depth") != 0:
        time.sleep(0.1)
    assert [s.total("solbench_queue_depth") for s in scrapes(server, keys["ci"]).values()] == [0, 0]


def test_a_faulting_kernel_replaces_only_its_front_ends_worker(server: Frontends, keys: dict[str, Any]):
    before = {i: r.json() for i, r in server.per_frontend("/readyz").items()}
    restarts = scrapes(server, keys["ci"])[0].total("solbench_worker_restarts")
    with server.client_on(1, headers=h(keys["ci"]), timeout=60) as c:
        r = c.post("/v1/ops/test_fault", content=save({"x": torch.randn(16)}))
        assert r.status_code == 500 and "crashed" in r.json()["error"] and r.headers["x-solbench-frontend"] == "1"
        after = [c.post("/v1/ops/softmax", content=save({"x": torch.randn(4, 4)})) for _ in range(10)]
    assert [(a.status_code, a.headers["x-solbench-frontend"]) for a in after] == [(200, "1")] * 10   # it recovered
    now = {i: r.json() for i, r in server.per_frontend("/readyz").items()}
    assert now[1]["restarts"] == before[1]["restarts"] + 1 and now[1]["worker_pids"] != before[1]["worker_pids"]
    assert now[0]["restarts"] == before[0]["restarts"] and now[0]["worker_pids"] == before[0]["worker_pids"]
    assert [s.total("solbench_worker_restarts", device="cpu") for s in scrapes(server, keys["ci"]).values()] == \
           [restarts + 1] * 2


def test_a_dead_front_end_is_replaced_and_its_counts_stay(server: Frontends, keys: dict[str, Any]):
    old = {f["index"]: f["pid"] for f in server.ready["frontends"]}
    counted = scrapes(server, keys["ci"])[0]
    os.kill(old[1], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        fronts = httpx.get(f"{server.url}/readyz", timeout=30).json()["frontends"]
        if fronts[1]["pid"] != old[1] and fronts[1]["ready"]:
            break
        time.sleep(0.3)
    assert fronts[1]["pid"] != old[1] and fronts[1]["ready"] and fronts[0]["pid"] == old[0], fronts
    names = (*WHOLE, "solbench_frontend_requests_total", "solbench_request_seconds_sum")
    for s in scrapes(server, keys["ci"]).values():                 # nothing the killed process counted is lost
        assert [s.total(n) for n in names] == [counted.total(n) for n in names]
        assert s.total("solbench_frontend_requests_total", frontend="1") > 0
        assert {x.labels["pid"] for x in s.matching("solbench_frontend_up")} == {str(old[0]), str(fronts[1]["pid"])}
    codes = {httpx.post(f"{server.url}/v1/ops/softmax", content=save({"x": torch.randn(4, 4)}),
                        headers=h(keys["ci"]), timeout=60).status_code for _ in range(10)}
    assert codes == {200}
    assert scrapes(server, keys["ci"])[1].total("solbench_requests_total") == counted.total("solbench_requests_total") + 10
    assert "front end 1" in server.log.read_text() and "starting it again" in server.log.read_text()


def test_stopping_leaves_no_process_and_no_traceback(server: Frontends):
    pids = server.every_pid()
    assert len(pids) >= 5, pids                                   # supervisor, 2 front ends, 2 workers
    server.stop()                                                 # SIGINT to the group, as Ctrl-C
    assert not gone_within(pids, 10)
    text = server.log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert text.count("Finished server process") >= 2 and "all 2 front ends stopped" in text


def test_tls_through_two_front_ends(tmp_path, keys: dict[str, Any]):
    cert, key = make_cert(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    srv = Frontends(tmp_path, keys["path"], "--tls-cert", str(cert), "--tls-key", str(key), scheme="https",
                    verify=trust)
    try:
        assert srv.url.startswith("https://")
        answered = set()
        for i in range(FRESH):                                     # fresh TLS connections: both front ends
            x = torch.randn(4, 8 + i)
            r = httpx.post(f"{srv.url}/v1/ops/softmax", content=save({"x": x}), headers=h(keys["ci"]), verify=trust,
                           timeout=60)
            assert r.status_code == 200, r.text
            torch.testing.assert_close(load(r.content)["y"], torch.softmax(x, -1))
            answered.add(r.headers["x-solbench-frontend"])
        assert answered == {"0", "1"}
        for s in scrapes(srv, keys["ci"]).values():               # over HTTPS, from each front end
            assert s.total("solbench_requests_total", op="softmax", status="200") == FRESH
        for _ in range(6):
            with pytest.raises(httpx.ConnectError):                # not trusted without the certificate
                httpx.get(f"{srv.url}/healthz", timeout=10)
            with pytest.raises(httpx.HTTPError):                   # no plain HTTP on the TLS port
                httpx.get(f"http://127.0.0.1:{srv.port}/healthz", timeout=10)
    finally:
        srv.stop()
    text = srv.log.read_text()
    assert f"front ends on https://127.0.0.1:{srv.port}" in text and "all 2 front ends stopped" in text
    assert "Traceback" not in text, text[-3000:]


def test_a_bad_certificate_with_front_ends_is_one_clear_error(tmp_path):
    cert, _ = make_cert(tmp_path)
    res = subprocess.run([sys.executable, "-m", "solbench", "serve", "--device", "cpu", "--frontends", "2",
                          "--tls-cert", str(cert), "--tls-key", str(cert), "--port", "0", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    out = res.stderr + res.stdout
    assert res.returncode == 2 and "--tls-key" in out and "is not a PEM private key" in out, out
    assert "Traceback" not in out and "front end 0" not in out and "exited" not in out    # no front end started


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
