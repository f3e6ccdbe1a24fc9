"""solbench/serve/frames.py: a body read off a pipe in one copy, framed as Connection.send_bytes frames it."""

from __future__ import annotations

import multiprocessing as mp
import threading

import pytest

from solbench.serve.frames import read_frame


@pytest.mark.parametrize("size", [0, 1, 16384, 16385, 3 << 20])
def test_a_frame_reads_back_what_send_bytes_sent_and_the_next_message_follows(size):
    r, w = mp.Pipe(duplex=False)
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    # A writer thread: a frame larger than the pipe's buffer only crosses while it is being read.
    t = threading.Thread(target=lambda: (w.send_bytes(payload), w.send_bytes(b"next")))
    t.start()
    got = read_frame(r)
    assert isinstance(got, bytearray) and got == payload
    assert r.recv_bytes() == b"next"                  # the framing is consumed exactly
    t.join()
    w.close()
    with pytest.raises(EOFError):
        read_frame(r)


def test_a_pipe_that_ends_inside_a_frame_is_an_oserror():
    r, w = mp.Pipe(duplex=False)
    import os
    import struct

    os.write(w.fileno(), struct.pack("!i", 100) + b"only ten b")
    w.close()
    with pytest.raises(OSError, match="end of file during message"):
        read_frame(r)
