"""`solbench serve` as a child process on loopback, for load tests and benchmarks that need a real server
(scripts/h200/serve_check.py, scripts/dev/serve_cost.py): start it on a free port, wait for /readyz,
stop it with its whole process group (its GPU workers too)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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
        """/readyz's answer once it is 200; RuntimeError when the server exits or is not ready in time."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-3000:] if self.log is not None else "(no log kept)"
                raise RuntimeError(f"server exited {self.proc.returncode}: {tail}")
            try:
                r = httpx.get(f"{self.url}/readyz", verify=self.verify, timeout=5)
                last = r.json()
                if r.status_code == 200:
                    return last
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"not ready after {timeout_s} s: {last}")

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
