"""What the front ends of `solbench serve --frontends N` share, without a server: the shared file, the
rate limit counted across processes, the runs kept on disk."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from solbench.errors import UserError
from solbench.runrequest import RunRequest
from solbench.serve import runfiles, shared
from solbench.serve.runs import RunJob, RunQueueFull
from solbench.serve.sharedrate import SharedRateLimiter


@pytest.fixture
def area():
    path = shared.create(2, 64)
    a = shared.SharedArea(path)
    yield a
    a.close()
    shared.remove(path)
    assert not path.parent.exists()


def test_shared_limiter_answers_like_the_one_process_limiter(area):
    lim = SharedRateLimiter("3/minute", area)
    assert [lim.hit("a") for _ in range(3)] == [None, None, None]
    wait = lim.hit("a")
    # The true wait of a sliding window: the three count on into the next minute, fading; a third of it
    # must pass before 3 x (1 - how far in) leaves room for one (up to 60 + 20 s).
    assert wait is not None and 20 <= wait <= 80 and wait == int(wait)
    assert lim.hit("b") is None                                   # per identity
    assert lim.hit("c", "1/hour") is None and 1 <= lim.hit("c", "1/hour") <= 7200   # a key's own rate
    with pytest.raises(UserError) as info:
        SharedRateLimiter("lots", area)
    assert info.value.field == "--rate"
    with pytest.raises(UserError) as info:
        SharedRateLimiter("0/second", area)
    assert info.value.field == "--rate"


def test_the_sliding_window_lets_requests_back_in_as_the_last_window_fades(area):
    lim = SharedRateLimiter("4 per 2 seconds", area)
    # Start just after a window boundary, so the four requests are in one window.
    while time.monotonic() % 2.0 > 0.1:
        time.sleep(0.01)
    # Refused until the four fade to three: the next window and a quarter of it (2 - 0.1 + 0.5 s at least).
    assert [lim.hit("x") for _ in range(5)] == [None] * 4 + [3.0]
    time.sleep(2.0)                # the next window: the last one's 4 count 4 x (1 - how far in) > 3
    assert lim.hit("x") == 1.0
    time.sleep(1.0)                # half way: 4 x 0.5 = 2, room for one more
    assert lim.hit("x") is None


def _hammer(path: Path, n: int, start, out) -> None:
    a = shared.SharedArea(path)
    lim = SharedRateLimiter("50/minute", a)
    start.wait()
    out.put(sum(lim.hit("key:ci") is None for _ in range(n)))
    a.close()


def test_one_budget_across_processes(area):
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(area.path, 40, start, out)) for _ in range(3)]
    for p in procs:
        p.start()
    start.set()
    allowed = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert sum(allowed) == 50, allowed            # 120 tries, one budget of 50, not three
    assert SharedRateLimiter("50/minute", area).hit("key:ci") is not None


def test_a_full_probe_run_fails_closed(monkeypatch):
    path = shared.create(1, 4)
    a = shared.SharedArea(path)
    try:
        lim = SharedRateLimiter("100/minute", a)
        assert all(lim.hit(f"ip:127.0.0.{i}") is None for i in range(4))     # four slots, four identities
        assert lim.hit("ip:127.0.0.99") == 1.0                                  # no slot: refused, not free
        assert lim.hit("ip:127.0.0.1") is None                                  # the counted ones go on
    finally:
        a.close()
        shared.remove(path)


def test_front_ends_publish_their_state(area):
    area.publish(1, True, 7)
    states = area.frontends()
    assert [s.index for s in states] == [0, 1]
    assert states[0].pid == 0 and not states[0].ready and states[0].age_s is None
    assert states[1].ready and states[1].served == 7 and states[1].age_s < 5
    assert area.served() == 7


# ---------------------------------------------------------------- runs on disk

def _service(folder: Path, queue: int = 2, executes: bool = False) -> runfiles.DiskRunService:
    svc = runfiles.DiskRunService({}, lambda r: None, queue, folder, served=lambda: 0, executes=executes)
    svc.plan = lambda request: type("Plan", (), {"total": 3})()           # planning is RunService's, tested there
    return svc


def test_runs_on_disk_are_seen_by_every_front_end_and_only_by_their_owner(tmp_path):
    a, b = _service(tmp_path), _service(tmp_path)
    job = a.submit({"ops": "add", "quick": True}, "key:ci")
    assert (tmp_path / "runs" / f"{job.id}.json").is_file()
    seen = b.get(job.id, "key:ci")
    assert seen is not None and seen.state == "queued" and seen.total == 3
    assert seen.request == RunRequest(ops="add", quick=True) and seen.to_json() == job.to_json()
    assert b.get(job.id, "key:other") is None                      # another key's run is hidden
    for bad in ("../runs/" + job.id, job.id + ".json", "", "A" * 16):
        assert b.get(bad, "key:ci") is None                        # never a path
    assert a.depth == b.depth == 1


def test_the_run_queue_bound_is_the_whole_servers(tmp_path):
    a, b = _service(tmp_path, queue=2), _service(tmp_path, queue=2)
    a.submit({"ops": "add"}, "key:ci")
    b.submit({"ops": "add"}, "key:ci")
    with pytest.raises(RunQueueFull, match="--run-queue 2"):
        a.submit({"ops": "add"}, "key:ci")


def test_leftover_runs_are_marked_failed(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    for i, state in enumerate(("queued", "running", "done")):
        runfiles.save(folder, RunJob(f"0123456789abcde{i}", "key:ci", RunRequest(), state=state))
    assert runfiles.fail_leftovers(folder, ("running",), "stopped") == 1
    states = {j.id[-1]: (j.state, j.error) for j in runfiles._jobs(folder)}
    assert states == {"0": ("queued", None), "1": ("failed", "stopped"), "2": ("done", None)}
