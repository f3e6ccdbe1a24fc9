"""A bounded load test of a running `solbench serve`: N concurrent clients (asyncio), spread over a few
processes so the client side is not what sets the pace, for a fixed time or a fixed number of requests,
whichever ends first. It always stops by itself.

Each client is one keep-alive HTTP/1.1 connection (`Conn`) that writes a request prepared once (request
line, headers and body in one buffer) and reads the answer by its Content-Length (or chunks). A general
client spends milliseconds of CPU per 512 KiB answer: httpx took 4-7 ms per request on the H200 host, so
twelve load processes shared the server's cores and their own scheduling became part of the latency
measured (docs/PERF.md, issue 17). The warm-up, which happens once, still goes through httpx.

Every reply is checked: its status must be one the caller expects, and a 200's body must have the
length the warm-up reply of the same request had (the outputs' shapes fix it). The caller checks the
warm-up replies' values. Latency is what the client measured; `device` is the time the implementation
ran on the device, from the reply's Server-Timing header, so latency - device is the server's own cost.

    python -m solbench.serve.loadgen http://127.0.0.1:8000 --op softmax --shape 256,1024 --dtype bfloat16 \\
        --clients 64 --seconds 30 --procs 4 [--cpus 12-15]     # key in $SOLBENCH_API_KEY
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import socket
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from solbench.serve.httpclient import Conn


NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]       # the warm-up's httpx transport


@dataclass(frozen=True)
class Request:
    """One request of the mix: its op, body, headers, and the body length a good reply has."""

    name: str                   # e.g. "softmax 256x1024 bfloat16"
    op: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    reply_bytes: int | None = None


@dataclass(frozen=True)
class Plan:
    url: str
    mix: tuple[Request, ...]
    clients: int = 64
    seconds: float = 30.0
    max_requests: int | None = None       # stop after this many in all (None: only the time bounds it)
    procs: int = 1
    key: str | None = None
    verify: Any = True                    # httpx's verify (an ssl context trusting a self-signed server)
    expected: tuple[int, ...] = (200,)
    rate: float | None = None             # open loop: this many requests/s in all, evenly paced per client;
                                          # None: closed loop (each client sends as soon as it has its answer)
    cpus: tuple[int, ...] | None = None   # the load processes run on these CPUs only (None: wherever)


@dataclass
class Report:
    requests: int = 0
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    unexpected: int = 0                   # a status not expected, a bad body, or a transport error
    errors: list[str] = field(default_factory=list)   # the first few, for the message
    latency_ms: dict[str, float] = field(default_factory=dict)
    device_ms: dict[str, float] = field(default_factory=dict)
    overhead_ms: dict[str, float] = field(default_factory=dict)
    per_request: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rate_per_s": self.rate}


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    v = sorted(values)

    def at(q: float) -> float:
        return v[min(len(v) - 1, int(q * len(v)))]

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": v[-1], "mean": statistics.fmean(v), "n": len(v)}


def device_ms(server_timing: str | None) -> float | None:
    """The `device;dur=...` entry of a Server-Timing header, in ms."""
    for part in (server_timing or "").split(","):
        name, _, rest = part.strip().partition(";")
        if name == "device" and rest.startswith("dur="):
            try:
                return float(rest[4:])
            except ValueError:
                return None
    return None


def run(plan: Plan) -> Report:
    """The whole test: clients split over `plan.procs` processes; their samples merged into one report."""
    procs = max(1, min(plan.procs, plan.clients))
    if procs == 1:
        return _report([_one_process(plan, 0, plan.clients, plan.max_requests)], plan)
    ctx = mp.get_context("spawn")
    # Each process imports and builds its clients first (a second or more, at different speeds), then all
    # start together: otherwise the first ones load the server alone for a while.
    start = ctx.Barrier(procs)
    conns, workers = [], []
    for i in range(procs):
        clients = plan.clients // procs + (1 if i < plan.clients % procs else 0)
        share = (None if plan.max_requests is None
                 else plan.max_requests // procs + (1 if i < plan.max_requests % procs else 0))
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_process_main, args=(plan, i, clients, share, writer, start), daemon=True)
        p.start()
        writer.close()
        conns.append(reader)
        workers.append(p)
    parts = []
    for reader, p in zip(conns, workers):
        try:
            parts.append(reader.recv() if reader.poll(plan.seconds + 120) else _Samples(failed=["no answer"]))
        except EOFError:
            parts.append(_Samples(failed=[f"load process exited with {p.exitcode}"]))
        p.join(10)
    return _report(parts, plan)


@dataclass
class _Samples:
    latency: list[float] = field(default_factory=list)
    device: list[float] = field(default_factory=list)
    names: list[int] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    unexpected: int = 0
    failed: list[str] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0


def _process_main(plan: Plan, index: int, clients: int, share: int | None, conn: Any, start: Any) -> None:
    conn.send(_one_process(plan, index, clients, share, start))
    conn.close()


def _one_process(plan: Plan, index: int, clients: int, share: int | None, start: Any = None) -> _Samples:
    if plan.cpus and start is not None:   # only in a process of its own: never pin the caller
        os.sched_setaffinity(0, plan.cpus)
    return asyncio.run(_clients(plan, index, clients, share, start))


def parse_cpus(text: str) -> tuple[int, ...]:
    """'12-15' or '0,2,4-5' -> the CPU numbers; ValueError naming the text when it is not such a list."""
    cpus: list[int] = []
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            cpus += range(int(lo), int(hi if dash else lo) + 1)
    except ValueError:
        raise ValueError(f"not a CPU list (e.g. 12-15 or 0,2,4-5): {text!r}") from None
    if not cpus:
        raise ValueError(f"no CPUs in {text!r}")
    return tuple(sorted(set(cpus)))


def prepared(plan: Plan, req: Request) -> bytes:
    """The whole request, written once per send: its line, headers and body in one buffer."""
    u = urlsplit(plan.url)
    head = [f"POST /v1/ops/{req.op} HTTP/1.1", f"Host: {u.netloc}", "Content-Type: application/octet-stream",
            f"Content-Length: {len(req.body)}"]
    if plan.key:
        head.append(f"Authorization: Bearer {plan.key}")
    head += [f"{k}: {v}" for k, v in req.headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + req.body


async def _clients(plan: Plan, index: int, clients: int, share: int | None, start: Any = None) -> _Samples:
    samples = _Samples()
    left = [share if share is not None else -1]
    requests = [prepared(plan, r) for r in plan.mix]
    pool = [Conn(plan.url, plan.verify) for _ in range(clients)]
    try:
        if start is not None:
            start.wait(60)
        samples.started = time.perf_counter()
        deadline = samples.started + plan.seconds
        await asyncio.gather(*[_client(pool[c], requests, plan, index * 1000 + c, deadline, left, samples)
                               for c in range(clients)])
        samples.ended = time.perf_counter()
    finally:
        for conn in pool:
            await conn.close()
    return samples


async def _client(conn: Conn, requests: list[bytes], plan: Plan, seed: int, deadline: float, left: list[int],
                  s: _Samples) -> None:
    i = seed
    # Open loop: request n of this client is due at start + phase + n * period, and its latency counts from
    # when it was due, so a server that falls behind is charged for the wait (no coordinated omission).
    period = plan.clients / plan.rate if plan.rate else 0.0
    due = s.started + random.Random(seed).random() * period        # clients out of step with each other
    while time.perf_counter() < deadline and left[0] != 0:
        if left[0] > 0:
            left[0] -= 1
        k = i % len(plan.mix)
        req = plan.mix[k]
        i += 1
        if period:
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            t0, due = due, due + period
        else:
            t0 = time.perf_counter()
        try:
            r = await conn.send(requests[k])
        except Exception as exc:  # a transport error is an unexpected error of the test, never a crash of it
            s.unexpected += 1
            if len(s.failed) < 5:
                s.failed.append(f"{req.name}: {type(exc).__name__}: {exc}")
            continue
        dt = time.perf_counter() - t0
        code = str(r.status)
        s.statuses[code] = s.statuses.get(code, 0) + 1
        bad = r.status not in plan.expected or (
            r.status == 200 and req.reply_bytes is not None and len(r.body) != req.reply_bytes)
        if bad:
            s.unexpected += 1
            if len(s.failed) < 5:
                what = r.body[:200].decode("utf-8", "replace") if r.status != 200 else f"{len(r.body)} bytes"
                s.failed.append(f"{req.name}: {r.status} {what}")
            continue
        if r.status == 200:
            s.latency.append(dt * 1e3)
            s.device.append(device_ms(r.headers.get("server-timing")) or 0.0)
            s.names.append(k)


def _report(parts: list[_Samples], plan: Plan) -> Report:
    rep = Report()
    latency, device, names = [], [], []
    for p in parts:
        latency += p.latency
        device += p.device
        names += p.names
        rep.unexpected += p.unexpected
        rep.errors += p.failed
        for k, v in p.statuses.items():
            rep.statuses[k] = rep.statuses.get(k, 0) + v
    started = [p.started for p in parts if p.started]
    ended = [p.ended for p in parts if p.ended]
    # perf_counter is the system's monotonic clock, one for every process: from the first start to the
    # last end is the test's duration, however the processes' starts spread.
    rep.seconds = max(ended) - min(started) if started and ended else 0.0
    rep.requests = sum(rep.statuses.values())
    rep.latency_ms, rep.device_ms = percentiles(latency), percentiles(device)
    rep.overhead_ms = percentiles([a - b for a, b in zip(latency, device)])
    for k, req in enumerate(plan.mix):
        lat = [a for a, n in zip(latency, names) if n == k]
        dev = [b for b, n in zip(device, names) if n == k]
        rep.per_request[req.name] = {"n": len(lat),
                                     **{f"latency_{q}": v for q, v in percentiles(lat).items() if q != "n"},
                                     "device_p50": percentiles(dev).get("p50", 0.0)}
    rep.errors = rep.errors[:10]
    return rep


def warm_up(plan: Plan) -> tuple[Plan, dict[str, bytes]]:
    """Send each request of the mix once; the plan with each reply's length filled in, and the replies
    (for the caller to check their values). Raises RuntimeError when one is not a 200."""
    import httpx

    headers = {"Authorization": f"Bearer {plan.key}"} if plan.key else {}
    replies, mix = {}, []
    transport = httpx.HTTPTransport(verify=plan.verify, socket_options=NODELAY)
    with httpx.Client(base_url=plan.url, headers=headers, transport=transport, timeout=120.0) as client:
        for req in plan.mix:
            r = client.post(f"/v1/ops/{req.op}", content=req.body, headers=dict(req.headers))
            if r.status_code != 200:
                raise RuntimeError(f"warm-up {req.name}: {r.status_code} {r.text[:300]}")
            replies[req.name] = r.content
            mix.append(Request(req.name, req.op, req.body, req.headers, len(r.content)))
    return Plan(**{**asdict_shallow(plan), "mix": tuple(mix)}), replies


def asdict_shallow(plan: Plan) -> dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


def safetensors_request(op: str, tensors: dict[str, Any], name: str | None = None,
                        kwargs: dict[str, Any] | None = None) -> Request:
    from safetensors.torch import save

    headers = (("X-Solbench-Kwargs", json.dumps(kwargs)),) if kwargs else ()
    shape = "x".join(str(d) for d in next(iter(tensors.values())).shape)
    dtype = str(next(iter(tensors.values())).dtype).removeprefix("torch.")
    return Request(name or f"{op} {shape} {dtype}", op, save(tensors), headers)


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(prog="python -m solbench.serve.loadgen", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("--op", default="softmax")
    p.add_argument("--shape", default="256,1024", help="the op's one input's shape, comma-separated")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--rate", type=float, default=None, help="open loop: requests/s in all (default: closed loop)")
    p.add_argument("--procs", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 2)))
    p.add_argument("--cpus", default=None, help="run the load processes on these CPUs only, e.g. 12-15")
    p.add_argument("--json", default=None, help="write the report here")
    a = p.parse_args(argv)
    try:
        cpus = parse_cpus(a.cpus) if a.cpus else None
    except ValueError as exc:
        p.error(f"--cpus: {exc}")
    shape = tuple(int(d) for d in a.shape.split(","))
    x = torch.randn(shape).to(getattr(torch, a.dtype))
    plan = Plan(a.url, (safetensors_request(a.op, {"x": x}),), a.clients, a.seconds, a.requests, a.procs,
                os.environ.get("SOLBENCH_API_KEY"), rate=a.rate, cpus=cpus)
    plan, _ = warm_up(plan)
    rep = run(plan)
    text = json.dumps(rep.to_json(), indent=2)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    print(f"{rep.requests} requests in {rep.seconds:.1f} s = {rep.rate:,.0f}/s; latency p50 "
          f"{rep.latency_ms.get('p50', 0):.2f} ms p99 {rep.latency_ms.get('p99', 0):.2f} ms; unexpected "
          f"{rep.unexpected}; statuses {rep.statuses}")
    return 1 if rep.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
