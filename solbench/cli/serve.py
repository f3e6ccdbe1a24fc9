"""`solbench serve`: the op library and the benchmark over HTTP (solbench/serve/). Parsing and printing only.

fastapi, uvicorn and the rest come with `pip install 'solbench[serve]'`; they are imported only when the
command runs, so the rest of the CLI works without them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, List, Optional

import typer

from solbench import pipeline
from solbench.cli.app import app, err, load_specs, out, user_errors
from solbench.cli.run import _run_config
from solbench.errors import UserError
from solbench.runrequest import RunRequest


@app.command()
@user_errors
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (anything but loopback needs "
                             "--api-keys)."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    api_keys: Optional[Path] = typer.Option(None, "--api-keys", help="Key file (NAME sha256:HEX a line); "
                                            "make entries with --add-key."),
    allow: Optional[str] = typer.Option(None, "--allow", help="Client networks allowed, CIDR[,CIDR] (default: any)."),
    rate: str = typer.Option("50/second", "--rate", help="Requests per API key (or client address), e.g. 50/second."),
    max_body: str = typer.Option("64MiB", "--max-body", help="Largest request body, e.g. 64MiB."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate (PEM): serve HTTPS."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
    queue: int = typer.Option(64, "--queue", help="Op requests that may wait for the device (503 beyond)."),
    run_queue: int = typer.Option(4, "--run-queue", help="Benchmark runs that may wait (503 beyond)."),
    in_flight: int = typer.Option(2, "--in-flight", help="Op requests handed to the GPU worker ahead of the one "
                                  "it is running (the rest wait in --queue)."),
    workers: int = typer.Option(1, "--workers", help="Worker processes for the device, each with its own CUDA "
                                "context, 1/N of --queue and of --gpu-memory; a request goes to the least busy."),
    frontends: int = typer.Option(1, "--frontends", help="Server processes answering on the port, each with its "
                                  "own event loop and --workers workers, 1/N of --queue and of --gpu-memory; they "
                                  "share the rate limit and the runs."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    specs_dirs: Optional[List[Path]] = typer.Option(None, "--specs", help="Extra folder of op specs to serve "
                                                    "(repeatable)."),
    out_dir: Path = typer.Option(Path("results/serve"), "--out", help="Folder for the results files of runs."),
    op_timeout: float = typer.Option(60.0, "--op-timeout", help="Seconds one op request may run before its worker "
                                     "is killed (504) and replaced."),
    gpu_memory: float = typer.Option(0.9, "--gpu-memory", help="Fraction of device memory one request may use "
                                     "(less what the worker holds at start); bigger requests get a 422."),
    test_ops: bool = typer.Option(False, "--test-ops", help="Also serve the fault-injection ops test_raise, "
                                  "test_fault, test_sleep (for testing the service; never in production)."),
    cpu_threads: int = typer.Option(1, "--cpu-threads", help="torch threads of the worker for CPU work (one "
                                    "keeps many small requests fast; raise it for large ops on an idle CPU)."),
    no_access_log: bool = typer.Option(False, "--no-access-log", help="Do not log each request."),
    add_key: Optional[str] = typer.Option(None, "--add-key", help="Make an API key called NAME, add its hash to "
                                          "--api-keys FILE, print the key once, and exit."),
) -> None:
    """Serve the op library (POST /v1/ops/{op}) and benchmark runs (POST /v1/runs) over HTTP."""
    if add_key is not None:
        _add_key(api_keys, add_key)
        return
    try:
        from solbench.serve import server
        from solbench.serve.limits import parse_size
    except ImportError as exc:
        raise UserError(f"solbench serve needs its extra: pip install 'solbench[serve]' ({exc})") from None
    config = server.ServeConfig(host=host, port=port, api_keys=api_keys, allow=allow, rate=rate,
                                max_body=parse_size(max_body, "--max-body"), tls_cert=tls_cert, tls_key=tls_key,
                                queue=queue, run_queue=run_queue, in_flight=in_flight, workers=workers,
                                frontends=frontends, device=device, specs_dirs=tuple(specs_dirs or ()),
                                out_dir=out_dir, test_ops=test_ops, op_timeout=op_timeout, gpu_memory=gpu_memory,
                                access_log=not no_access_log, cpu_threads=cpu_threads)
    specs = load_specs(specs_dirs)
    make_config = make_run_config(config.device, config.out_dir)
    services = server.build(config, specs, make_config)
    out.print(f"solbench serve: {config.scheme}://{host}:{port}  device {device}  {len(services.library.ops)} ops  "
              f"keys: {len(services.keys.keys) if services.keys else 'none (loopback only)'}  "
              f"allow: {services.allowlist.describe()}  rate: {rate}" + ("  [test ops on]" if test_ops else "")
              + (f"  front ends: {frontends}" if frontends > 1 else ""), highlight=False)
    server.serve(services, specs, make_config)


def make_run_config(device: str, out_dir: Path) -> Callable[[RunRequest], pipeline.RunConfig]:
    """A run request -> RunConfig through the very checks `solbench run` applies to its flags; the device,
    spec folders and results folder are the server's. Picklable: each front end (--frontends) gets it."""
    return functools.partial(_make_run_config, device, out_dir)


def _make_run_config(device: str, out_dir: Path, r: RunRequest) -> pipeline.RunConfig:
    return _run_config(ops=r.ops, dtypes=r.dtypes, shape=r.shape, impls=r.impls, baseline=r.baseline,
                       quick=r.quick, device=device, peaks=r.peaks, out_dir=out_dir, rse=r.rse, budget=r.budget,
                       min_samples=r.min_samples, timeout=r.timeout, fail_fast=r.fail_fast, no_isolate=False,
                       seed=r.seed, timer=r.timer)


def _add_key(path: Optional[Path], name: str) -> None:
    from solbench.serve.auth import add_key

    if path is None:
        raise UserError("--add-key needs --api-keys FILE (the file the key's hash is added to)", field="--api-keys")
    token = add_key(path, name)
    err.print(f"added key '{name}' to {path} (only its hash is stored; this is the one time the key is shown):",
              highlight=False)
    out.print(token, highlight=False, soft_wrap=True)
