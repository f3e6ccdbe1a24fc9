"""What the front ends of `solbench serve --frontends N` share, without a server: the shared file, the
rate limit counted across processes, the runs kept on disk, /metrics merged over front-end processes (and
one server's registry its own), the TLS pair checked once."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solbench.errors import UserError
from solbench.runrequest import RunRequest
from solbench.serve import frontends, metrics, runfiles, shared
from solbench.serve.runs import RunJob, RunQueueFull
from solbench.serve.server import ServeConfig
from solbench.serve.sharedrate import SharedRateLimiter
from tests.scrape import Scrape
from tests.tlscert import make_cert


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


# ---------------------------------------------------------------- /metrics over several front ends

# One front end's metrics, in a process of its own (prometheus_client reads PROMETHEUS_MULTIPROC_DIR when
# it is imported, so this cannot run in the test's process): `n` op requests, the first a 500, and its
# gauges from the arguments; it prints its pid, and with `render`, the scrape it would answer.
_FRONTEND = """
import os, sys
from pathlib import Path
from solbench.serve.metrics import Metrics
index, n, depth, restarts, render = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1"
m = Metrics(frontend=index, directory=Path(sys.argv[6]))
m.watch("cuda:0", lambda: depth, lambda: restarts, lambda: 1000.0 * (index + 1))
m.watch_runs(lambda: 3)
for i in range(n):
    m.observe("ops", "softmax", 500 if i == 0 else 200, 0.003, 0.0002)
m.refresh()
print(os.getpid())
if render:
    sys.stdout.write(m.render().decode())
"""


def _frontend(folder: Path, index: int, n: int, depth: float, restarts: float = 0.0,
              render: bool = False) -> tuple[int, str]:
    env = {**os.environ, **metrics.child_environment(folder)}
    res = subprocess.run([sys.executable, "-c", _FRONTEND, str(index), str(n), str(depth), str(restarts),
                          "1" if render else "0", str(folder)], capture_output=True, text=True, env=env, timeout=60,
                         check=True)
    pid, _, text = res.stdout.partition("\n")
    return int(pid), text


def _scrape(folder: Path) -> Scrape:
    from prometheus_client import generate_latest

    return Scrape.parse(generate_latest(metrics.merged_registry(folder)).decode())


def test_one_scrape_adds_up_every_front_ends_counts(tmp_path):
    pid0, _ = _frontend(tmp_path, 0, 7, depth=2)
    pid1, text = _frontend(tmp_path, 1, 5, depth=3, restarts=1, render=True)
    for s in (Scrape.parse(text), _scrape(tmp_path)):     # as front end 1 answers a scrape, and read back
        assert s.total("solbench_requests_total", route="ops", op="softmax", status="200") == 6 + 4
        assert s.total("solbench_requests_total", status="500") == 2
        assert s.total("solbench_errors_total", kind="internal") == 2
        assert s.total("solbench_request_seconds_count", op="softmax") == 12
        assert s.total("solbench_request_seconds_bucket", op="softmax", le="0.005") == 12
        assert s.total("solbench_request_seconds_bucket", op="softmax", le="0.002") == 0
        assert s.total("solbench_request_seconds_sum") == pytest.approx(12 * 0.003)
        assert s.total("solbench_op_device_seconds_count", op="softmax") == 12
        assert [s.total("solbench_frontend_requests_total", frontend=i) for i in "01"] == [7, 5]
        assert s.total("solbench_queue_depth", device="cuda:0") == 5                     # summed
        assert s.total("solbench_device_memory_allocated_bytes", device="cuda:0") == 3000
        assert s.total("solbench_worker_restarts", device="cuda:0") == 1
        assert {(x.labels["frontend"], x.labels["pid"]) for x in s.matching("solbench_frontend_up")} == \
               {("0", str(pid0)), ("1", str(pid1))}
        assert "summed over the live front ends" in s.helps["solbench_queue_depth"]
    assert Scrape.parse(text).total("solbench_runs_queued") == 3       # read by the front end scraped


def test_a_front_end_started_again_keeps_its_predecessors_counts(tmp_path):
    pid0, _ = _frontend(tmp_path, 0, 7, depth=2, restarts=2)
    pid1, _ = _frontend(tmp_path, 1, 5, depth=3)
    metrics.forget(tmp_path, pid0)                   # the supervisor, when front end 0 exits
    s = _scrape(tmp_path)
    assert s.total("solbench_requests_total") == 12 and s.total("solbench_request_seconds_count") == 12
    assert s.total("solbench_queue_depth") == 3                         # the dead one's queue is gone...
    assert s.total("solbench_device_memory_allocated_bytes") == 2000    # ...and its workers' memory
    assert s.total("solbench_worker_restarts") == 2                     # its restarts happened all the same
    assert [x.labels["pid"] for x in s.matching("solbench_frontend_up")] == [str(pid1)]
    pid2, _ = _frontend(tmp_path, 0, 4, depth=1)     # front end 0 again, a new process
    s = _scrape(tmp_path)
    assert s.total("solbench_requests_total") == 16 and s.total("solbench_requests_total", status="500") == 3
    assert [s.total("solbench_frontend_requests_total", frontend=i) for i in "01"] == [7 + 4, 5]
    assert s.total("solbench_queue_depth") == 4 and s.total("solbench_worker_restarts") == 2
    assert {x.labels["pid"] for x in s.matching("solbench_frontend_up")} == {str(pid1), str(pid2)}


def test_a_front_ends_metrics_refuse_a_process_without_the_multiprocess_environment(tmp_path):
    if metrics.MULTIPROC_ENV in os.environ:
        pytest.skip(f"{metrics.MULTIPROC_ENV} is set for the whole test run")
    with pytest.raises(RuntimeError, match=metrics.MULTIPROC_ENV):
        metrics.Metrics(frontend=0, directory=tmp_path)
    with pytest.raises(ValueError):
        metrics.Metrics(frontend=0)


def test_one_front_end_keeps_its_own_registry_and_two_never_share():
    a, b = metrics.Metrics(), metrics.Metrics()
    a.watch("cpu", lambda: 4, lambda: 1, lambda: 0)
    a.watch_runs(lambda: 2)
    for _ in range(3):
        a.observe("ops", "add", 200, 0.001, 0.0001)
    sa, sb = Scrape.parse(a.render().decode()), Scrape.parse(b.render().decode())
    assert sa.total("solbench_requests_total", op="add", status="200") == 3 and sa.total("solbench_runs_queued") == 2
    assert sa.total("solbench_queue_depth", device="cpu") == 4 and sa.total("solbench_worker_restarts") == 1
    assert sb.total("solbench_requests_total") == 0 and sb.total("solbench_request_seconds_count") == 0
    assert not sa.matching("solbench_frontend_up") and not sa.matching("solbench_frontend_requests_total")
    assert sa.helps["solbench_queue_depth"] == "Requests queued or running, by device"     # as before front ends


def test_the_shared_folder_holds_the_metrics_folder_and_goes_with_it():
    path = shared.create(2, 4)
    folder = shared.metrics_dir(path)
    assert folder.is_dir() and folder.parent == path.parent
    (folder / "counter_1.db").write_bytes(b"x")
    shared.remove(path)
    assert not folder.exists() and not path.parent.exists()


def test_the_front_ends_environment_is_set_only_while_one_is_spawned(monkeypatch):
    monkeypatch.delenv("SOLBENCH_TEST_VAR", raising=False)
    monkeypatch.setenv("SOLBENCH_TEST_KEEP", "before")
    with frontends._environment({"SOLBENCH_TEST_VAR": "x", "SOLBENCH_TEST_KEEP": "during"}):
        assert os.environ["SOLBENCH_TEST_VAR"] == "x" and os.environ["SOLBENCH_TEST_KEEP"] == "during"
    assert "SOLBENCH_TEST_VAR" not in os.environ and os.environ["SOLBENCH_TEST_KEEP"] == "before"


def test_a_certificate_that_does_not_load_is_one_clear_error(tmp_path):
    good = tmp_path / "good"
    other = tmp_path / "other"
    good.mkdir()
    other.mkdir()
    cert, key = make_cert(good)
    _, other_key = make_cert(other)
    frontends.check_tls(ServeConfig(tls_cert=cert, tls_key=key, frontends=2))       # loads: no error
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    for c, k, flag, wrong, why in ((cert, other_key, "--tls-key", other_key, "is not the private key"),
                                   (junk, key, "--tls-cert", junk, "is not a PEM certificate"),
                                   (cert, junk, "--tls-key", junk, "is not a PEM private key"),
                                   (cert, cert, "--tls-key", cert, "is not a PEM private key"),
                                   (tmp_path / "none.pem", key, "--tls-cert", tmp_path / "none.pem", "cannot read")):
        with pytest.raises(UserError) as info:
            frontends.check_tls(ServeConfig(tls_cert=c, tls_key=k, frontends=2))
        assert info.value.field == flag and str(wrong) in str(info.value) and why in str(info.value), info.value


def test_an_encrypted_key_is_an_error_never_a_prompt(tmp_path):
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    cert, key = make_cert(tmp_path)
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.BestAvailableEncryption(b"passphrase")))
    with pytest.raises(UserError) as info:            # stdin is pytest's: a prompt would hang or fail otherwise
        frontends.check_tls(ServeConfig(tls_cert=cert, tls_key=locked, frontends=2))
    assert info.value.field == "--tls-key" and "is encrypted" in str(info.value)
