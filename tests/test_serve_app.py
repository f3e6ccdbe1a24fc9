"""Every endpoint and every error code of `solbench serve`, through httpx against the app (ASGI transport),
with a real CPU worker process behind it."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load, save

from solbench import spec as spec_mod
from solbench.cli.serve import make_run_config
from solbench.serve import auth, server
from solbench.serve.app import create_app

LOCAL = ("127.0.0.1", 40000)


class Api:
    """An app with its services started, and its keys."""

    def __init__(self, tmp: Path, **config: Any):
        keys = tmp / "keys.txt"
        self.key = auth.add_key(keys, "ci")
        self.other = auth.add_key(keys, "other")
        with keys.open("a") as f:                      # a key with its own (low) rate
            self.slow = auth.new_key()
            f.write(f"slow sha256:{auth.hash_key(self.slow).hex()} rate=5/minute\n")
        from tests import cheats

        cheats.seed_cpu_peaks(tmp)                     # runs score against generous CPU peaks, not measured ones
        cfg = server.ServeConfig(api_keys=keys, device="cpu", out_dir=tmp, test_ops=True, **config)
        self.services = server.build(cfg, spec_mod.load_all(), make_run_config("cpu", tmp))
        self.services.start()
        assert self.services.ops.wait_ready(120), self.services.ops.start_error
        self.app = create_app(self.services)

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}

    async def request(self, method: str, url: str, client: tuple[str, int] = LOCAL, **kw: Any) -> httpx.Response:
        transport = httpx.ASGITransport(app=self.app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
            return await c.request(method, url, **kw)

    def call(self, method: str, url: str, key: str | None = "", **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if key is not None:
            headers.update(self.headers(key or None))
        return asyncio.run(self.request(method, url, headers=headers, **kw))

    def many(self, n: int, url: str, key: str | None = None, **kw: Any) -> list[httpx.Response]:
        async def go() -> list[httpx.Response]:
            return await asyncio.gather(*[self.request("POST", url, headers=self.headers(key), **kw) for _ in range(n)])

        return asyncio.run(go())


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Api:
    a = Api(tmp_path_factory.mktemp("serve"), allow="127.0.0.0/8", max_body=1 << 20, op_timeout=30.0)
    yield a
    a.services.stop()


@pytest.fixture(scope="module")
def tight(tmp_path_factory) -> Api:
    """A server with a two-request queue and a short op timeout."""
    a = Api(tmp_path_factory.mktemp("tight"), queue=2, op_timeout=2.0)
    yield a
    a.services.stop()


def body(**tensors: torch.Tensor) -> bytes:
    return save(tensors)


def check_error(r: httpx.Response, status: int, field: str | None = None, text: str = "") -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    doc = r.json()
    assert doc["status"] == status and text in doc["error"], doc
    if field is not None:
        assert doc["field"] == field, doc
    return doc


# ---------------------------------------------------------------- health, metrics, listing

def test_health_and_readiness(api: Api):
    assert api.call("GET", "/healthz", key=None).json() == {"ok": True}
    r = api.call("GET", "/readyz?memory=1", key=None)
    doc = r.json()
    assert r.status_code == 200 and doc["ready"] is True and doc["device"] == "cpu" and doc["kind"] == "cpu"
    assert doc["worker"]["rss_bytes"] > 0 and doc["worker_pid"] > 0


def test_listing_ops(api: Api):
    doc = api.call("GET", "/v1/ops").json()
    ops = {o["name"]: o for o in doc["ops"]}
    assert doc["device"] == "cpu" and "softmax" in ops and "gemm" in ops and "test_raise" in ops
    assert ops["softmax"]["inputs"][0] == {"name": "x", "shape": ["M", "N"], "dtype": "the op's dtype"}
    assert ops["softmax"]["implementation"]["float32"] == "eager (baseline: torch.softmax)"


def test_metrics_need_a_key_and_count_requests(api: Api):
    api.call("POST", "/v1/ops/softmax", content=body(x=torch.randn(4, 8)))
    check_error(api.call("GET", "/metrics", key=None), 401)
    text = api.call("GET", "/metrics").text
    assert 'solbench_requests_total{op="softmax",route="ops",status="200"}' in text
    assert "solbench_queue_depth" in text and "solbench_request_seconds_bucket" in text


# ---------------------------------------------------------------- ops

def test_safetensors_round_trip_matches_torch(api: Api):
    x = torch.randn(16, 64).bfloat16()
    r = api.call("POST", "/v1/ops/softmax", content=body(x=x))
    assert r.status_code == 200, r.text
    y = load(r.content)["y"]
    assert y.dtype == torch.bfloat16 and y.shape == (16, 64)
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), atol=1e-2, rtol=1.6e-2)
    assert r.headers["x-solbench-impl"] == "eager" and r.headers["x-solbench-impl-kind"] == "baseline"
    assert r.headers["x-solbench-device"] == "cpu" and json.loads(r.headers["x-solbench-params"]) == {"M": 16, "N": 64}
    assert "device;dur=" in r.headers["server-timing"]


def test_two_inputs_and_a_fixed_shape_formula(api: Api):
    a, w = torch.randn(8, 32), torch.randn(16, 32)
    r = api.call("POST", "/v1/ops/gemm", content=body(a=a, w=w))
    assert r.status_code == 200, r.text
    torch.testing.assert_close(load(r.content)["c"], a @ w.T, atol=1e-4, rtol=1e-4)


def test_json_form_for_curl(api: Api):
    r = api.call("POST", "/v1/ops/softmax", json={"inputs": {"x": [[0.0, 0.0], [1.0, 1.0]]}})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["outputs"]["y"] == {"dtype": "float32", "shape": [2, 2], "data": [[0.5, 0.5], [0.5, 0.5]]}


def test_kwargs_in_a_header_or_the_query(api: Api):
    x = body(x=torch.randn(16))
    r = api.call("POST", "/v1/ops/test_sleep", content=x, headers={"X-Solbench-Kwargs": '{"ms": 1}'})
    assert r.status_code == 200 and json.loads(r.headers["x-solbench-params"]) == {"N": 16, "ms": 1}
    r = api.call("POST", "/v1/ops/test_sleep?kwargs=%7B%22ms%22%3A%202%7D", content=x)
    assert r.status_code == 200 and json.loads(r.headers["x-solbench-params"])["ms"] == 2


# ---------------------------------------------------------------- the error codes

def test_401_without_or_with_a_wrong_key(api: Api):
    x = body(x=torch.randn(2, 2))
    r = api.call("POST", "/v1/ops/softmax", key=None, content=x)
    check_error(r, 401, text="no key")
    assert r.headers["www-authenticate"] == "Bearer"
    check_error(api.call("POST", "/v1/ops/softmax", key="sbk_wrong", content=x), 401, text="does not know")
    check_error(api.call("GET", "/v1/ops", key=None, headers={"Authorization": "Basic abc"}), 401)


def test_403_outside_the_allowlist(api: Api):
    r = asyncio.run(api.request("GET", "/v1/ops", client=("10.1.2.3", 5000), headers=api.headers()))
    check_error(r, 403, text="10.1.2.3")
    r = asyncio.run(api.request("GET", "/healthz", client=("10.1.2.3", 5000)))
    check_error(r, 403)


def test_404s(api: Api):
    check_error(api.call("POST", "/v1/ops/no_such_op", content=b"x"), 404, "op", "no op 'no_such_op'")
    check_error(api.call("GET", "/v1/runs/abcdef"), 404, "run_id")
    check_error(api.call("GET", "/no/such/route"), 404)


def test_413_over_the_body_limit(api: Api):
    big = body(x=torch.randn(600, 1024))                  # 2.4 MB > the 1 MiB limit
    check_error(api.call("POST", "/v1/ops/softmax", content=big), 413, "body", "--max-body")

    async def chunked():                                   # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b"\0" * 65536

    check_error(api.call("POST", "/v1/ops/softmax", content=chunked()), 413, "body")


def test_422_names_the_field_and_the_value(api: Api):
    def post(op: str, **kw: Any) -> httpx.Response:
        return api.call("POST", f"/v1/ops/{op}", **kw)

    check_error(post("add", content=body(a=torch.randn(2, 2))), 422, "inputs.b", "missing")
    check_error(post("add", content=body(a=torch.randn(2, 2), b=torch.randn(2, 3))), 422, "inputs.b.shape[1]", "N = 3")
    check_error(post("softmax", content=body(x=torch.ones(2, 2, dtype=torch.int64))), 422, "inputs.x.dtype", "int64")
    check_error(post("softmax", content=b"definitely not safetensors"), 422, "body")
    check_error(post("softmax", content=body(x=torch.randn(2, 2)), headers={"X-Solbench-Kwargs": "{oops"}), 422,
                "kwargs")
    check_error(post("test_sleep", content=body(x=torch.randn(16))), 422, "kwargs.ms")
    check_error(post("softmax", json={"inputs": {"x": [[1, 2], [3]]}}), 422, "inputs.x", "rectangular")
    # tiny inputs, a product too large for this machine: refused before it is queued
    huge = body(a=torch.randn(200_000, 1).bfloat16(), w=torch.randn(200_000, 1).bfloat16())   # 80 GB out
    doc = check_error(post("gemm", content=huge), 422, "inputs", "of device memory")
    assert "--gpu-memory" in doc["error"]


def test_500_for_a_kernel_that_raises_and_the_server_carries_on(api: Api):
    x = body(x=torch.randn(16))
    check_error(api.call("POST", "/v1/ops/test_raise", content=x), 500, text="always raises")
    assert api.call("POST", "/v1/ops/softmax", content=body(x=torch.randn(2, 2))).status_code == 200


def test_a_crashed_worker_is_replaced(api: Api):
    before = api.services.ops.restarts
    pid = api.call("GET", "/readyz", key=None).json()["worker_pid"]
    check_error(api.call("POST", "/v1/ops/test_fault", content=body(x=torch.randn(16))), 500, text="SIGSEGV")
    r = api.call("POST", "/v1/ops/softmax", content=body(x=torch.randn(2, 2)))   # waits for the fresh worker
    assert r.status_code == 200, r.text
    ready = api.call("GET", "/readyz", key=None).json()
    assert ready["ready"] and ready["restarts"] == before + 1 and ready["worker_pid"] != pid


def test_requests_handed_ahead_to_a_crashing_worker_run_on_the_next(tmp_path):
    wide = Api(tmp_path, in_flight=4)
    try:
        assert wide.services.ops.window == 4

        async def go() -> list[httpx.Response]:
            fault = asyncio.create_task(wide.request("POST", "/v1/ops/test_fault", headers=wide.headers(),
                                                     content=body(x=torch.randn(16))))
            await asyncio.sleep(0.05)      # the fault is handed over first; these queue up behind it
            rest = [wide.request("POST", "/v1/ops/softmax", headers=wide.headers(), content=body(x=torch.randn(2, 2)))
                    for _ in range(4)]
            return [await fault, *await asyncio.gather(*rest)]
        fault, *rest = asyncio.run(go())
        check_error(fault, 500, text="SIGSEGV")
        assert [r.status_code for r in rest] == [200] * 4, [r.text for r in rest]
    finally:
        wide.services.stop()


def test_429_with_retry_after(tight: Api):
    x = body(x=torch.randn(2, 2))
    statuses = [tight.call("POST", "/v1/ops/softmax", key=tight.slow, content=x) for _ in range(6)]
    assert [r.status_code for r in statuses[:5]] == [200] * 5
    doc = check_error(statuses[5], 429, text="5/minute")
    assert 1 <= int(statuses[5].headers["retry-after"]) <= 60, doc
    assert tight.call("POST", "/v1/ops/softmax", key=tight.other, content=x).status_code == 200   # per key


def test_503_when_the_queue_is_full(tight: Api):
    rs = tight.many(8, "/v1/ops/test_sleep", content=body(x=torch.randn(16)), params={"kwargs": '{"ms": 400}'})
    codes = sorted(r.status_code for r in rs)
    assert 200 in codes and 503 in codes and set(codes) <= {200, 503}, codes
    full = next(r for r in rs if r.status_code == 503)
    check_error(full, 503, text="queue is full")
    assert full.headers["retry-after"] == "1"


def test_504_and_a_fresh_worker_after_an_op_overruns(tight: Api):
    r = tight.call("POST", "/v1/ops/test_sleep", content=body(x=torch.randn(16)), params={"kwargs": '{"ms": 20000}'})
    check_error(r, 504, text="--op-timeout")
    assert tight.call("POST", "/v1/ops/softmax", content=body(x=torch.randn(2, 2))).status_code == 200


# ---------------------------------------------------------------- runs

def test_run_requests_are_checked_like_the_command_line(api: Api):
    check_error(api.call("POST", "/v1/runs", json={"ops": "no_such_op"}), 422, "--ops", "unknown op")
    check_error(api.call("POST", "/v1/runs", json={"ops": "add", "rse": -1}), 422, "--rse")
    check_error(api.call("POST", "/v1/runs", json={"ops": "add", "timer": "sundial"}), 422, "--timer")
    check_error(api.call("POST", "/v1/runs", json={"ops": "add", "specs": "/etc"}), 422, "specs")
    check_error(api.call("POST", "/v1/runs", json={"ops": "add", "quick": "yes"}), 422, "quick")
    check_error(api.call("POST", "/v1/runs", content=b"{not json"), 422, "body")


def test_a_queued_run_end_to_end(api: Api):
    r = api.call("POST", "/v1/runs", json={"ops": "add", "quick": True, "dtypes": "float32", "impls": "eager",
                                           "budget": 0.1, "min_samples": 3})
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == f"/v1/runs/{job['id']}" and job["total"] >= 1
    early = api.call("GET", f"/v1/runs/{job['id']}/results")
    if early.status_code != 200:                         # still queued or running
        check_error(early, 409)
    check_error(api.call("GET", f"/v1/runs/{job['id']}", key=api.other), 404)   # another key's run is hidden
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = api.call("GET", f"/v1/runs/{job['id']}").json()
        if status["state"] in ("done", "failed"):
            break
        time.sleep(0.5)
    assert status["state"] == "done", status
    data = api.call("GET", f"/v1/runs/{job['id']}/results").json()
    assert data["schema"] == "solbench.results/1" and data["env"]["serve"]["run"] == job["id"]
    recs = [x for x in data["records"] if x["op"] == "add" and x["impl"] == "eager"]
    assert recs and all(x["status"] == "ok" and x["correct"] for x in recs)


# ---------------------------------------------------------------- logs

def test_keys_never_appear_in_logs(api: Api, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.DEBUG):
        api.call("POST", "/v1/ops/softmax", key="sbk_a-wrong-key-that-must-not-be-logged",
                 content=body(x=torch.randn(2, 2)))
        api.call("POST", "/v1/ops/softmax", content=body(x=torch.randn(2, 2)))
        api.call("POST", "/v1/ops/test_raise", content=body(x=torch.randn(16)))
    assert "401" in caplog.text                            # the rejection was logged...
    for secret in (api.key, api.other, "sbk_a-wrong-key-that-must-not-be-logged"):
        assert secret not in caplog.text                   # ...without the key


def test_two_workers_share_the_load_and_one_crash_costs_only_its_own(tmp_path):
    pool = Api(tmp_path, workers=2)
    try:
        ready = pool.call("GET", "/readyz", key=None).json()
        pids = ready["worker_pids"]
        assert len(pids) == 2 and len(set(pids)) == 2 and None not in pids, ready
        x = body(x=torch.randn(64, 256))
        assert [r.status_code for r in pool.many(24, "/v1/ops/softmax", content=x)] == [200] * 24
        assert all(m.served > 0 for m in pool.services.ops.members), [m.served for m in pool.services.ops.members]
        assert pool.call("GET", "/readyz", key=None).json()["served"] >= 24

        memory = pool.call("GET", "/readyz", key=None, params={"memory": 1}).json()["worker"]
        assert len(memory["workers"]) == 2 and memory["rss_bytes"] == sum(w["rss_bytes"] for w in memory["workers"])

        huge = body(a=torch.randn(200_000, 1).bfloat16(), w=torch.randn(200_000, 1).bfloat16())
        check_error(pool.call("POST", "/v1/ops/gemm", content=huge), 422, "inputs", "shared by 2 workers")

        check_error(pool.call("POST", "/v1/ops/test_fault", content=body(x=torch.randn(16))), 500, text="SIGSEGV")
        assert [r.status_code for r in pool.many(8, "/v1/ops/softmax", content=x)] == [200] * 8
        assert pool.services.ops.wait_ready(120)
        after = pool.call("GET", "/readyz", key=None).json()
        assert after["restarts"] == 1 and len(set(after["worker_pids"]) & set(pids)) == 1, (pids, after)
    finally:
        pool.services.stop()
