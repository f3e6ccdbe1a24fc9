"""`solbench serve --frontends N`: N uvicorn processes answering on one port, each with its own services
(its own event loop, op pool and --workers worker processes), supervised by the process that was started.

Why: one event loop was at a core's limit at about 1,000 requests/s on the H200 host (docs/PERF.md,
issue 17), whatever the workers did. N loops do that work side by side.

How they share the port: the supervisor binds N sockets to the same address with SO_REUSEPORT and hands
one to each front end. The kernel then spreads new connections over the N accept queues by a hash of the
connection's addresses, so each front end takes about 1/N of them. One listening socket inherited by N
processes would also work, but every process's event loop is woken for each new connection and the
first to run takes it: with epoll that is uneven, often one process taking most connections. The
supervisor binds all N before any front end starts, so a port in use is one clear error, and port 0
resolves to one port for all. Linux lets only processes of the same user join the port (SO_REUSEPORT),
and the supervisor first binds it without, so it never joins a port another server holds.

The supervisor keeps its copies of the sockets: a front end that dies is started again on the same
socket, and connections that arrived meanwhile wait in its queue. What the front ends share lives in a
file in /dev/shm (shared.py: each one's state, the rate limit's counters, sharedrate.py), in a folder
beside it where each writes its Prometheus values, merged by whichever is scraped (metrics.py; the
supervisor names it in each front end's environment, and drops a dead one's live gauges), and in the runs
folder under --out (runfiles.py); everything else is per front end (queue bounds, workers).

TLS: each front end's uvicorn gets the same --tls-cert and --tls-key and wraps the connections of its own
socket; the supervisor loads the pair once first, so a bad one is one clear error rather than N front
ends dying at start.

Stopping: Ctrl-C reaches every process of the terminal's group; the supervisor also sends each front end
SIGTERM (SIGINT or SIGTERM to the supervisor alone, e.g. from a service manager, stops them all too). A
front end's uvicorn shuts down gracefully on the first of these (only a second SIGINT forces it), then its
workers, which ignore SIGINT, leave when their pipes close. Front ends are spawned with SIGINT ignored, so
a Ctrl-C while one is still importing is no KeyboardInterrupt traceback; and each asks the kernel for a
SIGTERM should the supervisor die without stopping them (PR_SET_PDEATHSIG), so none is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import logging.config
import multiprocessing as mp
import os
import signal
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from solbench.errors import UserError
from solbench.serve import metrics, shared
from solbench.serve.runfiles import fail_leftovers
from solbench.serve.runs import MakeConfig
from solbench.serve.server import LOG, Place, ServeConfig, build, log_config, uvicorn_options
from solbench.serve.sharedrate import SLOTS
from solbench.spec import OpSpec

BACKLOG = 2048
STOP_WAIT_S = 40.0          # a front end's graceful shutdown (10 s) and its workers' (10 s each), with room
RESTART_BACKOFF_S = 1.0
QUICK_DEATH_S = 10.0        # a front end that dies this soon after starting, three times running, ends it all
_PR_SET_PDEATHSIG = 1


@dataclass
class _Frontend:
    index: int
    sock: socket.socket
    proc: Any = None
    started: float = 0.0
    quick_deaths: int = 0


def bind(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one address (SO_REUSEPORT); port 0 becomes the first one's port."""
    if not hasattr(socket, "SO_REUSEPORT") or not sys.platform.startswith("linux"):
        raise UserError("needs Linux (SO_REUSEPORT spreading connections over the front ends)", field="--frontends")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks: list[socket.socket] = []
    try:
        # First a bind without SO_REUSEPORT: a port held by anything, another `serve --frontends` too
        # (which the kernel would otherwise let these sockets join, taking half its connections), is an error.
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            port = probe.getsockname()[1]
        for _ in range(count):
            s = socket.socket(family, socket.SOCK_STREAM)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind((host, port))
            port = s.getsockname()[1]
            s.listen(BACKLOG)
    except OSError as exc:
        for s in socks:
            s.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--port") from None
    return socks


def supervise(config: ServeConfig, specs: dict[str, OpSpec], make_config: MakeConfig) -> None:
    """Start config.frontends front ends on one port and keep them running until SIGINT or SIGTERM."""
    logging.config.dictConfig(log_config())
    log = logging.getLogger(LOG)
    check_tls(config)
    socks = bind(config.host, config.port, config.frontends)
    try:
        left = fail_leftovers(Path(config.out_dir) / "runs", ("queued", "running"), "the server stopped before "
                              "this run finished")
    except OSError as exc:
        for s in socks:
            s.close()
        raise UserError(f"cannot keep runs in {config.out_dir}/runs: {exc}", field="--out") from None
    path = shared.create(config.frontends, SLOTS)
    if left:
        log.info("%d runs of an earlier server in %s/runs never finished: marked failed", left, config.out_dir)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    ends = [_Frontend(i, s) for i, s in enumerate(socks)]
    try:
        for end in ends:
            _start(end, config, specs, make_config, path)
        log.info("%d front ends on %s://%s:%d (pids %s), %d worker(s) each", len(ends), config.scheme, config.host,
                 socks[0].getsockname()[1], ", ".join(str(e.proc.pid) for e in ends), config.workers)
        _watch(ends, stop, config, specs, make_config, path, log)
    finally:
        _stop_all(ends, log)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for s in socks:
            s.close()
        shared.remove(path)
        log.info("all %d front ends stopped", len(ends))


def _watch(ends: list[_Frontend], stop: threading.Event, config: ServeConfig, specs: dict[str, OpSpec],
           make_config: MakeConfig, path: Path, log: logging.Logger) -> None:
    """Until `stop`: a front end that exits is started again (on its socket); one that keeps dying at
    start ends the server, with its exit status in the log."""
    while not stop.wait(0.2):
        for end in ends:
            if end.proc.is_alive():
                continue
            code = end.proc.exitcode
            end.quick_deaths = end.quick_deaths + 1 if time.monotonic() - end.started < QUICK_DEATH_S else 0
            if end.quick_deaths >= 3:
                log.error("front end %d exited (status %s) three times within %g s of starting: stopping the server",
                          end.index, code, QUICK_DEATH_S)
                raise SystemExit(1)
            log.warning("front end %d (pid %d) exited (status %s): starting it again", end.index, end.proc.pid, code)
            # Its queue depth and memory leave /metrics; its counts stay there, under its pid.
            metrics.forget(shared.metrics_dir(path), end.proc.pid)
            if stop.wait(RESTART_BACKOFF_S):
                return
            _start(end, config, specs, make_config, path)


def _start(end: _Frontend, config: ServeConfig, specs: dict[str, OpSpec], make_config: MakeConfig,
           path: Path) -> None:
    ctx = mp.get_context("spawn")
    place = Place(end.index, config.frontends, path)
    proc = ctx.Process(target=frontend_main, args=(config, specs, make_config, place, end.sock, os.getpid()),
                       name=f"solbench-frontend-{end.index}")
    # SIGINT ignored while spawning: the child starts with it ignored (Python then installs no
    # KeyboardInterrupt handler), so a Ctrl-C during its imports prints nothing; uvicorn catches it later.
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _environment(metrics.child_environment(place.metrics_dir)):
            proc.start()
    finally:
        signal.signal(signal.SIGINT, handler)
    end.proc, end.started = proc, time.monotonic()


@contextlib.contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    """`extra` in os.environ while a front end is spawned, and no longer. The spawned interpreter takes
    this process's environment when it starts, and prometheus_client reads its multiprocess folder when it
    is imported there, before any of this package's code runs in it; multiprocessing has no other way to
    hand a child an environment. Only the supervisor's main thread runs here."""
    before = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_tls(config: ServeConfig) -> None:
    """The certificate and key load as each front end's uvicorn will load them (UserError naming the flag)."""
    if config.tls_cert is None or config.tls_key is None:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # A password callback so that an encrypted key is an error here, never a prompt on the terminal.
        context.load_cert_chain(str(config.tls_cert), str(config.tls_key), password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        field, message = _tls_problem(Path(config.tls_cert), Path(config.tls_key), exc)
        raise UserError(message, field=field) from None


def _tls_problem(cert: Path, key: Path, exc: Exception) -> tuple[str, str]:
    """Which of the two files is wrong, as far as can be told (OpenSSL says only "PEM lib" for either)."""
    if isinstance(exc, ssl.SSLError) and exc.reason == "KEY_VALUES_MISMATCH":
        return "--tls-key", f"the key {key} is not the private key of the certificate {cert}"
    for flag, path, marker, what in (("--tls-cert", cert, "CERTIFICATE-----", "a PEM certificate"),
                                     ("--tls-key", key, "PRIVATE KEY-----", "a PEM private key")):
        try:
            text = path.read_text(errors="replace")
        except OSError as err:
            return flag, f"cannot read {path}: {err.strerror or err}"
        if marker not in text:
            return flag, f"{path} is not {what}"
        if flag == "--tls-key" and "ENCRYPTED" in text:
            return flag, f"{path} is encrypted: solbench serve takes an unencrypted key (it has no passphrase flag)"
    return "--tls-key", f"cannot load the certificate {cert} with the key {key}: {exc}"


def _stop_all(ends: list[_Frontend], log: logging.Logger) -> None:
    live = [e for e in ends if e.proc is not None and e.proc.is_alive()]
    for end in live:
        _signal(end.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    for end in live:
        end.proc.join(max(0.1, deadline - time.monotonic()))
        if end.proc.is_alive():
            log.error("front end %d (pid %d) did not stop in %g s: killed", end.index, end.proc.pid, STOP_WAIT_S)
            end.proc.kill()
            end.proc.join(5)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------- in each front end

def frontend_main(config: ServeConfig, specs: dict[str, OpSpec], make_config: MakeConfig, place: Place,
                  sock: socket.socket, supervisor: int) -> None:
    """One front end: its services on its socket, until uvicorn is told to stop."""
    _die_with(supervisor)
    import uvicorn

    from solbench.serve.app import create_app

    sys.setswitchinterval(0.001)      # as server.serve: replies from the pipe threads do not wait behind the loop
    services = build(config, specs, make_config, place)
    server = uvicorn.Server(uvicorn.Config(create_app(services), **uvicorn_options(config)))
    # Until uvicorn installs its own handlers (in run), a SIGINT or SIGTERM asks it to stop as soon as it
    # has started; and uvicorn raises the signal that stopped it again after its shutdown, under these
    # handlers, where it is harmless (a front end that stopped cleanly exits 0, not of its signal).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    server.run(sockets=[sock])


def _die_with(supervisor: int) -> None:
    """SIGTERM when the supervisor dies (Linux); if it is already gone, stop now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):      # not Linux: the supervisor's shutdown still stops this process
        pass
    if os.getppid() != supervisor:
        raise SystemExit(0)
