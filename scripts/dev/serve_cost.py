"""What one request costs the server's processes in CPU time: `solbench serve` on loopback, softmax
256 x 1024 bf16 (the speed target's request) from 64 closed-loop clients, and the CPU microseconds per
request of the server's event loop, its pipe threads and its worker(s), from /proc.

On a small machine the load generator shares the cores with the server, so the rate says little; CPU time
per request is what moves when the server's own work changes, and it is what sets the rate where the
cores are plenty (the H200's host). Each repeat starts a fresh server.

    python scripts/dev/serve_cost.py [--device cpu] [--workers 1] [--frontends 1] [--seconds 10] [--repeat 3] [--json F]

With --frontends N the event loop figure is the sum over the N front ends' loops (CPU per request of
the whole server), and each front end's own is printed too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from solbench.serve import auth, loadgen
from solbench.serve.cpuuse import cpu_use, during, per_request
from solbench.serve.localserver import LocalServer


def _one(args: argparse.Namespace, request: loadgen.Request, key_file: Path, key: str, work: Path) -> dict[str, Any]:
    srv = LocalServer(["--device", args.device, "--api-keys", str(key_file), "--rate", "1000000/second", "--queue",
                       "256", "--no-access-log", "--workers", str(args.workers), "--frontends", str(args.frontends),
                       "--test-ops", "--out", str(work / "results")])
    try:
        srv.wait_ready(600)
        plan, _ = loadgen.warm_up(loadgen.Plan(srv.url, (request,), args.clients, args.seconds, None, args.procs, key))
        loadgen.run(loadgen.Plan(**{**loadgen.asdict_shallow(plan), "seconds": 2}))      # settle
        pids = srv.pids()         # server, worker<j>; or the supervisor, frontend<i> and frontend<i>.worker<j>
        with cpu_use(pids) as use:
            report = loadgen.run(plan)
        if report.unexpected:
            raise SystemExit(f"{report.unexpected} unexpected replies: {report.errors[:3]}")
        return {"rate": report.rate, "cpu_use": use, "us_per_request": per_request(use, report.requests),
                "cores_during_load": during(use, report.seconds)}
    finally:
        srv.stop()


def _event_loop_us(run: dict[str, Any]) -> int:
    """CPU per request of the event loop(s): the server's main thread, or the sum of every front end's."""
    us = run["us_per_request"]
    loops = [v["threads"]["main"] for name, v in us.items() if name.startswith("frontend") and "." not in name]
    return int(sum(loops)) if loops else int(us["server"]["threads"]["main"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--frontends", type=int, default=1, help="the server's --frontends")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--procs", type=int, default=1, help="load-generator processes")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    x = torch.randn(256, 1024, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    request = loadgen.safetensors_request("softmax", {"x": x}, "softmax 256x1024 bf16")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        key_file = work / "keys.txt"
        key = auth.add_key(key_file, "cost")
        runs = [_one(args, request, key_file, key, work) for _ in range(args.repeat)]
    for i, r in enumerate(runs):
        us = r["us_per_request"]
        procs = ", ".join(f"{name} {v['total']} (user {v['user']}, sys {v['system']})" for name, v in us.items())
        loops = [n for n in us if n == "server" or (n.startswith("frontend") and "." not in n)]
        threads = "; ".join(f"{n}: " + ", ".join(f"{t} {c}" for t, c in us[n]["threads"].items() if c) for n in loops)
        print(f"run {i + 1}: {r['rate']:.0f}/s; CPU us per request: {procs}; threads: {threads}")
    loop = [_event_loop_us(r) for r in runs]
    print(f"event loop: median {statistics.median(loop):.0f} us per request (runs: {', '.join(map(str, loop))})")
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "workers": args.workers, "frontends": args.frontends,
                                         "clients": args.clients,
                                         "procs": args.procs, "seconds": args.seconds, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
