"""GET /metrics: Prometheus counters, histograms and gauges of one server.

One process (--frontends 1, the default): a registry of its own, so two servers in one process (as in the
tests) never share counts; its gauges are read when scraped.

Several front ends (--frontends N > 1): the kernel gives a scrape's connection to any one of them, and the
scrape must still show the whole server. Each front end writes its values to files in one folder the
supervisor made for the server (prometheus_client's multiprocess mode: a file per process and kind of
metric), and whichever front end is scraped merges every file there:

- counters and histograms (requests, latency, device time, errors) are summed over every process that
  ever wrote to the folder: a front end that died and was started again keeps its predecessor's counts
  (the dead one's files stay; the new process, with a new pid, writes files of its own; one given a dead
  one's pid again would go on from that one's counts, and overwrite only its worker restarts);
- each gauge is merged the way that makes it true for the server, and its HELP text says which: the
  queue depth and device memory summed over the live front ends (each has its own workers and queues),
  worker restarts summed over every front end that ran, runs queued as last read (the runs are shared);
- per front end: solbench_frontend_requests_total{frontend} (its op requests, its predecessors' too) and
  solbench_frontend_up{frontend, pid} (1 for each live one).

prometheus_client picks how values are kept when it is imported, from PROMETHEUS_MULTIPROC_DIR, so the
supervisor puts that in each front end's environment before it starts (frontends.py); a front end whose
environment lacks it refuses to start rather than show one process's counts as the server's. Gauges
cannot be read at scrape time there (set_function reads only the scraping process), so each front end sets
its own every shared.PUBLISH_S (`refresh`) and once more as it renders a scrape. The supervisor drops a
dead front end's live gauges (`forget`) and removes the folder when the server stops.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class _Reading:
    """A gauge kept by hand in multiprocess mode: `read` gives its value."""

    gauge: Any                      # a labelled Gauge (or the Gauge itself, without labels)
    read: Callable[[], float]
    scrape_only: bool = False       # the same in every front end (read from what they share): set when scraped


class Metrics:
    def __init__(self, frontend: int | None = None, directory: Path | None = None) -> None:
        """`frontend` and `directory`, both or neither (--frontends N > 1): this process's index among the
        server's front ends, and the folder every front end writes its values to."""
        if (frontend is None) != (directory is None):
            raise ValueError("a front end's metrics need both its index and the server's metrics folder")
        self.frontend = frontend
        self.directory = Path(directory) if directory is not None else None
        self._readings: list[_Reading] = []
        if self.directory is not None:
            _check_multiprocess(self.directory)
            # No registry of their own: what a scrape shows is read back from the folder (render).
            self.registry = merged_registry(self.directory)
            r = None
        else:
            self.registry = r = CollectorRegistry()
        shared = self.directory is not None
        summed, over = (", summed over the front ends", ", over all the front ends") if shared else ("", "")
        self.requests = Counter("solbench_requests", "Requests answered, by route, op and HTTP status" + summed,
                                ["route", "op", "status"], registry=r)
        self.latency = Histogram("solbench_request_seconds", "Time from request to response, by route and op" + over,
                                 ["route", "op"], buckets=_LATENCY_BUCKETS, registry=r)
        self.kernel = Histogram("solbench_op_device_seconds", "Time the implementation ran on the device, by op" + over,
                                ["op"], buckets=_LATENCY_BUCKETS, registry=r)
        self.errors = Counter("solbench_errors", "Requests that failed on the server's side, by kind" + summed,
                              ["kind"], registry=r)
        self.restarts = _gauge("solbench_worker_restarts", "Times a device's worker was replaced", ["device"], r,
                               shared, "sum", "summed over every front end that ran, those since replaced too")
        self.queue = _gauge("solbench_queue_depth", "Requests queued or running, by device", ["device"], r, shared,
                            "livesum", "summed over the live front ends, each of which has its own queue and workers")
        self.memory = _gauge("solbench_device_memory_allocated_bytes",
                             "torch.cuda.memory_allocated() in the device's worker, reported after a request at most "
                             "every 0.25 s", ["device"], r, shared, "livesum",
                             "summed over the live front ends' workers (each front end has its own, with a CUDA "
                             "context each)")
        self.runs = _gauge("solbench_runs_queued", "Benchmark runs queued or running", [], r, shared,
                           "livemostrecent", "the whole server's (the front ends share the runs), as the front end "
                           "that answered this scrape read them")
        self.by_frontend = self.up = None
        if shared:
            self.by_frontend = Counter("solbench_frontend_requests", "Op requests answered by each front end "
                                       "(--frontends), its predecessors' too if it was started again; they add up "
                                       "to solbench_requests_total{route=\"ops\"}", ["frontend"], registry=None)
            self.up = Gauge("solbench_frontend_up", "1 for each live front end (--frontends), with its pid",
                            ["frontend"], registry=None, multiprocess_mode="liveall")
            self.up.labels(str(frontend)).set(1)

    def watch(self, device: str, depth: Callable[[], float], restarts: Callable[[], float],
              memory: Callable[[], float]) -> None:
        """Gauges read when scraped (or, with front ends, every `refresh`), not kept up to date by hand."""
        self._read(self.queue.labels(device), depth)
        self._read(self.restarts.labels(device), restarts)
        self._read(self.memory.labels(device), memory)

    def watch_runs(self, depth: Callable[[], float]) -> None:
        # The runs' files are every front end's: only the one scraped needs to read them (a folder scan).
        self._read(self.runs, depth, scrape_only=True)

    def _read(self, gauge: Any, read: Callable[[], float], scrape_only: bool = False) -> None:
        if self.directory is None:
            gauge.set_function(read)
        else:
            self._readings.append(_Reading(gauge, read, scrape_only))

    def refresh(self, scraped: bool = False) -> None:
        """Front ends: write this process's gauges where the other front ends' scrapes read them."""
        for reading in self._readings:
            if scraped or not reading.scrape_only:
                reading.gauge.set(float(reading.read()))

    def observe(self, route: str, op: str, status: int, seconds: float, kernel_s: float | None = None) -> None:
        self.requests.labels(route, op, str(status)).inc()
        self.latency.labels(route, op).observe(seconds)
        if kernel_s is not None:
            self.kernel.labels(op).observe(kernel_s)
        if status >= 500:
            self.errors.labels(_error_kind(status)).inc()
        if self.by_frontend is not None:
            self.by_frontend.labels(str(self.frontend)).inc()

    def render(self) -> bytes:
        if self.directory is not None:
            self.refresh(scraped=True)
        return generate_latest(self.registry)


def merged_registry(directory: Path) -> CollectorRegistry:
    """A registry that reads every front end's values from `directory` each time it is collected."""
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return registry


def child_environment(directory: Path) -> dict[str, str]:
    """What a front end's environment needs, before it imports prometheus_client, to write to `directory`."""
    return {MULTIPROC_ENV: str(directory)}


def forget(directory: Path, pid: int) -> None:
    """A front end that exited: its live gauges leave the merge (its counters and histograms stay)."""
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(pid, str(directory))


def _gauge(name: str, help_: str, labels: list[str], registry: CollectorRegistry | None, shared: bool, mode: str,
           merged: str) -> Gauge:
    if not shared:
        return Gauge(name, help_, labels, registry=registry)
    return Gauge(name, f"{help_}; {merged}", labels, registry=None, multiprocess_mode=mode)


def _check_multiprocess(directory: Path) -> None:
    from prometheus_client import values

    # Without multiprocess values this process would count for itself alone, and the merge would never see it.
    if not getattr(values.ValueClass, "_multiprocess", False) or os.environ.get(MULTIPROC_ENV) != str(directory):
        raise RuntimeError(f"a front end's metrics need {MULTIPROC_ENV}={directory} in its environment before "
                           f"prometheus_client is imported (the supervisor sets it: frontends.py)")
    if not directory.is_dir():
        raise RuntimeError(f"no metrics folder {directory}")


def _error_kind(status: int) -> str:
    return {500: "internal", 503: "unavailable", 504: "timeout"}.get(status, str(status))
