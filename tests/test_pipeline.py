"""The pipeline without typer, the executor seam, jobs that carry spec text, and the spec features the
kernel families need (per-call dtypes, torch.compile options, generated inputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from solbench import pipeline, plan, spec  # noqa: E402
from solbench.errors import UserError  # noqa: E402
from solbench.exec import InlineExecutor, ProcessExecutor  # noqa: E402
from solbench.job import Case, SpecSource  # noqa: E402
from solbench.measure import TimingConfig  # noqa: E402
from solbench.worker import new_record  # noqa: E402
from tests import cheats  # noqa: E402

FAST = TimingConfig(timer="events", rse_target=0.5, budget_s=0.05, min_samples=3)


def _config(tmp_path: Path, ops: tuple[str, ...], **kw) -> pipeline.RunConfig:
    return pipeline.RunConfig(selection=plan.Selection(ops=ops), device="cpu", timing=FAST,
                              cache_dir=tmp_path / "cache", **kw)


@pytest.fixture()
def trap_specs(tmp_path):
    cheats.seed_cpu_peaks(tmp_path)
    folder = tmp_path / "specs"
    ops = [cheats.write_spec(folder, "honest", op="pipe_a"), cheats.write_spec(folder, "cached_by_id", op="pipe_b")]
    return folder, ops


def test_pipeline_runs_without_typer_and_writes_a_results_file(tmp_path, trap_specs):
    folder, ops = trap_specs
    specs = spec.load_all([folder])
    prepared = pipeline.prepare(_config(tmp_path, tuple(ops), isolate=False), specs)
    assert prepared.total == 4 and prepared.info.kind == "cpu"
    seen = []
    run = pipeline.execute(prepared, seen.append, command="test")
    assert [r.key for r in run.records] == [r.key for r in seen]
    status = {(r.op, r.impl): r.status for r in run.records}
    assert status == {("pipe_a", "honest"): "ok", ("pipe_a", "cheat"): "ok",
                      ("pipe_b", "honest"): "ok", ("pipe_b", "cheat"): "failed"}
    assert all(r.spec_sha256 == specs[r.op].sha256 for r in run.records)
    paths = pipeline.write(run, tmp_path / "out", json_path=tmp_path / "r.json")
    assert all(p.is_file() for p in paths)


def test_inline_and_process_executors_give_the_same_records(tmp_path, trap_specs):
    folder, ops = trap_specs
    specs = spec.load_all([folder])
    runs = []
    for executor in (InlineExecutor(), ProcessExecutor(120.0)):
        prepared = pipeline.prepare(_config(tmp_path, tuple(ops)), specs, executor=executor)
        runs.append(pipeline.execute(prepared))
    a, b = ([(r.key, r.status) for r in run.records] for run in runs)
    assert a == b


def test_a_job_carries_the_spec_text_not_its_path(tmp_path, trap_specs):
    folder, ops = trap_specs
    specs = spec.load_all([folder])
    prepared = pipeline.prepare(_config(tmp_path, (ops[0],), isolate=True), specs)
    for f in folder.glob("*.yaml"):
        f.unlink()          # the worker must not need the file any more
    run = pipeline.execute(prepared)
    assert {r.status for r in run.records} == {"ok"}
    source = SpecSource.of(specs[ops[0]])
    assert source.load().op == ops[0] and source.sha256 == specs[ops[0]].sha256


def test_records_of_one_case_never_share_their_lists():
    base = {"op": "x", "case": "M=1", "params": {"M": 1}, "dtype": "float32", "warnings": ["counted bytes only"]}
    a, b = new_record(base, "math", "baseline"), new_record(base, "cudnn", "impl")
    a.warnings.append("noise target missed")
    assert b.warnings == ["counted bytes only"] and base["warnings"] == ["counted bytes only"]
    a.params["M"] = 2
    assert b.params == {"M": 1}


SPEC_WITH_FEATURES = """\
op: feat
summary: features
cases: [{M: 8, N: 4}]
dtypes: [float32, float16]
inputs:
  x: {shape: [M, N], init: "tests.test_pipeline:ramp"}
outputs:
  y: {shape: [M, N]}
flops: M * N
bytes: auto
compute: simt
reference: {fn: "torch.neg"}
baselines:
  eager: {fn: "torch.neg"}
  compiled: {fn: "torch.neg", compile: {mode: reduce-overhead, dynamic: false}}
impls:
  half_only: {fn: "torch.neg", dtypes: [float16]}
tolerance:
  float32: {atol: 1.0e-6, rtol: 1.0e-6}
  float16: {atol: 1.0e-3, rtol: 1.0e-3}
"""


def ramp(shape, dtype, generator, device):
    """A generated input: distinct, non-zero values (the spec's own generator)."""
    import torch

    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float32, device=device).reshape(shape) + 1.5).to(dtype)


def test_per_call_dtypes_compile_options_and_generated_inputs(tmp_path):
    path = tmp_path / "feat.yaml"
    path.write_text(SPEC_WITH_FEATURES)
    s = spec.load_file(path)
    calls = {c.name: c for c, _ in s.calls}
    assert calls["compiled"].compile and calls["compiled"].compile_options == {"mode": "reduce-overhead",
                                                                              "dynamic": False}
    assert calls["half_only"].dtypes == ("float16",)
    assert plan.call_names(s, plan.Selection(), "float32") == ("eager", "compiled")
    assert plan.call_names(s, plan.Selection(), "float16") == ("eager", "compiled", "half_only")
    from solbench.inputs import make_inputs

    (x,) = make_inputs(s, Case("feat", {"M": 8, "N": 4}, "float16"), "cpu", 0)
    assert x.dtype.itemsize == 2 and float(x[0, 0]) == 1.5


def test_per_call_dtypes_must_be_the_ops_dtypes(tmp_path):
    path = tmp_path / "feat.yaml"
    path.write_text(SPEC_WITH_FEATURES.replace("dtypes: [float16]}", "dtypes: [bfloat16]}"))
    with pytest.raises(UserError, match=r"field 'impls.half_only.dtypes'.*bfloat16"):
        spec.load_file(path)
    path.write_text(SPEC_WITH_FEATURES.replace("{mode: reduce-overhead, dynamic: false}", "{speed: max}"))
    with pytest.raises(UserError, match=r"baselines.compiled.compile.speed"):
        spec.load_file(path)


def test_a_generator_that_returns_the_wrong_shape_is_named(tmp_path):
    from solbench.inputs import make_inputs

    path = tmp_path / "feat.yaml"
    path.write_text(SPEC_WITH_FEATURES.replace("tests.test_pipeline:ramp", "tests.test_pipeline:wrong_shape"))
    s = spec.load_file(path)
    with pytest.raises(ValueError, match="wrong_shape.*returned"):
        make_inputs(s, Case("feat", {"M": 8, "N": 4}, "float32"), "cpu", 0)


def wrong_shape(shape, dtype, generator, device):
    import torch

    return torch.ones(3, dtype=dtype)
