"""Benchmark runs of a server with several front ends (`--frontends N`): each run's state is a JSON file
under the server's --out folder (runs/<id>.json, written atomically), so whichever front end a request
reaches can queue a run or answer for it, and one front end (the first) executes them, one at a time,
taking the oldest queued file.

The same API as runs.RunService: a run request is checked and planned by the front end that receives it
(a 422 comes back at once), and planned again from its request by the executing front end; only the key
that submitted a run sees it (the owner is in its file: a key's name, never the key); --run-queue bounds
the queued runs of the whole server. A folder lock (flock, released by the kernel if its holder dies)
makes "count the queue, then add to it" and "take the oldest" atomic between front ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from solbench.jsonio import write_json_atomic
from solbench.runrequest import RunRequest
from solbench.serve.runs import MAX_KEPT, MakeConfig, Planner, RunJob, RunQueueFull, execute, run_to_end
from solbench.spec import OpSpec

_ID = re.compile(r"^[0-9a-f]{16}$")     # secrets.token_hex(8): anything else never reaches the file system
POLL_S = 0.25                           # how often the executing front end looks for a queued run
PROGRESS_S = 0.25                       # a running run's file is rewritten at most this often
PUBLISH_WAIT_S = 0.25                   # front ends publish their op counts every 0.1 s (shared.PUBLISH_S)
LIVE = ("queued", "running")


class DiskRunService:
    def __init__(self, specs: dict[str, OpSpec], make_config: MakeConfig, queue_size: int, out_dir: Path,
                 served: Callable[[], int], executes: bool):
        self.plan = Planner(specs, make_config)
        self.queue_size = queue_size
        self.out_dir = Path(out_dir)
        self.folder = self.out_dir / "runs"
        self.served = served
        self.executes = executes
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Ids of runs seen finished: their files never change again, so scans skip them (the executing
        # front end scans every POLL_S, and reading hundreds of files would take its event loop's GIL).
        self._final: set[str] = set()

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.executes:
            return
        # This front end executes runs: one still marked running was cut off when it last stopped.
        fail_leftovers(self.folder, ("running",), "the server stopped while this run was running")
        self._thread = threading.Thread(target=self._runner, name="solbench-runs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    # ------------------------------------------------------------ what the routes call

    @property
    def depth(self) -> int:
        return len(self._live())

    def submit(self, doc: Any, owner: str) -> RunJob:
        """As RunService.submit; the queue bound is the whole server's."""
        request = RunRequest.from_json(doc)
        prepared = self.plan(request)
        job = RunJob(secrets.token_hex(8), owner, request, total=prepared.total)
        with _folder_lock(self.folder):
            waiting = sum(1 for j in self._live() if j.state == "queued")
            if waiting >= self.queue_size:
                raise RunQueueFull(f"{waiting} runs are already waiting (--run-queue {self.queue_size})")
            save(self.folder, job)
        return job

    def get(self, run_id: str, owner: str) -> RunJob | None:
        if not _ID.match(run_id):
            return None
        job = load(self.folder / f"{run_id}.json")
        return job if job is not None and job.owner == owner else None

    def _live(self) -> list[RunJob]:
        """The queued and running runs, from their files."""
        live = []
        for job in _jobs(self.folder, skip=self._final):
            if job.state in LIVE:
                live.append(job)
            else:
                self._final.add(job.id)
        return live

    # ------------------------------------------------------------ the executing front end

    def _runner(self) -> None:
        while not self._stopping.wait(POLL_S):
            job = self._take()
            if job is not None:
                self._run(job)

    def _take(self) -> RunJob | None:
        with _folder_lock(self.folder):
            queued = sorted((j for j in self._live() if j.state == "queued"), key=lambda j: j.created)
            if not queued:
                return None
            job = queued[0]
            job.state, job.started = "running", time.time()
            save(self.folder, job)
            return job

    def _run(self, job: RunJob) -> None:
        last_write = [0.0]

        def progress(j: RunJob) -> None:
            if time.monotonic() - last_write[0] >= PROGRESS_S:
                last_write[0] = time.monotonic()
                save(self.folder, j)

        def work() -> None:
            prepared = self.plan(job.request)       # the submitting front end's plan stayed there
            job.total = prepared.total
            # The front ends publish their op counts every 0.1 s: the count at the end waits for that,
            # so requests answered in the run's last moments are counted too.
            execute(job, prepared, _counted_after(self.served, PUBLISH_WAIT_S), self.out_dir, progress)

        try:
            run_to_end(job, work)
        finally:
            save(self.folder, job)
            _forget_old(self.folder)


def _counted_after(served: Callable[[], int], wait_s: float) -> Callable[[], int]:
    """`served`, its second and later reads after a wait of `wait_s` (the first is the run's start)."""
    calls = [0]

    def read() -> int:
        calls[0] += 1
        if calls[0] > 1:
            time.sleep(wait_s)
        return served()

    return read


# ---------------------------------------------------------------- the files

def record(job: RunJob) -> dict[str, Any]:
    """A run's file: what GET /v1/runs/{id} answers, plus its owner and results path."""
    return {**job.to_json(), "owner": job.owner, "results": str(job.results) if job.results else None}


def from_record(doc: dict[str, Any]) -> RunJob:
    return RunJob(id=doc["id"], owner=doc["owner"], request=RunRequest.from_json(doc["request"]), state=doc["state"],
                  created=doc["created"], started=doc["started"], finished=doc["finished"], done=doc["done"],
                  total=doc["total"], last=doc["last"], error=doc["error"],
                  results=Path(doc["results"]) if doc["results"] else None, run_id=doc["run_id"])


def save(folder: Path, job: RunJob) -> None:
    write_json_atomic(folder / f"{job.id}.json", record(job))


def load(path: Path) -> RunJob | None:
    """A run's file, or None when there is none (or it is not one of ours)."""
    try:
        return from_record(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _jobs(folder: Path, skip: set[str] | frozenset[str] = frozenset()) -> Iterator[RunJob]:
    for path in folder.glob("*.json"):
        if _ID.match(path.stem) and path.stem not in skip:
            job = load(path)
            if job is not None:
                yield job


def fail_leftovers(folder: Path, states: tuple[str, ...], why: str) -> int:
    """Mark runs left in `states` by a server that stopped as failed; how many there were."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    with _folder_lock(folder):
        for job in _jobs(folder):
            if job.state in states:
                job.state, job.error, job.finished = "failed", why, time.time()
                save(folder, job)
                n += 1
    return n


def _forget_old(folder: Path) -> None:
    """Keep the files of the last MAX_KEPT finished runs (their results files stay)."""
    finished = sorted((j for j in _jobs(folder) if j.state not in LIVE), key=lambda j: j.finished or 0)
    for job in finished[: max(0, len(finished) - MAX_KEPT)]:
        (folder / f"{job.id}.json").unlink(missing_ok=True)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
