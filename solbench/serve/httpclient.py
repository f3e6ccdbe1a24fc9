"""A lean HTTP/1.1 client for the load test: one keep-alive connection (`Conn`) that writes a request
prepared as one buffer and reads the answer by its Content-Length (or its chunks). No pool, no header
objects, no redirects: it speaks exactly what `solbench serve` answers, so its CPU per request is a
small fraction of a general client's (httpx spent 4-7 ms per 512 KiB answer on the H200 host, and
that wait was in the latency the load test reported: docs/PERF.md, issue 17)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

READ_LIMIT = 4 << 20


class ReplyError(Exception):
    """An answer that is not HTTP/1.1 as the server speaks it (the test counts it as unexpected)."""


class ClosedBeforeAnswer(ReplyError):
    """The connection closed before any byte of an answer: on a reused connection, the server's idle close."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]     # names lower-cased; a repeated name keeps its last value
    body: bytes


def ssl_context(verify: Any) -> ssl.SSLContext:
    """httpx's `verify` (True, False, or a context) as the context asyncio's streams take."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is False:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context()


class Conn:
    """One keep-alive connection; it reconnects by itself after the server closes one or after an error."""

    def __init__(self, url: str, verify: Any = True) -> None:
        u = urlsplit(url)
        self.host, self.tls = u.hostname or "127.0.0.1", u.scheme == "https"
        self.port = u.port or (443 if self.tls else 80)
        self.ctx = ssl_context(verify) if self.tls else None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        # limit: the buffer above which the stream stops reading the socket until asked for more; at the 64 KiB
        # default a 512 KiB answer pauses and resumes the transport several times.
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, ssl=self.ctx,
                                                                 limit=READ_LIMIT)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def send(self, request: bytes) -> Reply:
        """The answer to `request`. A kept-alive connection the server closed while idle (its keep-alive
        timeout) fails before any byte of an answer; then the request goes once more on a new connection,
        as general clients do. Requests here compute and change nothing, so sending one twice is safe."""
        reused = self.writer is not None
        try:
            return await self._exchange(request)
        except (ClosedBeforeAnswer, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
        return await self._exchange(request)

    async def _exchange(self, request: bytes) -> Reply:
        if self.writer is None:
            await self._open()
        assert self.reader is not None and self.writer is not None
        try:
            self.writer.write(request)
            await self.writer.drain()
            reply = await read_reply(self.reader)
        except BaseException:
            await self.close()
            raise
        if reply.headers.get("connection", "").lower() == "close":
            await self.close()
        return reply

    async def close(self) -> None:
        w, self.reader, self.writer = self.writer, None, None
        if w is not None:
            w.close()
            try:
                await w.wait_closed()
            except (OSError, ssl.SSLError):
                pass


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    """One HTTP/1.1 answer: the status line, headers, and a body framed by Content-Length or chunks (a body
    ended by closing the connection is not something `solbench serve` sends, and reads as empty here)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise ClosedBeforeAnswer("connection closed before an answer") from None
        raise ReplyError(f"connection closed inside an answer's head: {exc.partial[:80]!r}") from None
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ReplyError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ReplyError(f"not a header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunks(reader)
    else:
        length = headers.get("content-length", "0")
        if not length.isdigit():
            raise ReplyError(f"bad Content-Length: {length!r}")
        body = await reader.readexactly(int(length))
    return Reply(int(parts[1]), headers, body)


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = (await reader.readuntil(b"\r\n")).split(b";")[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise ReplyError(f"bad chunk size: {size_line[:40]!r}") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers, if any
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)
