"""GET /metrics: Prometheus counters, histograms and gauges of one server, in a registry of its own
(two servers in one process, as in the tests, never share counts)."""

from __future__ import annotations

import os
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self, frontend: int | None = None) -> None:
        """`frontend`: this process's index among the server's front ends (--frontends N > 1); each has its
        own registry, and a scrape sees the one that answered it, named by solbench_frontend."""
        self.registry = CollectorRegistry()
        r = self.registry
        if frontend is not None:
            Gauge("solbench_frontend", "The front end (of --frontends) whose counts this scrape shows; 1",
                  ["frontend", "pid"], registry=r).labels(str(frontend), str(os.getpid())).set(1)
        self.requests = Counter("solbench_requests", "Requests answered, by route, op and HTTP status",
                                ["route", "op", "status"], registry=r)
        self.latency = Histogram("solbench_request_seconds", "Time from request to response, by route and op",
                                 ["route", "op"], buckets=_LATENCY_BUCKETS, registry=r)
        self.kernel = Histogram("solbench_op_device_seconds", "Time the implementation ran on the device, by op",
                                ["op"], buckets=_LATENCY_BUCKETS, registry=r)
        self.errors = Counter("solbench_errors", "Requests that failed on the server's side, by kind",
                              ["kind"], registry=r)
        self.restarts = Gauge("solbench_worker_restarts", "Times a device's worker was replaced", ["device"],
                              registry=r)
        self.queue = Gauge("solbench_queue_depth", "Requests queued or running, by device", ["device"], registry=r)
        self.memory = Gauge("solbench_device_memory_allocated_bytes",
                            "torch.cuda.memory_allocated() in the device's worker, reported after a request at most every 0.25 s",
                            ["device"], registry=r)
        self.runs = Gauge("solbench_runs_queued", "Benchmark runs queued or running", registry=r)

    def watch(self, device: str, depth: Callable[[], float], restarts: Callable[[], float],
              memory: Callable[[], float]) -> None:
        """Gauges read when scraped, not kept up to date by hand."""
        self.queue.labels(device).set_function(depth)
        self.restarts.labels(device).set_function(restarts)
        self.memory.labels(device).set_function(memory)

    def observe(self, route: str, op: str, status: int, seconds: float, kernel_s: float | None = None) -> None:
        self.requests.labels(route, op, str(status)).inc()
        self.latency.labels(route, op).observe(seconds)
        if kernel_s is not None:
            self.kernel.labels(op).observe(kernel_s)
        if status >= 500:
            self.errors.labels(_error_kind(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _error_kind(status: int) -> str:
    return {500: "internal", 503: "unavailable", 504: "timeout"}.get(status, str(status))
