"""A server's parts, assembled from its configuration, and the uvicorn process that serves them.

`ServeConfig` is what `solbench serve`'s flags say (each checked there, by name); `Services` is everything
the routes use: the op library, the device's op service, the run queue, keys, allowlist, rate limiter and
metrics, started and stopped with the app. With `--frontends N` each front end builds its own (`Place` says
which it is), with the rate limit, the runs and what /metrics shows shared with the others (sharedrate.py,
runfiles.py, metrics.py).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solbench.errors import UserError
from solbench.serve.auth import Allowlist, KeyRing
from solbench.serve.limits import Limiter, RateLimiter
from solbench.serve.metrics import Metrics
from solbench.serve.oplib import OpLibrary, build_library
from solbench.serve.oppool import OpPool
from solbench.serve.opworker import WorkerSetup
from solbench.serve.runfiles import DiskRunService
from solbench.serve.runs import MakeConfig, RunService
from solbench.serve.shared import SharedArea, publish_until
from solbench.serve.shared import metrics_dir as shared_metrics_dir
from solbench.serve.sharedrate import SharedRateLimiter
from solbench.spec import OpSpec

LOG = "solbench.serve"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_FRONTENDS = 64       # each holds its own --workers processes (and CUDA contexts): a typo must not spawn 1,000
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Path | None = None
    allow: str | None = None
    rate: str = "50/second"
    max_body: int = 64 << 20
    tls_cert: Path | None = None
    tls_key: Path | None = None
    queue: int = 64
    run_queue: int = 4
    in_flight: int = 2       # requests sent to the worker ahead of the one it runs (OpService's window)
    workers: int = 1         # worker processes for the device (OpPool)
    frontends: int = 1       # uvicorn processes on the port, each with its own services (frontends.py)
    device: str = "auto"
    specs_dirs: tuple[Path, ...] = ()
    out_dir: Path = Path("results/serve")
    test_ops: bool = False
    op_timeout: float = 60.0
    gpu_memory: float = 0.9
    load_library: bool = True
    access_log: bool = True
    cpu_threads: int = 1

    def check(self) -> None:
        """Flag combinations that cannot work, named by flag (solbench serve checks each flag's own value)."""
        if not _DEVICE.match(self.device):
            raise UserError(f"unknown device '{self.device}' (use auto, cpu, cuda or cuda:N)", field="--device")
        if (self.tls_cert is None) != (self.tls_key is None):
            missing = "--tls-cert" if self.tls_key else "--tls-key"
            raise UserError("give --tls-cert and --tls-key together", field=missing)
        for flag, path in (("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key)):
            if path is not None and not Path(path).is_file():
                raise UserError(f"no such file: {path}", field=flag)
        if self.api_keys is None and self.host not in LOOPBACK:
            raise UserError(f"serving on '{self.host}' (not loopback) needs --api-keys: without keys anyone who "
                            f"reaches the port can run work on the GPU", field="--api-keys")
        if not 0 < self.gpu_memory <= 1:
            raise UserError(f"must be a fraction in (0, 1], got {self.gpu_memory}", field="--gpu-memory")
        for flag, value in (("--queue", self.queue), ("--run-queue", self.run_queue), ("--in-flight", self.in_flight),
                            ("--workers", self.workers)):
            if value < 1:
                raise UserError(f"must be at least 1, got {value}", field=flag)
        if not 1 <= self.frontends <= MAX_FRONTENDS:
            raise UserError(f"must be from 1 to {MAX_FRONTENDS}, got {self.frontends}", field="--frontends")
        if self.cpu_threads < 1:
            raise UserError(f"must be at least 1, got {self.cpu_threads}", field="--cpu-threads")
        if self.op_timeout <= 0:
            raise UserError(f"must be positive, got {self.op_timeout}", field="--op-timeout")
        if not 0 <= self.port <= 65535:
            raise UserError(f"not a port: {self.port}", field="--port")

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


@dataclass(frozen=True)
class Place:
    """Where one front end stands among its server's (--frontends N, N > 1)."""

    index: int
    count: int
    shared: Path             # the file the front ends share (shared.py)

    @property
    def metrics_dir(self) -> Path:
        """Where every front end writes its Prometheus values (metrics.py)."""
        return shared_metrics_dir(self.shared)


@dataclass
class Services:
    config: ServeConfig
    library: OpLibrary
    ops: OpPool
    runs: RunService | DiskRunService
    keys: KeyRing | None
    allowlist: Allowlist
    limiter: Limiter
    metrics: Metrics = field(default_factory=Metrics)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger(LOG))
    started: bool = False
    place: Place | None = None           # None: the only front end (--frontends 1)
    area: SharedArea | None = None
    _publisher: tuple[threading.Thread, threading.Event] | None = None
    _metrics_failed: bool = False

    @property
    def ready(self) -> bool:
        """This front end can answer op requests: its worker has probed the device and loaded the library."""
        ops = self.ops
        return ops.ready and (ops.kind != "cuda" or ops.library_ok or not self.config.load_library)

    def start(self) -> None:
        """Idempotent: the app's lifespan calls it, and so may a test that drives the app without one."""
        if self.started:
            return
        self.started = True
        self.ops.start()
        self.runs.start()
        self.metrics.watch(self.ops.setup.device, lambda: self.ops.depth, lambda: self.ops.restarts,
                           lambda: float(self.ops.last_memory))
        self.metrics.watch_runs(lambda: self.runs.depth)
        if self.place is not None and self.area is not None:
            stop = threading.Event()
            thread = threading.Thread(target=publish_until, args=(self.area, self.place.index, stop,
                                      lambda: self.ready, lambda: self.ops.served, self._refresh_metrics),
                                      daemon=True, name="solbench-publish")
            thread.start()
            self._publisher = (thread, stop)
        where = f"front end {self.place.index} of {self.place.count}: " if self.place else ""
        self.log.info("%sserving %d ops on %s; %s; clients allowed from %s; rate %s per key", where,
                      len(self.library.ops), self.ops.setup.device, f"{len(self.keys.keys)} API keys "
                      f"({', '.join(self.keys.names)})" if self.keys else "no API keys (loopback only)",
                      self.allowlist.describe(), self.limiter.rate)

    def _refresh_metrics(self) -> None:
        """The front end's gauges for the other front ends' scrapes. A failure (a full /dev/shm) must not
        stop the publisher thread, whose silence would mark this front end dead: logged once, then retried."""
        try:
            self.metrics.refresh()
        except Exception as exc:  # whatever it is, the publisher goes on
            if not self._metrics_failed:
                self.log.warning("front end %s: cannot write its gauges for /metrics: %s: %s",
                                 self.place.index if self.place else "-", type(exc).__name__, exc)
            self._metrics_failed = True

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        self.runs.stop()
        self.ops.stop()
        if self._publisher is not None:
            thread, stop = self._publisher
            stop.set()
            thread.join(5)


def build(config: ServeConfig, specs: dict[str, OpSpec], make_config: MakeConfig,
          place: Place | None = None) -> Services:
    """The services of a server (`place` None) or of one of its front ends, which share the rate limit
    and the runs (on disk) and take 1/N of --queue and of --gpu-memory each."""
    config.check()
    keys = KeyRing.load(config.api_keys) if config.api_keys else None
    library = build_library(specs, config.test_ops)
    setup = WorkerSetup(config.device, library.sources(), config.load_library, config.cpu_threads)
    count = place.count if place else 1
    ops = OpPool(setup, config.workers, config.queue, config.op_timeout, config.gpu_memory, window=config.in_flight,
                 frontends=count)
    allowlist = Allowlist.parse(config.allow)
    if place is None:
        runs = RunService(specs, make_config, config.run_queue, config.out_dir, served=lambda: ops.served)
        return Services(config, library, ops, runs, keys, allowlist, RateLimiter(config.rate))
    area = SharedArea(place.shared)
    disk_runs = DiskRunService(specs, make_config, config.run_queue, config.out_dir, served=area.served,
                               executes=place.index == 0)
    return Services(config, library, ops, disk_runs, keys, allowlist, SharedRateLimiter(config.rate, area),
                    metrics=Metrics(frontend=place.index, directory=place.metrics_dir), place=place, area=area)


def serve(services: Services, specs: dict[str, OpSpec] | None = None, make_config: MakeConfig | None = None) -> None:
    """Run uvicorn until interrupted (the app's lifespan starts and stops the services). With --frontends
    N > 1 this process supervises N front-end processes instead (frontends.py), each building its own
    services from `specs` and `make_config` (a picklable callable)."""
    c = services.config
    if c.frontends > 1:
        from solbench.serve import frontends

        assert specs is not None and make_config is not None, "--frontends needs the specs and make_config"
        frontends.supervise(c, specs, make_config)
        return
    import uvicorn

    from solbench.serve.app import create_app

    # The event loop hands replies over from the worker threads: a 1 ms GIL switch interval (default 5)
    # keeps a reply from waiting behind a busy loop for longer than the request took on the GPU.
    sys.setswitchinterval(0.001)
    uvicorn.run(create_app(services), host=c.host, port=c.port, **uvicorn_options(c))


def uvicorn_options(c: ServeConfig) -> dict[str, Any]:
    """uvicorn's settings other than where to listen: the same for one server and for each front end."""
    return dict(ssl_certfile=str(c.tls_cert) if c.tls_cert else None, ssl_keyfile=str(c.tls_key) if c.tls_key else None,
                access_log=c.access_log, log_level="info", log_config=log_config(), timeout_graceful_shutdown=10,
                # uvicorn believes X-Forwarded-For from 127.0.0.1 by default: a local client could then
                # claim any address and walk past --allow. The allowlist sees the socket's peer only.
                proxy_headers=False)


def log_config() -> dict:
    """uvicorn's logging, with this package's logger printed the same way. Access lines hold the method,
    path and status only: a key travels in a header, which nothing here logs."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"][LOG] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config
