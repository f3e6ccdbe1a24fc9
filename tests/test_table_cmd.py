"""`solbench table`: the tables `solbench run` prints, rendered again from results files only."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from solbench.cli import app
from solbench.errors import UserError
from solbench.results import select_records
from synthetic import as_run, make_record, make_run, mixed_run, noisy_samples, write_run


def _invoke(*args: str):
    return CliRunner().invoke(app, ["table", *args], env={"COLUMNS": "200"})


def attention_run() -> dict:
    """Two attention cases that differ only in `causal`, a bool parameter written 0/1 in the case label."""
    recs = []
    for causal in (0, 1):
        case = f"B=1,H=8,SQ=1024,SK=1024,D=64,causal={causal}"
        flops = 4 * 8 * 1024 * 1024 * 64 // (2 if causal else 1)
        rec = make_record("attention", case, "bfloat16", "cudnn", flops=flops, nbytes=4 * 8 * 1024 * 64 * 2,
                          samples=noisy_samples(40e-6, 0.01, 20, causal))
        rec["params"]["causal"] = bool(causal)       # as the harness stores it
        recs.append(rec)
    return make_run(recs)


def test_table_prints_header_every_record_and_the_notes(tmp_path):
    path = write_run(tmp_path / "run.json", mixed_run())
    res = _invoke(str(path))
    assert res.exit_code == 0, res.output
    assert "run 20261129T150102Z-nvidia-h200" in res.output and "torch 2.11.0+cu130" in res.output
    assert "4,800 GB/s" in res.output and "bf16 989.4" in res.output
    assert "solbench run (synthetic)" in res.output
    for op in ("gemm", "softmax"):
        assert op in res.output
    # mixed_run: one record above the speed of light, one failed; both keep their verdicts and notes.
    assert "invalid [" in res.output and "failed" in res.output
    assert "scored above the speed of light" in res.output
    assert "4 ok, 1 invalid, 1 failed" in res.output


def test_table_filters_by_op_impl_and_shape(tmp_path):
    path = write_run(tmp_path / "run.json", mixed_run())
    res = _invoke(str(path), "--ops", "softmax", "--impls", "eager")
    assert res.exit_code == 0, res.output
    assert "gemm" not in res.output.split("solbench run (synthetic)")[1]
    assert "2 ok" in res.output and "invalid" not in res.output
    res = _invoke(str(path), "--shape", "M=4096,K=4096")
    assert res.exit_code == 0, res.output
    assert "M=4096,N=4096,K=4096" in res.output and "N=8192" not in res.output


def test_bool_parameters_match_as_zero_and_one(tmp_path):
    run = as_run(attention_run())
    picked = select_records([run], shape={"causal": 1})
    assert [rec.case for _, rec in picked] == ["B=1,H=8,SQ=1024,SK=1024,D=64,causal=1"]
    res = _invoke(str(write_run(tmp_path / "a.json", attention_run())), "--shape", "D=64,causal=0")
    assert res.exit_code == 0, res.output
    assert "causal=0" in res.output and "causal=1" not in res.output


def test_several_files_each_under_their_own_header(tmp_path):
    a = write_run(tmp_path / "a.json", mixed_run())
    b = write_run(tmp_path / "b.json", attention_run())
    res = _invoke(str(a), str(b))
    assert res.exit_code == 0, res.output
    assert res.output.index(str(a)) < res.output.index("gemm") < res.output.index(str(b)) \
        < res.output.index("attention")
    # a file none of whose records pass the filters is left out, not printed empty
    res = _invoke(str(a), str(b), "--ops", "attention")
    assert res.exit_code == 0 and str(a) not in res.output and str(b) in res.output


def test_width_lays_the_table_out_for_that_terminal(tmp_path):
    path = write_run(tmp_path / "run.json", mixed_run())
    res = _invoke(str(path), "--width", "80")
    assert res.exit_code == 0, res.output
    table_lines = res.output.split("solbench run (synthetic)")[1].splitlines()
    assert max(len(line.rstrip()) for line in table_lines) <= 80
    assert "left out to fit 80 columns" in res.output


@pytest.mark.parametrize("args,needle", [
    (["--width", "50"], "'--width': must be at least 80, got 50"),
    (["--shape", "M=big"], "'--shape': 'big' is not an integer"),
    (["--shape", "M=3"], "no records to show after filters"),
    (["--ops", "nope"], "ops present: gemm, softmax"),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, args, needle):
    path = write_run(tmp_path / "run.json", mixed_run())
    res = _invoke(str(path), *args)
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output


def test_a_missing_or_broken_file_is_named(tmp_path):
    res = _invoke(str(tmp_path / "absent.json"))
    assert res.exit_code == 2 and "absent.json" in res.output and "not found" in res.output
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json")
    res = _invoke(str(broken))
    assert res.exit_code == 2 and "broken.json" in res.output and "Traceback" not in res.output


def test_charts_keep_their_own_wording_for_an_empty_selection():
    with pytest.raises(UserError, match="no records to plot"):
        from solbench.charts import select_records as chart_select

        chart_select([as_run(mixed_run())], ops=["nope"])


# ---------------------------------------------------------------- the README's example is this command's output


def _readme_examples() -> list[tuple[list[str], list[str]]]:
    """(arguments, printed table lines) of each `$ solbench table ...` in the README's example block."""
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = text.split("## What it looks like", 1)[1].split("```", 2)[1]
    examples: list[tuple[list[str], list[str]]] = []
    for chunk in block.split("$ solbench table ")[1:]:
        lines = chunk.replace("\\\n", " ").splitlines()
        args = shlex.split(lines[0])
        shown = [ln.rstrip() for ln in lines[1:] if ln.strip()]
        first_table_line = next(i for i, ln in enumerate(shown) if " " not in ln and ln not in ("...",))
        examples.append((args, shown[first_table_line:]))
    return examples


@pytest.mark.parametrize("args,shown", _readme_examples(), ids=lambda v: v[0] if isinstance(v, list) else None)
def test_readme_example_is_what_the_command_prints(args, shown, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    res = _invoke(*args)
    assert res.exit_code == 0, res.output
    printed = [ln.rstrip() for ln in res.output.splitlines() if ln.strip()]
    start = printed.index(shown[0])
    assert printed[start:] == shown


def test_an_empty_selection_lists_what_the_files_hold_for_each_filter_given(tmp_path):
    path = write_run(tmp_path / "run.json", mixed_run())
    res = _invoke(str(path), "--dtypes", "bf16")
    assert res.exit_code == 2
    assert "dtypes present: bfloat16, float32" in res.output and "impls present" not in res.output


def test_a_parameter_that_is_not_a_number_matches_no_shape():
    run = attention_run()
    run["records"][0]["params"]["D"] = "sixty-four"      # a hand-edited file
    picked = select_records([as_run(run)], shape={"D": 64})
    assert [rec.case for _, rec in picked] == ["B=1,H=8,SQ=1024,SK=1024,D=64,causal=1"]
