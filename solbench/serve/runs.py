"""Benchmark runs asked for over HTTP: checked when submitted, queued, run one at a time through
solbench.pipeline (so planned, validated and measured exactly as `solbench run` would), results files
kept for download.

A run shares the device with op traffic: the results file says how many op requests the server answered
while it ran (env.serve.op_requests_during_run), so a noisy measurement is never mistaken for a clean one.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from solbench import pipeline
from solbench.errors import UserError
from solbench.exec import Executor, ProcessExecutor
from solbench.job import Event, Probe, ProbeJob, WorkerJob
from solbench.results import Record
from solbench.runrequest import RequestError, RunRequest
from solbench.spec import OpSpec

MAX_KEPT = 256                  # finished runs remembered (their files stay on disk)
MakeConfig = Callable[[RunRequest], pipeline.RunConfig]


class RunQueueFull(Exception):
    pass


@dataclass
class RunJob:
    id: str
    owner: str                       # the key that submitted it: only that key sees it
    request: RunRequest
    prepared: pipeline.Prepared | None = None
    state: str = "queued"            # queued | running | done | failed
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    done: int = 0
    total: int = 0
    last: str = ""
    error: str | None = None
    results: Path | None = None
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "done": self.done, "total": self.total, "last": self.last,
                "error": self.error, "run_id": self.run_id, "created": self.created, "started": self.started,
                "finished": self.finished, "request": self.request.to_json(),
                "results_url": f"/v1/runs/{self.id}/results" if self.results else None}


class _ProbeOnce:
    """An executor whose device probe is made once per server: probing spawns a process (seconds), and a
    run's plan needs only the device's facts, which do not change while the server runs."""

    def __init__(self, inner: Executor, cache: dict[tuple[str, str], Probe], lock: threading.Lock):
        self.inner, self.cache, self.lock = inner, cache, lock

    def run(self, job: WorkerJob) -> Iterator[Event]:
        return self.inner.run(job)

    def probe(self, job: ProbeJob) -> Probe:
        key = (job.device, str(job.cache_dir))
        with self.lock:
            if key not in self.cache:
                self.cache[key] = self.inner.probe(job)
            return self.cache[key]


class Planner:
    """A run request -> its plan, through the checks `solbench run` applies to its flags (RequestError or
    UserError: a 422). Blocks while the device is probed (the first run only)."""

    def __init__(self, specs: dict[str, OpSpec], make_config: MakeConfig):
        self.specs = specs
        self.make_config = make_config
        self._probes: dict[tuple[str, str], Probe] = {}
        self._probe_lock = threading.Lock()

    def __call__(self, request: RunRequest) -> pipeline.Prepared:
        config = self.make_config(request)
        executor = _ProbeOnce(ProcessExecutor(config.timeout_s), self._probes, self._probe_lock)
        return pipeline.prepare(config, self.specs, executor)


class RunService:
    def __init__(self, specs: dict[str, OpSpec], make_config: MakeConfig, queue_size: int = 4,
                 out_dir: Path = Path("results/serve"), served: Callable[[], int] = lambda: 0):
        self.specs = specs
        self.plan = Planner(specs, make_config)
        self.queue_size = queue_size
        self.out_dir = Path(out_dir)
        self.served = served
        self._jobs: OrderedDict[str, RunJob] = OrderedDict()
        self._queue: deque[RunJob] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._runner, name="solbench-runs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._queue) + sum(1 for j in self._jobs.values() if j.state == "running")

    def submit(self, doc: Any, owner: str) -> RunJob:
        """Check a run request as `solbench run` would, plan it, queue it. Blocks while the device is
        probed (the first run only). Raises RequestError or UserError (422), RunQueueFull (503)."""
        request = RunRequest.from_json(doc)
        prepared = self.plan(request)
        job = RunJob(secrets.token_hex(8), owner, request, prepared, total=prepared.total)
        with self._cond:
            if len(self._queue) >= self.queue_size:
                raise RunQueueFull(f"{len(self._queue)} runs are already waiting (--run-queue {self.queue_size})")
            self._jobs[job.id] = job
            self._queue.append(job)
            self._forget_old()
            self._cond.notify_all()
        return job

    def get(self, run_id: str, owner: str) -> RunJob | None:
        with self._cond:
            job = self._jobs.get(run_id)
        return job if job is not None and job.owner == owner else None

    def _forget_old(self) -> None:
        finished = [k for k, j in self._jobs.items() if j.state in ("done", "failed")]
        for k in finished[: max(0, len(self._jobs) - MAX_KEPT)]:
            del self._jobs[k]

    def _runner(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait(0.5)
                if self._stopping:
                    return
                job = self._queue.popleft()
                job.state, job.started = "running", time.time()
            run_to_end(job, lambda: self._execute(job))
            job.prepared = None     # let the plan and its executor go

    def _execute(self, job: RunJob) -> None:
        assert job.prepared is not None
        execute(job, job.prepared, self.served, self.out_dir)


def run_to_end(job: RunJob, work: Callable[[], None]) -> None:
    """`work()`, then the job done, or failed with the error's message; never raises: a run that fails
    (a bad request found late, a bug, a broken environment) says so and the server carries on."""
    try:
        work()
        job.state = "done"
    except UserError as exc:
        job.state, job.error = "failed", str(exc)
    except Exception as exc:
        job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        job.finished = time.time()


def execute(job: RunJob, prepared: pipeline.Prepared, served: Callable[[], int], out_dir: Path,
            progress: Callable[[RunJob], None] = lambda job: None) -> None:
    """Run a prepared job through the pipeline and write its results file; `progress` after each record.
    Raises what the pipeline raises (the caller marks the job failed)."""
    before = served()

    def on_record(r: Record) -> None:
        job.done += 1
        job.last = f"{r.op} {r.case} {r.dtype} {r.impl}: {r.status}"
        progress(job)

    run = pipeline.execute(prepared, on_record, command=f"solbench serve: POST /v1/runs {job.id}")
    run.run_id = f"{run.run_id}-{job.id}"
    run.env["serve"] = {"run": job.id, "op_requests_during_run": served() - before}
    job.results = pipeline.write(run, out_dir)[0]
    job.run_id = run.run_id


def request_error_field(exc: Exception) -> tuple[str | None, str]:
    """(field, message) of an error from a run request's checks, for a 422 body."""
    if isinstance(exc, RequestError):
        return exc.field, exc.message
    if isinstance(exc, UserError):
        return exc.field, exc.detail if exc.field else str(exc)
    return None, str(exc)
