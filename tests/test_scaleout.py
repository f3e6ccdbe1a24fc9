"""Scale-out without a GPU or a cluster: --gpus planning and scheduling (pure, then with CPU workers
standing in for GPUs), --resume, incremental results files, the flags' errors, cross-GPU compare.

The Ray executor on a real two-node cluster is tests/test_ray_cluster.py.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from solbench import pipeline, plan, resume, spec
from solbench.cli import app
from solbench.errors import UserError
from solbench.exec import Placement, ProcessExecutor
from solbench.exec.base import device_fingerprint
from solbench.exec.gpus import GpuExecutor, GpuSlot, ShardQueue, parse_gpu_list, resolve_slots, shard_jobs
from solbench.hardware import DeviceInfo
from solbench.job import CallStarted, Case, RecordReady, SpecSource, WorkerJob, WorkUnit
from solbench.measure import TimingConfig
from solbench.peaks import Peaks
from solbench.results import Record, Run, load_run, write_run
from tests import cheats

FAST = TimingConfig(timer="events", rse_target=0.5, budget_s=0.05, min_samples=3)
CPU_SLOTS = [GpuSlot(0, "", 0, device="cpu"), GpuSlot(1, "", 1, device="cpu")]
H100 = DeviceInfo(kind="cuda", name="NVIDIA H100", index=0, sm_count=132, compute_capability=(9, 0),
                  memory_bytes=80 * 2**30)
A100 = DeviceInfo(kind="cuda", name="NVIDIA A100", index=1, sm_count=108, compute_capability=(8, 0),
                  memory_bytes=80 * 2**30)
PEAKS = Peaks(name="test", source="datasheet", memory_bandwidth=1e12, simt={"fp32": 1e13}, tensor={})


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture()
def trap_specs(tmp_path):
    cheats.seed_cpu_peaks(tmp_path)
    folder = tmp_path / "specs"
    ops = [cheats.write_spec(folder, "honest", op="so_a", cases="[{M: 64, N: 48}, {M: 32, N: 16}, {M: 16, N: 8}]"),
           cheats.write_spec(folder, "crash_segfault", op="so_b")]
    return folder, ops


def _config(tmp_path: Path, ops, **kw) -> pipeline.RunConfig:
    return pipeline.RunConfig(selection=plan.Selection(ops=tuple(ops)), device="cpu", timing=FAST,
                              cache_dir=tmp_path / "cache", timeout_s=120, **kw)


# ---------------------------------------------------------------- which GPUs

def test_gpu_lists_parse_or_name_the_flag():
    assert parse_gpu_list("all") is None and parse_gpu_list(" 0,2,3 ") == (0, 2, 3)
    for bad, said in (("", "expected 'all'"), ("0,,1", "expected 'all'"), ("a", "'a' is not a GPU index"),
                      ("-1", "'-1' is not a GPU index"), ("1,1", "GPU 1 is listed twice")):
        with pytest.raises(UserError, match=said) as e:
            parse_gpu_list(bad)
        assert e.value.field == "--gpus"


def test_slots_follow_cuda_visible_devices_and_refuse_what_does_not_exist():
    assert [(s.visible, s.index) for s in resolve_slots("all", None, 3)] == [("0", 0), ("1", 1), ("2", 2)]
    # Under CUDA_VISIBLE_DEVICES=3,5 (a Slurm job, say) GPU 1 is the host's GPU 5: records name 5.
    assert [(s.ordinal, s.visible, s.index) for s in resolve_slots("1", "3,5", 2)] == [(0, "5", 5)]
    with pytest.raises(UserError, match=r"GPU 4 does not exist \(2 visible"):
        resolve_slots("0,4", None, 2)
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        resolve_slots("all", None, 0)
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES is empty"):
        resolve_slots("all", "", 0)
    with pytest.raises(UserError, match="by UUID or MIG"):
        resolve_slots("all", "GPU-8f3c", 1)
    env = GpuSlot(0, "5", 5).env()
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and "CUDA_DEVICE_ORDER" in env


# ---------------------------------------------------------------- which shards go where

def _job(op: str, dtypes: list[str], cases: int) -> WorkerJob:
    units = tuple(WorkUnit(Case(op, {"M": m}, d), ("eager", "cuda")) for m in range(cases) for d in dtypes)
    return WorkerJob(SpecSource("", f"{op}.yaml", "h"), units, "cuda:0", H100, PEAKS, FAST)


def test_shards_spread_each_op_over_the_gpus_and_one_gpu_gets_the_whole_job():
    jobs = [_job("a", ["bfloat16"], 5), _job("b", ["bfloat16"], 1)]
    one = shard_jobs(jobs, [H100])
    assert [(s.job_index, s.job.units) for s in one] == [(0, jobs[0].units), (1, jobs[1].units)]
    two = shard_jobs(jobs, [H100, replace(H100, index=1)])
    assert [(s.job_index, len(s.job.units), s.slots) for s in two] == [(0, 3, (0, 1)), (0, 2, (0, 1)), (1, 1, (0, 1))]
    # Round-robin: each shard gets a mix of the sweep, and together they are the job, each unit once.
    assert sorted(u.case.params["M"] for s in two[:2] for u in s.job.units) == [0, 1, 2, 3, 4]
    assert [u.case.params["M"] for u in two[0].job.units] == [0, 2, 4]


def test_a_dtype_one_gpu_cannot_run_goes_only_to_the_gpus_that_can():
    jobs = [_job("gemm", ["bfloat16", "float8_e4m3fn"], 2)]
    shards = shard_jobs(jobs, [H100, A100])          # fp8 needs compute capability 8.9
    fp8 = [s for s in shards if s.job.units[0].case.dtype == "float8_e4m3fn"]
    assert fp8 and all(s.slots == (0,) for s in fp8)
    assert sum(len(s.job.units) for s in fp8) == 2
    queue = ShardQueue(shards)
    taken_by_a100 = []
    while (s := queue.take(1)) is not None:
        taken_by_a100.append(s)
    assert taken_by_a100 and all(u.case.dtype == "bfloat16" for s in taken_by_a100 for u in s.job.units)
    assert queue.take(0) is not None                 # the fp8 shards wait for the H100


# ---------------------------------------------------------------- scheduling (a stand-in worker)

class FakeSpawn:
    """Stands in for a worker process: 'measures' each call for `seconds`, logs (slot, start, end)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.log: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()
        self.killed = 0

    def __call__(self, job, timeout_s, env=None, on_start=None):
        fake = self

        class Proc:
            def is_alive(self):
                return True

            def kill(self):
                fake.killed += 1

        if on_start:
            on_start(Proc())
        slot = env["CUDA_VISIBLE_DEVICES"]
        for u in job.units:
            for impl in u.calls:
                yield CallStarted(u.case.label, u.case.dtype, impl)
                start = time.monotonic()
                time.sleep(self.seconds)
                with self.lock:
                    self.log.append((slot, start, time.monotonic()))
                yield RecordReady(Record(op=job.op, case=u.case.label, params=u.case.params, dtype=u.case.dtype,
                                         impl=impl, kind="impl", status="ok"))


def _fake_executor(spawn: FakeSpawn) -> GpuExecutor:
    ex = GpuExecutor("all", 60.0, spawn=spawn)
    from solbench.exec.gpus import Target
    from solbench.job import Probe

    slots = [GpuSlot(0, "0", 0), GpuSlot(1, "1", 1)]
    ex.targets = tuple(Target(s, Probe(replace(H100, index=s.index), "cuda:0"), PEAKS) for s in slots)
    return ex


def test_two_units_never_share_a_gpu_and_both_gpus_work_at_once():
    spawn = FakeSpawn(0.05)
    ex = _fake_executor(spawn)
    jobs = [_job("a", ["bfloat16"], 4), _job("b", ["bfloat16"], 3)]
    events = list(ex.run_all(jobs))
    records = [e.record for _, e in events if isinstance(e, RecordReady)]
    assert len(records) == sum(len(u.calls) for j in jobs for u in j.units)
    assert {r.device_index for r in records} == {0, 1}          # stamped with the slot's GPU
    for slot in ("0", "1"):
        spans = sorted((s, e) for g, s, e in spawn.log if g == slot)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), slot
    spans = {g: (min(s for h, s, _ in spawn.log if h == g), max(e for h, _, e in spawn.log if h == g))
             for g in ("0", "1")}
    assert spans["0"][0] < spans["1"][1] and spans["1"][0] < spans["0"][1]   # they overlapped in time


def test_stopping_early_kills_the_running_workers_before_returning():
    spawn = FakeSpawn(0.2)
    ex = _fake_executor(spawn)
    stream = ex.run_all([_job("a", ["bfloat16"], 6)])
    next(stream)
    stream.close()
    assert spawn.killed >= 1


# ---------------------------------------------------------------- --gpus with CPU workers standing in for GPUs

def test_gpus_executor_gives_the_records_of_a_one_process_run(tmp_path, trap_specs):
    folder, ops = trap_specs
    specs = spec.load_all([folder])
    local = pipeline.execute(pipeline.prepare(_config(tmp_path, ops), specs, executor=ProcessExecutor(120.0)))
    gpus = GpuExecutor("all", 120.0, slots=CPU_SLOTS)
    prepared = pipeline.prepare(_config(tmp_path, ops), specs, executor=gpus)
    assert [d.index for d in prepared.devices] == [0, 1]
    run = pipeline.execute(prepared)
    assert [(r.key, r.status) for r in run.records] == [(r.key, r.status) for r in local.records]
    measured = [r for r in run.records if r.status != "skipped"]
    assert {r.device_index for r in measured} == {0, 1}
    assert all(r.device_fingerprint == device_fingerprint(prepared.info) for r in measured)
    crashed = [r for r in run.records if r.status == "error"]
    assert [r.impl for r in crashed] == ["cheat"] and "SIGSEGV" in crashed[0].message
    assert [d["device_index"] for d in run.env["devices"]] == [0, 1]


# ---------------------------------------------------------------- incremental results files and --resume

def test_the_results_file_is_written_after_every_record_and_a_killed_run_resumes(tmp_path, trap_specs):
    folder, ops = trap_specs
    specs = spec.load_all([folder])
    path = tmp_path / "sweep.json"
    seen: list[int] = []

    def checkpoint(run: Run) -> None:
        write_run(run, path)
        seen.append(len([r for r in load_run(path).records if r.status != "skipped"]))
        if len(seen) == 3:
            raise KeyboardInterrupt   # the driver dies here, after its third record

    first = pipeline.prepare(_config(tmp_path, ops[:1], isolate=False), specs)
    with pytest.raises(KeyboardInterrupt):
        pipeline.execute(first, checkpoint=checkpoint)
    assert seen == [1, 2, 3]
    partial = load_run(path)
    before = {r.key: r.samples_s for r in partial.records}
    second = pipeline.prepare(_config(tmp_path, ops[:1], isolate=False, resume=path), specs)
    assert second.resumed is not None and len(second.resumed.reused) == 3 and second.total == 3
    done = pipeline.execute(second, checkpoint=lambda run: write_run(run, path))
    assert [r.key for r in done.records] == [r.key for r in pipeline.execute(
        pipeline.prepare(_config(tmp_path, ops[:1], isolate=False), specs)).records]
    assert all(r.status == "ok" for r in done.records)
    for r in done.records:
        if r.key in before:
            assert r.samples_s == before[r.key]      # reused, not measured again
    assert done.run_id == partial.run_id and load_run(path).records[-1].key == done.records[-1].key


def _rec(op="x", case="M=1", impl="eager", status="ok", sha="s1", fp="gpu-a", **kw) -> Record:
    return Record(op=op, case=case, params={"M": 1}, dtype="float32", impl=impl, kind="baseline", status=status,
                  spec_sha256=sha, device_fingerprint=fp, **kw)


def _plan(tmp_path: Path) -> list[plan.OpPlan]:
    path = tmp_path / "x.yaml"
    path.write_text(cheats.SPEC.format(op="x", impl="honest", cases="[{M: 1, N: 1}, {M: 2, N: 1}]", bytes="auto",
                                       device=""))
    s = spec.load_file(path)
    units = tuple(WorkUnit(Case("x", {"M": m, "N": 1}, "float32"), ("honest", "cheat")) for m in (1, 2))
    return [plan.OpPlan(s, units)]


def test_resume_reuses_only_same_spec_same_device_non_error_records(tmp_path):
    plans = _plan(tmp_path)
    sha = plans[0].spec.sha256
    prior = Run(env={}, peaks={}, config={}, records=[
        _rec(case="M=1,N=1", impl="honest", sha=sha),                 # reused
        _rec(case="M=1,N=1", impl="cheat", sha=sha, status="error"),  # errors are measured again
        _rec(case="M=2,N=1", impl="honest", sha="old"),               # the spec changed since
        _rec(case="M=2,N=1", impl="cheat", sha=sha, fp="gpu-b"),      # another kind of device
        _rec(op="other", impl="eager"),                               # not planned: kept as it is
    ])
    trimmed, resumed = resume.split(plans, prior, {"gpu-a"})
    assert [r.key[1:] for r in resumed.reused] == [("M=1,N=1", "float32", "honest")]
    assert [r.op for r in resumed.kept] == ["other"]
    assert [(u.case.label, u.calls) for u in trimmed[0].units] == [("M=1,N=1", ("cheat",)),
                                                                   ("M=2,N=1", ("honest", "cheat"))]


def test_resume_refuses_a_file_measured_with_another_timer_or_peaks(tmp_path):
    path = tmp_path / "old.json"
    write_run(Run(env={}, peaks={}, config={"timer": "graph", "peaks": "datasheet"}, records=[]), path)
    with pytest.raises(UserError, match="--timer graph") as e:
        resume.load(path, {"timer": "events", "peaks": "datasheet"})
    assert e.value.field == "--resume"
    write_run(Run(env={}, peaks={}, config={"timer": "events", "peaks": "cpu-measured",
                                            "peaks_requested": "datasheet"}, records=[]), path)
    assert resume.load(path, {"timer": "events", "peaks": "datasheet"}).records == []
    with pytest.raises(UserError, match="not found"):
        resume.load(tmp_path / "missing.json", {})


# ---------------------------------------------------------------- flags

@pytest.mark.parametrize("placement, device, isolate, flag, said", [
    (Placement(executor="slurm"), "auto", True, "--executor", "unknown executor 'slurm'"),
    (Placement(gpus="all"), "auto", False, "--gpus", "drop --no-isolate"),
    (Placement(gpus="all"), "cuda:1", True, "--gpus", "--device cuda:1 names one device"),
    (Placement(gpus="0", executor="ray"), "auto", True, "--gpus", "with --executor ray Ray places it"),
    (Placement(ray_address="auto"), "auto", True, "--ray-address", "only --executor ray"),
    (Placement(accelerators=("H100",)), "auto", True, "--accelerators", "only --executor ray"),
    (Placement(executor="ray", ray_address="host"), "auto", True, "--ray-address", "neither 'auto' nor HOST:PORT"),
    (Placement(executor="ray", accelerators=("H100", "h100")), "auto", True, "--accelerators", "listed twice"),
    (Placement(executor="ray", accelerators=("H 100",)), "auto", True, "--accelerators", "not an accelerator"),
    (Placement(executor="ray"), "cuda:0", True, "--device", "Ray chooses the GPU"),
    (Placement(executor="ray"), "auto", False, "--no-isolate", "worker process"),
    (Placement(executor="ray", retries=-1), "auto", True, "--retries", "0 or more"),
])
def test_placements_that_mean_nothing_are_refused_naming_the_flag(placement, device, isolate, flag, said):
    with pytest.raises(UserError, match=said) as e:
        placement.check(device, isolate)
    assert e.value.field == flag


def test_good_placements_pass():
    for p, device in ((Placement(), "auto"), (Placement(gpus="0,1"), "cuda"),
                      (Placement(executor="ray", ray_address="10.0.0.5:6379", accelerators=("H100", "A100-80G")),
                       "auto"), (Placement(executor="ray", ray_address="auto"), "cpu")):
        p.check(device, True)


def test_cli_scaleout_errors_exit_2_with_one_line(tmp_path, monkeypatch):
    out = ["--out", str(tmp_path / "out")]
    res = invoke("run", "--ops", "add", "--gpus", "all", *out)
    assert res.exit_code == 2 and "--gpus" in res.output and "no CUDA GPU is visible" in res.output, res.output
    monkeypatch.setitem(sys.modules, "ray", None)      # as if Ray were not installed
    res = invoke("run", "--ops", "add", "--executor", "ray", *out)
    assert res.exit_code == 2 and "pip install ray" in res.output and "Traceback" not in res.output, res.output
    res = invoke("run", "--ops", "add", "--resume", str(tmp_path / "nope.json"), *out)
    assert res.exit_code == 2 and "--resume" in res.output, res.output
    res = invoke("run", "--ops", "add", "--executor", "ray", "--accelerators", "H100", "--json", "x.json", *out)
    assert res.exit_code == 2 and "--json" in res.output and "<out>/<model>.json" in res.output, res.output
    res = invoke("run", "--ops", "add", "--executor", "ray", "--accelerators", ",", *out)
    assert res.exit_code == 2 and "--accelerators" in res.output, res.output


# ---------------------------------------------------------------- cross-GPU SOL, as --accelerators files give it

def _model_run(device: str, t_sol: float, medians: dict[str, float]) -> Run:
    records = []
    for impl, median in medians.items():
        samples = [median * (1 + 0.002 * ((i % 5) - 2)) for i in range(30)]
        records.append(Record(op="softmax", case="M=4096,N=1024", params={"M": 4096, "N": 1024}, dtype="bfloat16",
                              impl=impl, kind="baseline" if impl == "eager" else "impl", status="ok",
                              timer="events", t_sol_s=t_sol, samples_s=samples, time_s={"median": median},
                              sol=t_sol / median, device=device, device_index=0, device_fingerprint=device.lower()))
    return Run(env={"device": device}, peaks={"source": "datasheet"}, config={"timer": "events"}, records=records)


def test_compare_sol_across_two_gpu_models(tmp_path):
    a100, h100 = tmp_path / "a100.json", tmp_path / "h100.json"
    # The kernel reaches 80% of SOL on the A100 but only 50% on the H100: SLOWER there, in SOL terms.
    write_run(_model_run("NVIDIA A100", 1e-4, {"eager": 2e-4, "cuda": 1.25e-4}), a100)
    write_run(_model_run("NVIDIA H100", 5e-5, {"eager": 1e-4, "cuda": 1e-4}), h100)
    report = tmp_path / "cmp.json"
    res = invoke("compare", "--metric", "sol", str(a100), str(h100), "--json", str(report))
    assert res.exit_code == 1, res.output                      # one pair SLOWER: the gate fails
    pairs = {p["key"][-1]: p["verdict"] for p in json.loads(report.read_text())["pairs"]}
    assert pairs["cuda"] == "SLOWER" and pairs["eager"] in ("SAME", "AMBIGUOUS")   # same SOL on both
    res = invoke("compare", str(a100), str(h100))
    assert res.exit_code == 2 and "--metric sol" in res.output   # times from two GPUs are not comparable


def test_a_ray_head_that_does_not_answer_is_named_at_once(tmp_path):
    import socket

    with socket.socket() as s:      # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    res = invoke("run", "--ops", "add", "--executor", "ray", "--ray-address", f"127.0.0.1:{port}",
                 "--out", str(tmp_path))
    assert res.exit_code == 2 and "--ray-address" in res.output and "nothing answers" in res.output, res.output
    assert time.monotonic() - started < 30
