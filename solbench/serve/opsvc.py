"""One device's op service: a bounded queue in front of one worker process, which is replaced when it dies.

The server process never initialises CUDA: a sticky CUDA error or a crashing kernel takes down only the
worker (solbench/serve/opworker.py), and the next request goes to a fresh one. Two threads talk to the
worker over two pipes, one sending requests (at most WINDOW ahead, so the worker never waits for the
next one), one reading replies in order and handing each to the request waiting for it. When the
worker is lost, the request it was running (the oldest one sent) gets the error; those sent after it
never ran and go back to the head of the queue. A request that runs past the timeout is the culprit
too: its worker is killed.

Pipes, not a multiprocessing Queue: a reply is on its way when `send_bytes` returns, and with the pipe
buffers raised to 1 MiB a typical request or reply crosses in one write.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import multiprocessing as mp
import pickle
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from solbench.exec.process import exit_reason
from solbench.serve import opworker
from solbench.serve.frames import read_frame
from solbench.serve.limits import MemoryBudget, format_size
from solbench.serve.opworker import WorkerSetup

WINDOW = 2                 # requests sent ahead of the one the worker is running
HELLO_TIMEOUT_S = 1800.0   # the first start on CUDA may build the kernel library
RESTART_BACKOFF_S = 2.0
_PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031       # fcntl.F_SETPIPE_SZ (Linux); not exported by every Python's fcntl


@dataclass
class OpReply:
    status: int                       # 200 | 422 | 500 | 503 | 504
    body: bytes | bytearray = b""      # a reply body is read off the pipe into a bytearray (frames.py)
    error: str = ""
    where: str | None = None           # the request field a 422 names
    kernel_s: float | None = None
    worker_s: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class QueueFull(Exception):
    """The device's queue holds as many requests as it may: 503, try again shortly."""


class NotReady(Exception):
    """The worker could not start (the reason says why): 503."""


@dataclass
class _Job:
    id: int
    meta: dict[str, Any]
    body: bytes
    deliver: Callable[[OpReply], None]
    sent_at: float = 0.0


class DeviceFacts:
    """What a worker's hello says about the device, for a service or a pool of them (both have `hello`,
    None until a worker has started, and `setup`)."""

    hello: dict[str, Any] | None
    setup: WorkerSetup

    @property
    def device(self) -> str:
        """cpu or cuda:N once the worker has said which (--device auto resolves there)."""
        return str(self.hello["device"]) if self.hello else self.setup.device

    @property
    def kind(self) -> str | None:
        return str(self.hello["kind"]) if self.hello else None

    @property
    def library_ok(self) -> bool:
        return bool(self.hello and self.hello.get("library_ok"))


class OpService(DeviceFacts):
    def __init__(self, setup: WorkerSetup, queue_size: int = 64, timeout_s: float = 60.0,
                 gpu_memory: float = 0.9, window: int = WINDOW):
        self.setup = setup
        self.queue_size = queue_size
        self.timeout_s = timeout_s
        self.gpu_memory = gpu_memory
        self.window = window
        self.hello: dict[str, Any] | None = None    # the last worker's hello: the device's facts
        self.start_error: str | None = None
        self.restarts = 0
        self.served = 0
        self.last_memory = 0          # torch.cuda.memory_allocated() as the worker last reported it
        self._cond = threading.Condition()
        self._pending: deque[_Job] = deque()
        self._inflight: deque[_Job] = deque()
        self._ids = itertools.count(1)
        self._proc: Any = None
        self._send: Any = None
        self._recv: Any = None
        self._starting: Any = None
        self._last_reply = 0.0
        self._expect_exit = False
        self._stopping = False
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------ state seen by the app

    @property
    def ready(self) -> bool:
        # The supervisor clears _proc as soon as it sees the worker go (EOF on the reply pipe, or its
        # 0.2 s liveness poll), so the request path need not ask the process (is_alive is a waitpid,
        # which gives up the GIL: py-spy found the event loop waiting there to get it back in 10% of
        # its samples; its CPU time per request did not change: scripts/dev/serve_cost.py).
        return self._proc is not None and not self._stopping

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._inflight)

    def budget(self) -> MemoryBudget | None:
        """What one request may take on this device: a fraction of its memory less what was in use at
        start (the CUDA context, the kernel library); None until the worker has said hello."""
        h = self.hello
        if not h:
            return None
        total, free = int(h["total_bytes"]), int(h["free_bytes"])
        limit = int(total * self.gpu_memory) - (total - free)
        where = "device memory" if self.kind == "cuda" else "host memory"
        return MemoryBudget(max(0, limit), f"{self.gpu_memory:.0%} of {self.device}'s {format_size(total)} of "
                                           f"{where}, less {format_size(total - free)} in use at start (--gpu-memory)")

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        for target, name in ((self._supervise, "worker"), (self._sender, "sender")):
            t = threading.Thread(target=target, name=f"solbench-{name}-{self.setup.device}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            jobs = list(self._inflight) + list(self._pending)
            self._inflight.clear()
            self._pending.clear()
            self._cond.notify_all()
        for job in jobs:
            job.deliver(OpReply(503, error="the server is shutting down"))
        self._close_worker(timeout_s)
        for t in self._threads:
            t.join(timeout=timeout_s)

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until the worker has said hello (True) or failed to start (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.ready and not self.start_error:
            time.sleep(0.05)
        return self.ready

    # ------------------------------------------------------------ requests

    async def call(self, meta: dict[str, Any], body: bytes = b"") -> OpReply:
        """Queue one request and wait for its reply. Raises QueueFull or NotReady (both 503)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[OpReply] = loop.create_future()

        def deliver(reply: OpReply) -> None:
            loop.call_soon_threadsafe(_resolve, future, reply)

        self._enqueue(meta, body, deliver, bounded=meta.get("type") == "op")
        return await future

    async def stats(self, trim: bool = False) -> dict[str, Any]:
        """The worker's memory figures (after emptying its allocator's cache when `trim`)."""
        reply = await self.call({"type": "stats", "trim": trim})
        return reply.meta

    def _enqueue(self, meta: dict[str, Any], body: bytes, deliver: Callable[[OpReply], None], bounded: bool) -> None:
        with self._cond:
            if self._stopping:
                raise NotReady("the server is shutting down")
            if self._proc is None and self.start_error:   # the last start failed: do not queue behind it
                raise NotReady(f"the worker for {self.device} could not start: {self.start_error}")
            if bounded and len(self._pending) >= self.queue_size:
                raise QueueFull(f"{self.device}'s queue is full ({self.queue_size} requests waiting, --queue)")
            job = _Job(next(self._ids), {**meta, "body": bool(body)}, body, deliver)
            job.meta["id"] = job.id
            self._pending.append(job)
            self._cond.notify_all()

    # ------------------------------------------------------------ the two threads

    def _sender(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not (self._pending and self._send is not None
                                                  and len(self._inflight) < self.window):
                    self._cond.wait(0.5)
                if self._stopping:
                    return
                job = self._pending.popleft()
                job.sent_at = time.monotonic()
                self._inflight.append(job)
                conn = self._send
            try:
                conn.send_bytes(pickle.dumps(job.meta))
                if job.body:
                    conn.send_bytes(job.body)
            except (OSError, ValueError):   # the worker is gone: the supervisor re-queues this job
                time.sleep(0.01)

    def _supervise(self) -> None:
        while not self._stopping:
            try:
                started = self._proc is not None or self._spawn()
            except Exception as exc:  # e.g. no process can be spawned: say so on /readyz, try again
                self.start_error, started = f"{type(exc).__name__}: {exc}", False
            if not started:
                time.sleep(RESTART_BACKOFF_S)
                continue
            lost = self._relay()
            if self._stopping:
                return
            self._worker_lost(*lost)

    def _spawn(self) -> bool:
        ctx = mp.get_context("spawn")
        req_r, req_w = ctx.Pipe(duplex=False)
        rep_r, rep_w = ctx.Pipe(duplex=False)
        for conn in (req_w, rep_w):
            _widen(conn)
        proc = ctx.Process(target=opworker.main, args=(self.setup, req_r, rep_w), daemon=True,
                           name=f"solbench-worker-{self.setup.device}")
        self._starting = proc
        proc.start()
        req_r.close()
        rep_w.close()
        hello = _read_hello(proc, rep_r)
        self._starting = None
        if not hello.get("ok"):
            self.start_error = str(hello.get("error"))
            proc.kill()
            proc.join(5)
            req_w.close()
            rep_r.close()
            return False
        with self._cond:
            self._proc, self._send, self._recv = proc, req_w, rep_r
            self.hello, self.start_error, self._expect_exit = hello, None, False
            self._cond.notify_all()
        return True

    def _relay(self) -> tuple[str, int]:
        """Hand replies to their requests until the worker is lost: (why, the status for the culprit)."""
        while not self._stopping:
            try:
                if not self._recv.poll(0.2):
                    late = self._overdue()
                    if late:
                        self._proc.kill()
                        return late, 504
                    if not self._proc.is_alive():
                        return f"the worker crashed ({exit_reason(self._proc.exitcode)})", 500
                    continue
                meta = pickle.loads(self._recv.recv_bytes())
                body = read_frame(self._recv) if meta.get("body") else b""
            except (EOFError, OSError):
                self._proc.join(2)
                return f"the worker crashed ({exit_reason(self._proc.exitcode)})", 500
            self._deliver(meta, body)
        return "the server is shutting down", 503

    def _overdue(self) -> str | None:
        with self._cond:
            if not self._inflight:
                return None
            head = self._inflight[0]
            if head.meta.get("type") != "op":
                return None
            started = max(head.sent_at, self._last_reply)   # the worker starts it when the one before ends
            if time.monotonic() - started <= self.timeout_s:
                return None
            return f"ran past the {self.timeout_s:g} s limit (--op-timeout): the worker was killed"

    def _deliver(self, meta: dict[str, Any], body: bytes) -> None:
        with self._cond:
            job = self._inflight.popleft()
            self._last_reply = time.monotonic()
            if meta.get("fatal"):
                self._expect_exit = True
            self._cond.notify_all()
        if meta.get("type") == "op":
            self.served += 1
            self.last_memory = int(meta.get("memory_allocated", self.last_memory))
        if meta.get("ok"):
            job.deliver(OpReply(200, body, kernel_s=meta.get("kernel_s"), worker_s=meta.get("worker_s"), meta=meta))
        else:
            job.deliver(OpReply(int(meta.get("status", 500)), error=str(meta.get("error")), where=meta.get("field"),
                                meta=meta))

    def _worker_lost(self, why: str, status: int) -> None:
        with self._cond:
            culprit = None if self._expect_exit else (self._inflight.popleft() if self._inflight else None)
            self._pending.extendleft(reversed(self._inflight))   # sent after the culprit: they never ran
            self._inflight.clear()
            proc, self._proc, self._send = self._proc, None, None
            recv, self._recv = self._recv, None
            self.restarts += 1     # `hello` stays: the device's facts hold for the next worker too
        if culprit is not None:
            culprit.deliver(OpReply(status, error=f"{why} while running this request; a fresh worker takes "
                                                  f"the next ones"))
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        recv.close()

    def _close_worker(self, timeout_s: float) -> None:
        if self._starting is not None and self._starting.is_alive():
            self._starting.kill()
        proc, send = self._proc, self._send
        if send is not None:
            try:
                send.close()      # the worker reads EOF and exits
            except OSError:
                pass
        if proc is not None:
            proc.join(timeout_s)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def _resolve(future: "asyncio.Future[OpReply]", reply: OpReply) -> None:
    if not future.done():          # the client may have gone away
        future.set_result(reply)


def _widen(conn: Any) -> None:
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            size = min(_PIPE_BYTES, int(f.read()))
        fcntl.fcntl(conn.fileno(), _F_SETPIPE_SZ, size)
    except (OSError, ValueError):   # not Linux, or not allowed: the default buffer works, a little slower
        pass


def _read_hello(proc: Any, conn: Any) -> dict[str, Any]:
    deadline = time.monotonic() + HELLO_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if conn.poll(0.2):
                return pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            break
        if not proc.is_alive():
            break
    return {"ok": False, "error": f"the worker did not start ({exit_reason(proc.exitcode)})"}
