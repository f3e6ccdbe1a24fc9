"""solbench serve's pure parts: request decoding and checking against specs, the op registry's choice of
implementation, keys, allowlist, rate and size limits, run requests. No server, no worker."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import time

import pytest
import torch
from safetensors.torch import save

from solbench import spec as spec_mod
from solbench.errors import UserError
from solbench.runrequest import RequestError, RunRequest
from solbench.serve import auth, httpclient, limits, loadgen, oplib, wire

SPECS = spec_mod.load_all()


def st(**tensors: torch.Tensor) -> bytes:
    return save(tensors)


def bind(op: str, body: bytes, kwargs: dict | None = None, kind: str = "cpu") -> wire.Bound:
    return wire.bind(SPECS[op], wire.decode_safetensors(body, kwargs or {}), kind, (9, 0) if kind == "cuda" else None)


def wire_error(fn, *args) -> wire.WireError:
    with pytest.raises(wire.WireError) as info:
        fn(*args)
    return info.value


# ---------------------------------------------------------------- decoding and binding

def test_softmax_binds_its_shape_and_dtype_from_the_tensor():
    b = bind("softmax", st(x=torch.randn(3, 5).bfloat16()))
    assert b.dtype == "bfloat16" and b.params == {"M": 3, "N": 5}
    assert b.outputs == {"y": ("bfloat16", (3, 5))}
    assert b.input_bytes == 30 and b.output_bytes == 30 and b.device_bytes == 90


def test_float32_input_is_a_float32_request_not_tfloat32():
    b = bind("gemm", st(a=torch.randn(4, 8), w=torch.randn(6, 8)))
    assert b.dtype == "float32" and b.params == {"M": 4, "N": 6, "K": 8}
    assert bind("gemm", st(a=torch.randn(4, 8), w=torch.randn(6, 8)), {"dtype": "tfloat32"}, "cuda").dtype == "tfloat32"


def test_shape_parameters_must_agree_across_inputs():
    e = wire_error(bind, "gemm", st(a=torch.randn(4, 8), w=torch.randn(6, 7)))
    assert e.field == "inputs.w.shape[1]" and "K = 7" in e.message and "K = 8" in e.message


def test_missing_extra_and_wrongly_typed_inputs_name_the_field():
    assert wire_error(bind, "add", st(a=torch.randn(2, 2))).field == "inputs.b"
    e = wire_error(bind, "add", st(a=torch.randn(2, 2), b=torch.randn(2, 2), c=torch.randn(2)))
    assert e.field == "inputs.c" and "has no input 'c'" in e.message
    e = wire_error(bind, "add", st(a=torch.randn(2, 2), b=torch.randn(2, 2).bfloat16()))
    assert e.field == "inputs.b.dtype" and "expected float32" in e.message and "bfloat16" in e.message
    e = wire_error(bind, "add", st(a=torch.ones(2, 2, dtype=torch.int32), b=torch.ones(2, 2, dtype=torch.int32)))
    assert e.field == "inputs.a.dtype" and "int32 is not one of" in e.message


def test_rank_and_formula_dimensions_are_checked():
    e = wire_error(bind, "softmax", st(x=torch.randn(2, 3, 4)))
    assert e.field == "inputs.x.shape" and "rank 2" in e.message
    # layernorm's w is [N]: a w of the wrong length is caught after M and N are bound from x
    e = wire_error(bind, "layernorm", st(x=torch.randn(4, 8), w=torch.randn(7), b=torch.randn(8)))
    assert e.field in ("inputs.w.shape", "inputs.w.shape[0]") and "7" in e.message


def test_switch_parameters_default_to_the_first_case_and_are_type_checked():
    inputs = {n: torch.randn(1, 2, 4, 8).bfloat16() for n in ("q", "k", "v")}
    spec = SPECS["attention"]
    req = wire.decode_safetensors(st(**inputs), {})
    if {t.name for t in spec.inputs} != set(inputs):
        pytest.skip("attention's inputs changed")
    b = wire.bind(spec, req, "cpu")
    assert b.params["causal"] is False
    b = wire.bind(spec, wire.decode_safetensors(st(**inputs), {"causal": True}), "cpu")
    assert b.params["causal"] is True
    e = wire_error(wire.bind, spec, wire.decode_safetensors(st(**inputs), {"causal": "yes"}), "cpu")
    assert e.field == "kwargs.causal"
    e = wire_error(wire.bind, spec, wire.decode_safetensors(st(**inputs), {"nonsense": 1}), "cpu")
    assert e.field == "kwargs.nonsense" and "no parameter" in e.message


def test_an_integer_parameter_not_in_any_input_shape_must_be_given():
    from solbench.serve import faults

    sleep = next(s for s in faults.fault_specs() if s.op == "test_sleep")
    req = wire.decode_safetensors(st(x=torch.randn(16)), {})
    e = wire_error(wire.bind, sleep, req, "cpu")
    assert e.field == "kwargs.ms" and "give it in the kwargs" in e.message
    ok = wire.bind(sleep, wire.decode_safetensors(st(x=torch.randn(16)), {"ms": 5}), "cpu")
    assert ok.params == {"N": 16, "ms": 5}


def test_fp8_is_refused_on_a_cpu_server():
    a, w = (torch.randn(4, 8).to(torch.float8_e4m3fn) for _ in range(2))
    e = wire_error(bind, "gemm", st(a=a, w=w))
    assert e.field == "dtype" and "needs a CUDA device" in e.message


def test_broken_safetensors_bodies_are_422s_not_crashes():
    good = st(x=torch.randn(2, 2))
    assert wire_error(wire.decode_safetensors, b"abc", {}).field == "body"
    assert "header length" in wire_error(wire.decode_safetensors, struct.pack("<Q", 10**9) + b"{}", {}).message
    assert wire_error(wire.decode_safetensors, struct.pack("<Q", 2) + b"[]", {}).field == "body"
    header = json.dumps({"x": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 16]}}).encode()
    e = wire_error(wire.decode_safetensors, struct.pack("<Q", len(header)) + header + b"\0" * 16, {})
    assert e.field == "inputs.x.data_offsets" and "needs 64" in e.message
    def one(entry: dict) -> wire.WireError:
        header = json.dumps({"x": entry}).encode()
        return wire_error(wire.decode_safetensors, struct.pack("<Q", len(header)) + header + b"\0" * 4, {})

    assert one({"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}).field == "inputs.x.dtype"
    assert "not a range" in one({"dtype": "F32", "shape": [1], "data_offsets": [0, 400]}).message
    assert wire.decode_safetensors(good, {}).tensors["x"].shape == (2, 2)


def test_json_form_shapes_limits_and_dtype():
    d = wire.decode_json(b'{"inputs": {"x": [[1, 2, 3], [4, 5, 6]]}}', {})
    b = wire.bind(SPECS["softmax"], d, "cpu")
    assert b.dtype == "float32" and b.params == {"M": 2, "N": 3} and d.values["x"] == [1, 2, 3, 4, 5, 6]
    d = wire.decode_json(b'{"inputs": {"x": [[1, 2]]}, "dtype": "bf16"}', {})
    assert wire.bind(SPECS["softmax"], d, "cpu").dtype == "bfloat16"
    assert wire_error(wire.decode_json, b'{"inputs": {"x": [[1, 2], [3]]}}', {}).field == "inputs.x"
    assert wire_error(wire.decode_json, b'{"inputs": {"x": [[1, "a"]]}}', {}).field == "inputs.x"
    assert wire_error(wire.decode_json, b'{"inputs": {"x": [1]}, "extra": 1}', {}).field == "extra"
    assert wire_error(wire.decode_json, b'{"inputs": {"x": [1]}, "dtype": "float7"}', {}).field == "kwargs.dtype"
    big = json.dumps({"inputs": {"x": [0.5] * (wire.JSON_MAX_ELEMENTS + 1)}}).encode()
    assert "send safetensors" in wire_error(wire.decode_json, big, {}).message
    assert wire_error(wire.decode_json, b"{nope", {}).field == "body"


def test_kwargs_must_be_a_json_object():
    assert wire.parse_kwargs('{"causal": true}', "kwargs") == {"causal": True}
    assert wire.parse_kwargs(None, "kwargs") == {}
    assert wire_error(wire.parse_kwargs, "[1]", "kwargs").field == "kwargs"
    assert wire_error(wire.parse_kwargs, "{", "kwargs").field == "kwargs"


def test_memory_budget_refuses_what_would_not_fit():
    b = bind("gemm", st(a=torch.randn(300_000, 1).bfloat16(), w=torch.randn(300_000, 1).bfloat16()))
    assert b.output_bytes == 300_000 ** 2 * 2         # tiny inputs, a 180 GB product
    budget = limits.MemoryBudget(10 << 30, "test budget")
    assert "more than the 10.0 GiB" in budget.refuse(b.device_bytes)
    assert budget.refuse(1 << 20) is None


def test_index_inputs_carry_their_range_for_the_worker_to_check():
    spec = SPECS.get("cross_entropy_rows")
    if spec is None:
        pytest.skip("no cross_entropy_rows spec")
    b = bind("cross_entropy_rows", st(logits=torch.randn(4, 10), target=torch.zeros(4, dtype=torch.int64)))
    assert b.ranges == {"target": (0, 10)}


def test_describe_lists_inputs_params_and_the_implementation():
    lib = oplib.build_library(SPECS)
    d = lib.get("softmax").describe("cuda", True)
    assert d["inputs"] == [{"name": "x", "shape": ["M", "N"], "dtype": "the op's dtype"}]
    assert d["params"]["M"]["from"] == "the input shapes"
    assert d["implementation"]["bfloat16"].startswith("cuda (impl: kernels_ext:softmax")
    assert lib.get("softmax").describe("cpu", False)["implementation"]["bfloat16"].startswith("eager (baseline")
    assert "test_raise" not in lib.ops and "test_raise" in oplib.build_library(SPECS, test_ops=True).ops


def test_the_choice_of_implementation():
    op = oplib.ServedOp(SPECS["gemm"])
    assert op.choose("bfloat16", "cuda").call.fn == "kernels_ext:gemm"            # `auto` first
    assert op.choose("float8_e4m3fn", "cuda").call.name == "fp8_wgmma"             # the one for fp8
    assert op.choose("bfloat16", "cpu").call.name == "eager" and op.choose("bfloat16", "cpu").kind == "baseline"
    fallback = op.choose("bfloat16", "cuda", library_ok=False)
    assert fallback.kind == "baseline" and "did not load" in fallback.note
    assert op.choose("tfloat32", "cuda").kind == "baseline"                        # no kernel for tf32


def test_the_worker_rebuilds_the_same_library_from_spec_text():
    lib = oplib.build_library(SPECS, test_ops=True)
    again = oplib.OpLibrary.from_sources(lib.sources())
    assert set(again.ops) == set(lib.ops)
    assert again.get("test_fault").test_only and not again.get("softmax").test_only


# ---------------------------------------------------------------- keys, allowlist, limits

def test_key_file_round_trip_and_constant_time_identify(tmp_path: Path):
    path = tmp_path / "keys.txt"
    k1 = auth.add_key(path, "ci")
    k2 = auth.add_key(path, "laptop")
    assert (path.stat().st_mode & 0o777) == 0o600
    text = path.read_text()
    assert k1 not in text and k2 not in text and auth.hash_key(k1).hex() in text
    ring = auth.KeyRing.load(path)
    assert ring.identify(k1).name == "ci" and ring.identify(k2).name == "laptop"
    assert ring.identify(k1 + "x") is None and ring.identify("") is None and ring.identify(None) is None
    with pytest.raises(UserError, match="already in the file"):
        auth.add_key(path, "ci")
    with pytest.raises(UserError, match="not a key name"):
        auth.add_key(path, "bad name")


def test_key_file_errors_never_echo_a_line(tmp_path: Path):
    path = tmp_path / "keys.txt"
    path.write_text("ci sbk_this-is-a-raw-key-pasted-by-mistake\n")
    with pytest.raises(UserError) as info:
        auth.KeyRing.load(path)
    assert "line 1" in str(info.value) and "pasted" not in str(info.value) and info.value.field == "--api-keys"
    path.write_text("# only a comment\n")
    with pytest.raises(UserError, match="holds no keys"):
        auth.KeyRing.load(path)
    digest = "0" * 64
    path.write_text(f"a sha256:{digest}\na sha256:{'1' * 64}\n")
    with pytest.raises(UserError, match="used twice"):
        auth.KeyRing.load(path)
    path.write_text(f"a sha256:{digest} rate=fast\n")
    with pytest.raises(UserError, match="not a rate"):
        auth.KeyRing.load(path)
    path.write_text(f"a sha256:{digest} rate=5/minute\n")
    assert auth.KeyRing.load(path).keys[0].rate == "5/minute"
    with pytest.raises(UserError, match="cannot read"):
        auth.KeyRing.load(tmp_path / "missing.txt")


def test_bearer_header_parsing():
    assert auth.bearer_token("Bearer abc") == "abc" and auth.bearer_token("bearer  abc ") == "abc"
    assert auth.bearer_token("Basic abc") is None and auth.bearer_token("Bearer") is None
    assert auth.bearer_token(None) is None


def test_allowlist():
    allow = auth.Allowlist.parse("10.0.0.0/8, 127.0.0.1,::1")
    assert allow.allows("10.2.3.4") and allow.allows("127.0.0.1") and allow.allows("::1")
    assert allow.allows("::ffff:10.9.9.9")                       # IPv4 client on a dual-stack socket
    assert not allow.allows("11.0.0.1") and not allow.allows("127.0.0.2") and not allow.allows(None)
    assert not allow.allows("not-an-ip")
    assert auth.Allowlist.parse(None).allows("8.8.8.8")
    with pytest.raises(UserError) as info:
        auth.Allowlist.parse("10.0.0.0/33")
    assert info.value.field == "--allow" and "10.0.0.0/33" in str(info.value)


def test_rate_limiter_answers_with_a_wait():
    lim = limits.RateLimiter("3/minute")
    assert [lim.hit("a") for _ in range(3)] == [None, None, None]
    wait = lim.hit("a")
    assert wait is not None and 1 <= wait <= 60
    assert lim.hit("b") is None                                  # per identity
    assert lim.hit("c", "1/hour") is None and lim.hit("c", "1/hour") is not None   # a key's own rate
    with pytest.raises(UserError) as info:
        limits.RateLimiter("lots")
    assert info.value.field == "--rate"


def test_rate_limiting_starts_no_thread_per_request(monkeypatch):
    import threading

    import limits.storage.memory as stock

    started = []

    class CountingTimer(threading.Timer):
        def start(self) -> None:
            started.append(self)
            super().start()

    monkeypatch.setattr(stock.threading, "Timer", CountingTimer)
    lim = limits.RateLimiter("1000000/second")
    for i in range(300):
        assert lim.hit(f"id{i % 7}") is None
        time.sleep(0.0002)      # spread over ~60 ms: the stock storage starts a timer per 10 ms of traffic
    assert len(started) <= 1    # at most the one its constructor starts (and cancels)
    storage = lim._limiter.storage
    storage.incr("gone", expiry=0)              # an expired counter: the sweep drops it
    storage._MemoryStorage__expire_events()
    assert "gone" not in storage.storage


def test_sizes():
    assert limits.parse_size("64MiB", "--max-body") == 64 << 20
    assert limits.parse_size("1GB", "--max-body") == 10**9 and limits.parse_size("2048", "--max-body") == 2048
    for bad in ("64 parsecs", "-1", "0", ""):
        with pytest.raises(UserError) as info:
            limits.parse_size(bad, "--max-body")
        assert info.value.field == "--max-body"


def test_body_reading_stops_at_the_limit():
    async def chunks(n: int, size: int):
        for _ in range(n):
            yield b"x" * size

    async def read(n: int, size: int, length: str | None, limit: int) -> bytes:
        return await limits.read_body(chunks(n, size), length, limit)

    assert asyncio.run(read(3, 10, "30", 30)) == b"x" * 30
    with pytest.raises(limits.BodyTooLarge) as info:
        asyncio.run(read(1, 10, "10000", 100))                   # refused from the header alone
    assert info.value.seen == 10000
    with pytest.raises(limits.BodyTooLarge):
        asyncio.run(read(50, 10, None, 100))                     # chunked: refused as the bytes arrive


# ---------------------------------------------------------------- run requests and the load generator

def test_run_requests_are_typed_and_closed():
    r = RunRequest.from_json({"ops": ["softmax", "gemm"], "shape": {"M": 64}, "quick": True, "rse": 1})
    assert r.ops == "softmax,gemm" and r.shape == "M=64" and r.rse == 1.0 and r.quick is True
    assert RunRequest.from_json(r.to_json()) == r
    for doc, field_ in (({"ops": 3}, "ops"), ({"quick": "yes"}, "quick"), ({"min_samples": 2.5}, "min_samples"),
                        ({"device": "cuda:1"}, "device"), ({"specs": "/etc"}, "specs"),
                        ({"peaks": "/tmp/mine.yaml"}, "peaks"), ([], "body")):
        with pytest.raises(RequestError) as info:
            RunRequest.from_json(doc)
        assert info.value.field == field_


def test_load_report_helpers():
    assert loadgen.device_ms("device;dur=0.125, worker;dur=0.5, total;dur=1.0") == 0.125
    assert loadgen.device_ms(None) is None and loadgen.device_ms("worker;dur=2") is None
    p = loadgen.percentiles([float(i) for i in range(1, 101)])
    assert p["p50"] == 51 and p["p99"] == 100 and p["max"] == 100 and p["n"] == 100


def test_load_cpu_lists_parse_and_bad_ones_name_the_text():
    assert loadgen.parse_cpus("12-15") == (12, 13, 14, 15)
    assert loadgen.parse_cpus("0,2,4-5,2") == (0, 2, 4, 5)
    for bad in ("", "a-b", "3-", "5-2"):
        with pytest.raises(ValueError, match="CPU"):
            loadgen.parse_cpus(bad)


def _answers_with(raw: bytes, per_connection: int | None = None):
    """A real loopback socket server that writes `raw` once per request it reads (a head and a body of
    Content-Length bytes), so Conn parses bytes that came over TCP, split as TCP splits them; after
    `per_connection` answers it closes the connection silently, as a server's keep-alive timeout does."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = 0
        try:
            while per_connection is None or answered < per_connection:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                for i in range(0, len(raw), 7):          # a few bytes at a time
                    writer.write(raw[i:i + 7])
                    await writer.drain()
                answered += 1
        except asyncio.IncompleteReadError:
            pass
        writer.close()
    return handle


def test_the_load_clients_connection_reads_lengths_chunks_and_closes():
    plan = loadgen.Plan("http://127.0.0.1:1", (), key="k")
    req = loadgen.Request("r", "softmax", b"x" * 1000, (("X-Solbench-Kwargs", "{}"),))
    wire_req = loadgen.prepared(plan, req)
    assert wire_req.startswith(b"POST /v1/ops/softmax HTTP/1.1\r\n") and wire_req.endswith(b"\r\n\r\n" + b"x" * 1000)
    assert b"Content-Length: 1000\r\n" in wire_req and b"Authorization: Bearer k\r\n" in wire_req

    async def scenario(raw: bytes, sends: int, per_connection: int | None = None) -> list[httpclient.Reply]:
        server = await asyncio.start_server(_answers_with(raw, per_connection), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = httpclient.Conn(f"http://127.0.0.1:{port}")
        try:
            return [await conn.send(wire_req) for _ in range(sends)]
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()

    sized = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer-Timing: device;dur=0.25\r\n\r\nhello"
    replies = asyncio.run(scenario(sized, 3))               # three answers on one kept-alive connection
    assert [(r.status, r.body) for r in replies] == [(200, b"hello")] * 3
    assert loadgen.device_ms(replies[0].headers["server-timing"]) == 0.25
    chunked = b"HTTP/1.1 422 Unprocessable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n"
    assert [(r.status, r.body) for r in asyncio.run(scenario(chunked, 2))] == [(422, b"abcde")] * 2
    with pytest.raises(httpclient.ReplyError, match="status line"):
        asyncio.run(scenario(b"SPDY/3 200\r\n\r\n", 1))
    closing = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    assert [r.body for r in asyncio.run(scenario(closing, 2))] == [b"ok", b"ok"]   # it reconnects
    # The server drops each kept-alive connection after one answer, saying nothing: the next request
    # finds it closed before any answer and goes again on a new connection.
    assert [r.body for r in asyncio.run(scenario(sized, 3, per_connection=1))] == [b"hello"] * 3
    # A new connection closed before an answer (or reset, when the close beats the request) is the
    # server's failure: raised, not retried.
    with pytest.raises((httpclient.ClosedBeforeAnswer, ConnectionResetError, BrokenPipeError)):
        asyncio.run(scenario(sized, 1, per_connection=0))


def test_the_workers_safetensors_writer_is_read_back_exactly_by_safetensors():
    from safetensors.torch import load

    from solbench.serve.tensors import encode_safetensors

    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 5, generator=g)
    outs = {"y": x.bfloat16(), "z": x.t(), "i": torch.arange(6).view(2, 3), "mask": x > 0,
            "f8": x.to(torch.float8_e4m3fn), "scalar": torch.tensor(2.5), "none": torch.empty(0, 4),
            "again": x.t()}                                   # non-contiguous, and the same tensor twice
    back = load(bytes(encode_safetensors(outs)))
    assert set(back) == set(outs)
    for k, v in outs.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        assert torch.equal(back[k].reshape(-1).view(torch.uint8), v.contiguous().reshape(-1).view(torch.uint8)), k
    header_len = int.from_bytes(bytes(encode_safetensors(outs))[:8], "little")
    assert header_len % 8 == 0


def test_the_workers_writer_hands_unknown_dtypes_to_safetensors():
    from safetensors.torch import load

    from solbench.serve.tensors import encode_safetensors

    x = torch.arange(4).to(torch.uint16)
    assert torch.equal(load(bytes(encode_safetensors({"u": x, "f": x.float()})))["u"], x)
