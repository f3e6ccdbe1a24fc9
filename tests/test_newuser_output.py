"""Issue 11, output that reads (#6, #12, #14, #15, #17's wording): terminal tables at 80 and 120
columns, the progress count, charts of runs that produced nothing, the report, compare's SOL wording."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from solbench import console as ui
from solbench.cli import app
from solbench.report import build_blocks, env_table, html_table, write_report
from solbench.results import Record
from synthetic import as_run, make_record, make_run, mixed_run, noisy_samples, write_run


# ---------------------------------------------------------------- #14 tables at 80 and 120 columns


def _records() -> list[Record]:
    run = mixed_run()
    long = make_record("attention", "B=4,H=32,HKV=8,SQ=4096,SK=4096,D=128,causal=0", "bfloat16", "compiled_autotune",
                       samples=noisy_samples(2.5e-3, 0.05, 20, 3))
    long["time_s"]["run_to_run"] = 0.014                 # issue 12's field: shown instead of the rse
    error = make_record("attention", "B=4,H=32,HKV=8,SQ=4096,SK=4096,D=128,causal=0", "bfloat16", "cuda",
                        status="error", message="crashed: worker process killed by SIGSEGV while this ran; " * 3)
    error.update(time_s=None, samples_s=[], sol=None, tflops=None, gbps=None, mfu=None, mbu=None, speedup=None)
    run["records"] += [long, error]
    return as_run(run).records


def _render(records: list[Record], width: int) -> str:
    con = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    for table in ui.op_tables(records, width):
        con.print(table)
    return con.export_text()


@pytest.mark.parametrize("width", [80, 120])
def test_tables_fit_the_terminal_without_cutting_a_number_or_a_verdict(width):
    records = _records()
    text = _render(records, width)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    assert "…" not in text and "..." not in text
    for r in records:
        median = ui.fmt_time((r.time_s or {}).get("median"))
        if r.time_s:
            assert median in text, median
        if r.sol is not None:
            assert f"{r.sol * 100:.1f}" in text
    assert text.count("pass") >= sum(1 for r in records if r.status == "ok")
    for status in ("invalid [", "failed [", "error ["):
        assert status in text
    # The messages are notes under the table, whole (wrapped, never cut).
    flat = " ".join(text.split())
    assert "crashed: worker process killed by SIGSEGV while this ran; " * 3 in flat + " "
    assert "max_abs_err 0.5 > atol 0.01" in flat


def test_columns_are_left_out_in_the_stated_order_and_said_so():
    records = _records()
    wide = _render(records, 200)
    assert "left out" not in wide
    for col in ui.COLUMNS:
        assert col.name in wide
    narrow = _render(records, 80)
    header = next(line for line in narrow.splitlines() if line.startswith("case"))
    kept = header.split()
    dropped = [c for c in ui.DROP_ORDER if c.split()[0] not in kept]
    assert dropped == list(ui.DROP_ORDER[:len(dropped)]) and dropped       # a prefix of the stated order
    assert "left out to fit 80 columns: " in " ".join(narrow.split())
    for never in ("case", "dtype", "impl", "median", "SOL", "check"):
        assert never in kept
    assert "bf16" in narrow and "bfloat16" not in narrow.split("[1]")[0]   # abbreviated before dropping


def test_noise_column_prefers_run_to_run_and_marks_only_what_cannot_tell_5_percent():
    ok = as_run(make_run([make_record(samples=noisy_samples(1e-3, 0.001, 30, 1))])).records[0]
    ok.time_s["rse"] = 0.008
    assert ui._noise(ok, ui.Notes(), False) == "±0.8%"
    ok.time_s["run_to_run"] = 0.014
    assert ui._noise(ok, ui.Notes(), False) == "±1.4%"                # run_to_run when present
    ok.time_s["run_to_run"] = 0.03
    assert "±3.0%!" in ui._noise(ok, ui.Notes(), False)             # 3% cannot tell a 5% change
    assert ui.NOISE_MARK_LIMIT == pytest.approx(0.0177, abs=1e-4)
    text = _render([ok], 120)
    assert "too large to tell a 5% change" in text and "(!)" not in text


def test_rates_have_the_same_significant_figures_everywhere():
    assert [ui.fmt_rate(v) for v in (1464.1, 414.9, 51.23, 4.8, 0.0231, 0.000467)] == \
        ["1,464", "415", "51.2", "4.80", "0.0231", "0.000467"]


# ---------------------------------------------------------------- #12 progress count, empty charts


def test_progress_counts_every_record_written(tmp_path):
    from solbench import pipeline, plan, spec
    from tests import cheats

    cheats.seed_cpu_peaks(tmp_path)
    config = pipeline.RunConfig(selection=plan.Selection(ops=("gemm",), quick=True), device="cpu", isolate=False,
                                cache_dir=tmp_path / "cache",
                                timing=pipeline.TimingConfig(budget_s=0.02, min_samples=3, rse_target=0.5))
    prepared = pipeline.prepare(config, spec.load_all())
    seen: list[Record] = []
    run = pipeline.execute(prepared, seen.append)
    assert any(r.case == "*" for r in run.records)           # float8 and tfloat32: skipped dtypes count too
    assert len(seen) == len(run.records) == prepared.total


def test_plot_sol_of_a_run_where_everything_errored_is_an_error_that_says_error(tmp_path):
    recs = [make_record(impl=i, status="failed") for i in ("eager", "cuda")]
    for r in recs:
        r.update(status="error", message="crashed")
    path = write_run(tmp_path / "run.json", make_run(recs))
    res = CliRunner().invoke(app, ["plot", "sol", str(path), "-o", str(tmp_path / "s.png")])
    assert res.exit_code == 2, res.output
    assert "nothing to plot" in res.output and "2 error" in res.output and "failed" not in res.output
    assert not (tmp_path / "s.png").exists()


def test_plot_sol_calls_errors_error(tmp_path):
    run = mixed_run()
    run["records"][-1].update(status="error", message="timed out")
    path = write_run(tmp_path / "run.json", run)
    res = CliRunner().invoke(app, ["plot", "sol", str(path), "-o", str(tmp_path / "s.png")])
    assert res.exit_code == 0, res.output
    assert "softmax/M=4096,N=8192/float32/cuda: error" in res.output


# ---------------------------------------------------------------- #6, #15 the report


def test_report_environment_names_the_timer_the_records_used():
    run = make_run([make_record(), make_record(impl="cuda")])
    run["config"]["timer"] = "events"                          # what was asked for ...
    for r in run["records"]:
        r["timer"] = "wall"                                    # ... and what a CPU run used
    table = env_table(as_run(run))
    assert dict(zip(table[""], table["value"]))["timer"] == "wall"


def test_html_report_renders_code_aligns_numbers_and_formats_rates_alike(tmp_path):
    path = write_report(as_run(mixed_run()), tmp_path / "r.html", charts=False)
    text = path.read_text()
    body = re.sub(r"<style>.*?</style>", "", text, flags=re.S)
    assert "`" not in body and "<code>20261129T150102Z-nvidia-h200</code>" in text
    op = next(b.content for b in build_blocks(as_run(mixed_run()), charts=False)
              if b.kind == "table" and "GB/s" in b.content.columns)
    table = html_table(op)
    headers = re.findall(r"<th( class='num')?>([^<]*)</th>", table)
    aligned = {name: bool(cls) for cls, name in headers}
    assert aligned["TFLOP/s"] and aligned["GB/s"] and aligned["SOL %"] and aligned["median time"]
    assert not aligned["impl"] and not aligned["status"]
    for cell in list(op["TFLOP/s"]) + list(op["GB/s"]):       # 3 significant figures for both
        if cell != "-":
            assert len(re.sub(r"[^0-9]", "", cell).lstrip("0")) <= 3, cell


def test_report_without_output_writes_one_file_beside_the_results(tmp_path, monkeypatch):
    results = tmp_path / "runs" / "run.json"
    results.parent.mkdir()
    write_run(results, mixed_run())
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    res = CliRunner().invoke(app, ["report", str(results)])
    assert res.exit_code == 0, res.output
    assert list(cwd.iterdir()) == []                             # nothing scattered into the cwd
    assert sorted(p.name for p in results.parent.iterdir()) == ["run-report.html", "run.json"]
    md = tmp_path / "out" / "r.md"
    assert CliRunner().invoke(app, ["report", str(results), "-o", str(md)]).exit_code == 0
    assert sorted(p.name for p in md.parent.iterdir()) == ["r-charts", "r.md"]


# ---------------------------------------------------------------- #17 compare --metric sol wording


def test_compare_by_sol_calls_a_sol_increase_a_sol_increase(tmp_path):
    base = make_run([make_record(samples=noisy_samples(2e-3, 0.002, 40, 1))])
    new = make_run([make_record(samples=noisy_samples(1.6e-3, 0.002, 40, 2))])   # 20% faster: SOL +25%
    b, n = write_run(tmp_path / "b.json", base), write_run(tmp_path / "n.json", new)
    md = tmp_path / "c.md"
    res = CliRunner().invoke(app, ["compare", str(b), str(n), "--metric", "sol", "--markdown", str(md),
                                   "--fail-on", "slower"])
    text = md.read_text()
    assert "SOL change (CI)" in text and "cost change" not in text
    row = next(line for line in text.splitlines() if line.startswith("| gemm"))
    assert re.search(r"\+2[45]\.\d%", row), row
    assert res.exit_code == 0, res.output
