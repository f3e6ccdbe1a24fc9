"""Reading a request or reply body off a pipe in one copy.

The server and its worker frame each message as multiprocessing's `Connection.send_bytes` does: a 4-byte
big-endian length (or -1 and then an 8-byte length, past 2 GiB), then the bytes. `recv_bytes` reads them
into a BytesIO and returns `getvalue()`: three copies of every body (the kernel's into a chunk, the
chunk into the BytesIO, the BytesIO into the result). `read_frame` reads the same frame straight into
one bytearray. Connections on POSIX keep no buffer of their own, so frames read this way and ones read by
`recv_bytes` can follow each other on the same pipe.
"""

from __future__ import annotations

import os
import struct
from typing import Any

_LONG = -1          # the length marker before an 8-byte length


def read_frame(conn: Any) -> bytearray:
    """The next message on `conn` (a multiprocessing Connection), as a new bytearray. EOFError when the
    pipe ends before the message starts, OSError when it ends inside one (as `recv_bytes`)."""
    fd = conn.fileno()
    (size,) = struct.unpack("!i", _read_exactly(fd, 4, first=True))
    if size == _LONG:
        (size,) = struct.unpack("!Q", _read_exactly(fd, 8))
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise OSError("got end of file during message")
        got += n
    return buf


def _read_exactly(fd: int, n: int, first: bool = False) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            if first and got == 0:
                raise EOFError
            raise OSError("got end of file during message")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
