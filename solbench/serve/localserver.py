"""`solbench serve` as a child process on loopback, for load tests and benchmarks that need a real server
(scripts/h200/serve_check.py, scripts/dev/serve_cost.py): start it on a free port, wait for /readyz,
reach each of its front ends (--frontends N), stop it with its whole process group (its GPU workers too)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalServer:
    def __init__(self, args: list[str], log: Path | None = None, scheme: str = "http", verify: Any = True,
                 cwd: Path | None = None):
        """`solbench serve --port <free> ARGS`; its output goes to `log` (discarded when None). `scheme` and
        `verify` (httpx's: an ssl context trusting a self-signed certificate) for a server given --tls-*."""
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.verify = verify
        self.log = log
        cmd = [sys.executable, "-m", "solbench", "serve", "--port", str(self.port), *args]
        out = log.open("w") if log is not None else subprocess.DEVNULL
        try:
            # A session of its own, so that stop() ends this server and its workers together.
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)
        finally:
            if log is not None:
                out.close()

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """/readyz's answer once it is 200 (and, with --frontends N, once every front end says it is
        ready); RuntimeError when the server exits or is not ready in time."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-3000:] if self.log is not None else "(no log kept)"
                raise RuntimeError(f"server exited {self.proc.returncode}: {tail}")
            try:
                r = httpx.get(f"{self.url}/readyz", verify=self.verify, timeout=5)
                last = r.json()
                if r.status_code == 200 and all(f["ready"] for f in last.get("frontends", ())):
                    return last
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"not ready after {timeout_s} s: {last}")

    def frontend_count(self) -> int:
        """How many front ends answer on the port (1 without --frontends)."""
        ready = httpx.get(f"{self.url}/readyz", verify=self.verify, timeout=30).json()
        return len(ready.get("frontends", ())) or 1

    def per_frontend(self, path: str = "/readyz", tries: int = 400, **kw: Any) -> dict[int, httpx.Response]:
        """GET `path` as each front end answers it, by index: over fresh connections (the kernel gives each
        new one to any front end) until every front end has answered. `kw`: httpx.get's (params, headers)."""
        count, got = self.frontend_count(), {}
        for _ in range(tries):
            r = httpx.get(f"{self.url}{path}", verify=self.verify, timeout=30, **kw)
            got.setdefault(_answered_by(r), r)
            if len(got) == count:
                return dict(sorted(got.items()))
        raise RuntimeError(f"{path}: only front ends {sorted(got)} of {count} answered in {tries} connections")

    @contextlib.contextmanager
    def client_on(self, frontend: int, tries: int = 400, **kw: Any) -> Iterator[httpx.Client]:
        """An httpx.Client whose connection the kernel gave to front end `frontend`, closed after the block:
        a connection stays with the front end that accepted it, so the client's requests go there while it
        is kept alive (check each answer's X-Solbench-Frontend all the same). `kw`: httpx.Client's."""
        for _ in range(tries):
            with httpx.Client(base_url=self.url, verify=self.verify, **kw) as client:
                try:
                    reached = _answered_by(client.get("/healthz"))
                except httpx.HTTPError:
                    continue
                if reached == frontend:
                    yield client
                    return
        raise RuntimeError(f"no connection reached front end {frontend} in {tries} tries")

    def pids(self) -> dict[str, int]:
        """The server's processes by role: `server` (with --frontends N, the supervisor, and `frontend<i>`
        for each front end), and `worker<j>` or `frontend<i>.worker<j>` for their GPU workers (Linux)."""
        ready = httpx.get(f"{self.url}/readyz", verify=self.verify, timeout=30).json()
        out = {"server": self.proc.pid}
        if "frontends" not in ready:
            return {**out, **{f"worker{j}": p for j, p in enumerate(ready["worker_pids"])}}
        for f in ready["frontends"]:
            out[f"frontend{f['index']}"] = f["pid"]
            workers = [p for p in children(f["pid"]) if _is_spawned(p)]    # not a resource tracker
            out.update({f"frontend{f['index']}.worker{j}": p for j, p in enumerate(workers)})
        return out

    def stop(self) -> None:
        """SIGINT (a clean shutdown, up to 30 s), then SIGKILL to whatever of the group is left."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _answered_by(r: httpx.Response) -> int:
    """The front end that gave an answer (X-Solbench-Frontend; a server without --frontends is front end 0)."""
    return int(r.headers.get("x-solbench-frontend", "0"))


def children(pid: int) -> list[int]:
    """Process ids whose parent is `pid`, from /proc (Linux; empty elsewhere), lowest first."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(stat.parent.name))
    return sorted(out)


def _is_spawned(pid: int) -> bool:
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
