"""The load generator's own ceiling: solbench.serve.loadgen against a server that answers every POST at
once with a fixed 512 KiB body (the size of a softmax 256 x 1024 bf16 answer). If this rate is far above
what `solbench serve` reaches, the generator is not what limits the serve measurement.

    python scripts/dev/loadgen_ceiling.py [--procs N] [--clients 16] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import socket
import sys

from solbench.serve import loadgen

BODY = b"\0" * (256 * 1024 * 2)
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nserver-timing: device;dur=0.1\r\n"
        b"content-length: %d\r\n\r\n" % len(BODY))


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            writer.write(HEAD + BODY)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def _serve(port: int) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()
    asyncio.run(main())


def _wait_for(port: int, timeout_s: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the instant server did not listen on port {port}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=8.0)
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = mp.get_context("spawn").Process(target=_serve, args=(port,), daemon=True)
    server.start()
    _wait_for(port)
    try:
        return loadgen.main([f"http://127.0.0.1:{port}", "--clients", str(a.clients), "--seconds", str(a.seconds),
                             "--procs", str(a.procs)])
    finally:
        server.kill()


if __name__ == "__main__":
    sys.exit(main())
