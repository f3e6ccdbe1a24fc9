"""`solbench serve` as a user runs it: a real uvicorn process on loopback (started by the test on a free
port, stopped after), over HTTP and over TLS with a self-signed certificate the test makes; a bounded load
test; the server's memory over 10,000 requests; `solbench run --remote` against it; keys never in its logs.

The load test runs 64 clients for $SOLBENCH_SERVE_LOAD_S seconds (10 by default, so the CPU suite stays
short on a 2-core CI machine; the issue's 30 s is `SOLBENCH_SERVE_LOAD_S=30`). Its rate and latency
percentiles are printed and written to load.json in the test's tmp folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import torch
from safetensors.torch import load, save

from solbench.serve import auth, loadgen
from solbench.serve.localserver import LocalServer
from tests.tlscert import make_cert

REPO = Path(__file__).resolve().parent.parent
LOAD_S = float(os.environ.get("SOLBENCH_SERVE_LOAD_S", "10"))
RSS_REQUESTS = 10_000
RSS_TOLERANCE = 6 << 20      # growth allowed over 10,000 requests: a leak of 640 bytes a request shows


class LiveServer(LocalServer):
    """A CPU server on loopback with the test ops, ready when constructed."""

    def __init__(self, tmp: Path, keys: Path, *args: str, scheme: str = "http", verify: Any = True):
        log = tmp / f"server-{len(list(tmp.glob('server-*.log')))}.log"
        super().__init__(["--device", "cpu", "--api-keys", str(keys), "--out", str(tmp / "results"), "--test-ops",
                          *args], log=log, scheme=scheme, verify=verify, cwd=tmp)
        try:
            self.wait_ready(180)
        except RuntimeError:
            self.stop()
            raise

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("keys")
    path = folder / "keys.txt"
    ci = subprocess.run([sys.executable, "-m", "solbench", "serve", "--api-keys", str(path), "--add-key", "ci"],
                        capture_output=True, text=True, cwd=folder, check=True).stdout.strip()
    slow = auth.new_key()
    with path.open("a") as f:
        f.write(f"slow sha256:{auth.hash_key(slow).hex()} rate=3/minute\n")
    return {"path": path, "ci": ci, "slow": slow, "wrong": "sbk_wrong-key-that-must-never-be-logged"}


@pytest.fixture(scope="module")
def live(tmp_path_factory, keys) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("live")
    from tests import cheats

    cheats.seed_cpu_peaks(tmp / "results")
    srv = LiveServer(tmp, keys["path"], "--rate", "100000/second", "--max-body", "4MiB", "--allow", "127.0.0.1/32")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tls(tmp_path_factory, keys) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("tls")
    from tests import cheats

    cheats.seed_cpu_peaks(tmp / "results")
    cert, key = make_cert(tmp)
    srv = LiveServer(tmp, keys["path"], "--tls-cert", str(cert), "--tls-key", str(key), scheme="https",
                     verify=ssl.create_default_context(cafile=str(cert)))
    srv.cert = cert
    yield srv
    srv.stop()


def auth_headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def st(**tensors: torch.Tensor) -> bytes:
    return save(tensors)


# ---------------------------------------------------------------- endpoints and error codes over HTTP

def test_every_endpoint_over_real_http(live: LiveServer, keys: dict[str, Any]):
    h = auth_headers(keys["ci"])
    with httpx.Client(base_url=live.url, timeout=60) as c:
        assert c.get("/healthz").json() == {"ok": True}
        assert c.get("/readyz").json()["ready"] is True
        assert "softmax" in {o["name"] for o in c.get("/v1/ops", headers=h).json()["ops"]}
        x = torch.randn(32, 128)
        r = c.post("/v1/ops/softmax", content=st(x=x), headers=h)
        assert r.status_code == 200, r.text
        torch.testing.assert_close(load(r.content)["y"], torch.softmax(x, -1))
        r = c.post("/v1/ops/softmax", json={"inputs": {"x": [[1.0, 1.0]]}}, headers=h)
        assert r.json()["outputs"]["y"]["data"] == [[0.5, 0.5]]
        assert "solbench_requests_total" in c.get("/metrics", headers=h).text


def test_every_error_code_over_real_http(live: LiveServer, keys: dict[str, Any]):
    h = auth_headers(keys["ci"])
    small = st(x=torch.randn(4, 4))
    with httpx.Client(base_url=live.url, timeout=60) as c:
        assert c.post("/v1/ops/softmax", content=small).status_code == 401
        assert c.post("/v1/ops/softmax", content=small, headers=auth_headers(keys["wrong"])).status_code == 401
        assert c.post("/v1/ops/nope", content=small, headers=h).status_code == 404
        r = c.post("/v1/ops/softmax", content=st(x=torch.randn(1200, 1024)), headers=h)    # 4.9 MB > 4 MiB
        assert r.status_code == 413 and r.json()["field"] == "body"
        r = c.post("/v1/ops/softmax", content=st(x=torch.randn(2, 3, 4)), headers=h)
        assert r.status_code == 422 and r.json()["field"] == "inputs.x.shape"
        codes = [c.post("/v1/ops/softmax", content=small, headers=auth_headers(keys["slow"])).status_code
                 for _ in range(4)]
        assert codes[:3] == [200, 200, 200] and codes[3] == 429
        r = c.post("/v1/ops/test_raise", content=st(x=torch.randn(16)), headers=h)
        assert r.status_code == 500 and "always raises" in r.json()["error"]
        assert c.post("/v1/ops/softmax", content=small, headers=h).status_code == 200
        r = c.post("/v1/ops/test_fault", content=st(x=torch.randn(16)), headers=h)
        assert r.status_code == 500 and "crashed" in r.json()["error"]
        assert c.post("/v1/ops/softmax", content=small, headers=h).status_code == 200
        assert c.get("/readyz").json()["restarts"] >= 1
    # 403: the server allows 127.0.0.1/32 only; this client connects from 127.0.0.2
    with httpx.Client(base_url=live.url, transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as c:
        r = c.get("/v1/ops", headers=h)
        assert r.status_code == 403 and "127.0.0.2" in r.json()["error"]


def test_503_when_the_queue_is_full_over_real_http(live: LiveServer, keys: dict[str, Any]):
    async def go() -> list[int]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=live.url, headers=auth_headers(keys["ci"]), limits=limits,
                                     timeout=120) as c:
            rs = await asyncio.gather(*[c.post("/v1/ops/test_sleep", content=st(x=torch.randn(16)),
                                               params={"kwargs": '{"ms": 100}'}) for _ in range(100)])
        return [r.status_code for r in rs]

    codes = asyncio.run(go())
    assert set(codes) == {200, 503} and codes.count(503) >= 20, sorted(codes)   # 64 wait, 2 run: the rest 503


# ---------------------------------------------------------------- TLS

def test_tls_with_a_self_signed_certificate(tls: LiveServer, keys: dict[str, Any]):
    x = torch.randn(8, 16)
    with httpx.Client(base_url=tls.url, verify=tls.verify, timeout=60) as c:
        assert c.get("/healthz").json() == {"ok": True}
        r = c.post("/v1/ops/softmax", content=st(x=x), headers=auth_headers(keys["ci"]))
        assert r.status_code == 200
        torch.testing.assert_close(load(r.content)["y"], torch.softmax(x, -1))
    with pytest.raises(httpx.ConnectError):                  # not trusted without the certificate
        httpx.get(f"{tls.url}/healthz", timeout=10)
    with pytest.raises(httpx.HTTPError):                     # no plain HTTP on the TLS port
        httpx.get(f"http://127.0.0.1:{tls.port}/healthz", timeout=10)


def test_remote_run_from_a_machine_without_a_gpu(tls: LiveServer, keys: dict[str, Any], tmp_path: Path):
    env = {**os.environ, "SOLBENCH_API_KEY": keys["ci"], "SSL_CERT_FILE": str(tls.cert)}
    out = tmp_path / "pr.json"
    cmd = [sys.executable, "-m", "solbench", "run", "--remote", tls.url, "--ops", "add", "--quick", "--dtypes",
           "float32", "--impls", "eager", "--budget", "0.1", "--min-samples", "3", "--json", str(out),
           "--out", str(tmp_path / "results")]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "add" in res.stdout and "results:" in res.stdout and "eager" in res.stdout
    data = json.loads(out.read_text())
    assert data["schema"] == "solbench.results/1" and data["env"]["device_kind"] == "cpu"
    assert any(r["op"] == "add" and r["status"] == "ok" for r in data["records"])
    assert list((tmp_path / "results").glob("*.json"))          # the server's file, saved as it came

    bad = subprocess.run(cmd[:-4] + ["--ops", "no_such_op"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "--ops" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    wrong = subprocess.run(cmd, capture_output=True, text=True, env={**env, "SOLBENCH_API_KEY": keys["wrong"]},
                           timeout=120)
    assert wrong.returncode == 2 and "SOLBENCH_API_KEY" in wrong.stderr and "Traceback" not in wrong.stderr
    local = subprocess.run(cmd + ["--device", "cpu"], capture_output=True, text=True, env=env, timeout=120)
    assert local.returncode == 2 and "--device" in local.stderr


# ---------------------------------------------------------------- load and memory

def _mix() -> tuple[tuple[loadgen.Request, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    cases = {
        "softmax 256x1024": ("softmax", {"x": torch.randn(256, 1024, generator=g)},
                             lambda t: torch.softmax(t["x"], -1)),
        "add 128x256": ("add", {"a": torch.randn(128, 256, generator=g), "b": torch.randn(128, 256, generator=g)},
                        lambda t: t["a"] + t["b"]),
        "gelu 64x1024 bf16": ("gelu", {"x": torch.randn(64, 1024, generator=g).bfloat16()},
                              lambda t: torch.nn.functional.gelu(t["x"])),
        "row_sum 512x512": ("row_sum", {"x": torch.randn(512, 512, generator=g)}, lambda t: t["x"].sum(-1)),
    }
    mix = tuple(loadgen.safetensors_request(op, tensors, name) for name, (op, tensors, _) in cases.items())
    return mix, {name: (tensors, ref) for name, (_, tensors, ref) in cases.items()}


def test_load_64_clients(live: LiveServer, keys: dict[str, Any], tmp_path: Path):
    mix, refs = _mix()
    plan = loadgen.Plan(live.url, mix, clients=64, seconds=LOAD_S, procs=1, key=keys["ci"])
    plan, replies = loadgen.warm_up(plan)
    for name, (tensors, ref) in refs.items():                    # the answers are right, not just fast
        got = next(iter(load(replies[name]).values()))
        want = ref(tensors)
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2 if got.dtype == torch.bfloat16 else 1e-4,
                                   rtol=1.6e-2 if got.dtype == torch.bfloat16 else 1e-4)
    report = loadgen.run(plan)
    (tmp_path / "load.json").write_text(json.dumps(report.to_json(), indent=2))
    print(f"\nload: 64 clients x {LOAD_S:g} s: {report.requests} requests, {report.rate:,.0f}/s, latency p50 "
          f"{report.latency_ms['p50']:.1f} ms p99 {report.latency_ms['p99']:.1f} ms, statuses {report.statuses} "
          f"({tmp_path / 'load.json'})")
    assert report.unexpected == 0, report.errors
    assert report.requests >= 64 and report.statuses == {"200": report.requests}


def test_server_memory_flat_over_10000_requests(live: LiveServer, keys: dict[str, Any], tmp_path: Path):
    tiny = (loadgen.safetensors_request("add", {"a": torch.randn(8, 8), "b": torch.randn(8, 8)}),
            loadgen.safetensors_request("softmax", {"x": torch.randn(4, 16)}))
    plan = loadgen.Plan(live.url, tiny, clients=16, seconds=600, procs=1, key=keys["ci"])
    plan, _ = loadgen.warm_up(plan)
    warm = loadgen.run(loadgen.Plan(**{**loadgen.asdict_shallow(plan), "max_requests": 1000}))
    assert warm.unexpected == 0, warm.errors
    before = live.rss()
    report = loadgen.run(loadgen.Plan(**{**loadgen.asdict_shallow(plan), "max_requests": RSS_REQUESTS}))
    after = live.rss()
    growth = after - before
    (tmp_path / "rss.json").write_text(json.dumps({"before": before, "after": after, "growth": growth,
                                                   "requests": report.requests, "tolerance": RSS_TOLERANCE}))
    print(f"\nserver RSS over {report.requests} requests: {before / 2**20:.1f} -> {after / 2**20:.1f} MiB "
          f"({growth / 2**20:+.2f} MiB; allowed {RSS_TOLERANCE / 2**20:.0f} MiB)")
    assert report.unexpected == 0 and report.requests == RSS_REQUESTS, report.errors
    assert growth <= RSS_TOLERANCE


# ---------------------------------------------------------------- logs

def test_keys_never_appear_in_server_logs(live: LiveServer, tls: LiveServer, keys: dict[str, Any]):
    text = live.log.read_text() + tls.log.read_text()
    assert '"POST /v1/ops/softmax HTTP/1.1" 401' in text           # the rejected requests are in the log...
    assert "401: a key the server does not know" in text
    for secret in (keys["ci"], keys["slow"], keys["wrong"]):
        assert secret not in text                                   # ...but never a key


def test_a_stopped_server_logs_no_traceback(tmp_path, keys: dict[str, Any]):
    # Ctrl-C (SIGINT to the process group, as LocalServer.stop sends it) reached the worker too, which
    # printed a KeyboardInterrupt traceback into the server's log on every shutdown.
    from tests import cheats

    cheats.seed_cpu_peaks(tmp_path / "results")
    srv = LiveServer(tmp_path, keys["path"])
    srv.stop()
    text = srv.log.read_text()
    assert "Finished server process" in text and "Traceback" not in text, text[-2000:]
