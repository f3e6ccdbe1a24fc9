"""Report documents: the summary numbers, per-op tables, environment, charts."""

from __future__ import annotations

import base64
import math
import re

import pytest
from typer.testing import CliRunner

from solbench.cli import app
from solbench.report import ImplSummary, build_blocks, summarize, write_report
from synthetic import as_run, make_record, make_run, mixed_run, noisy_samples, write_run


def _by_impl(run):
    return {s.impl: s for s in summarize(as_run(run))}


def _rec(run, op, dtype, impl):
    return next(r for r in run["records"] if (r["op"], r["dtype"], r["impl"]) == (op, dtype, impl))


def test_summary_geomean_sol_counts_and_speedups():
    run = mixed_run()
    s = _by_impl(run)
    eager_sols = [r["sol"] for r in run["records"] if r["impl"] == "eager"]
    assert s["eager"].geomean_sol == pytest.approx(math.prod(eager_sols) ** (1 / 3))
    # cuda: one ok (gemm), one invalid (SOL > 1, not scored), one failed.
    cuda = s["cuda"]
    assert (cuda.cases, cuda.ok, cuda.invalid, cuda.failed) == (3, 1, 1, 1)
    assert cuda.geomean_sol == pytest.approx(_rec(run, "gemm", "bfloat16", "cuda")["sol"])
    expected = (_rec(run, "gemm", "bfloat16", "eager")["time_s"]["median"]
                / _rec(run, "gemm", "bfloat16", "cuda")["time_s"]["median"])
    assert cuda.geomean_speedup("eager") == pytest.approx(expected)
    assert len(cuda.speedups["eager"]) == 1  # the invalid 3x "win" is not counted
    assert s["eager"].speedups == {}  # a baseline is not sped up over itself


def test_sol_is_capped_and_fraction_at_sol_counts_failures_as_below():
    recs = [
        make_record(impl="k", case="M=1", samples=[1.0] * 5, status="ok"),  # SOL tiny
        make_record(impl="k", case="M=2", status="failed"),
    ]
    t_sol = recs[0]["t_sol_s"]
    recs.append(make_record(impl="k", case="M=3", samples=[t_sol / 1.0000001] * 5, status="ok"))  # rounding
    recs.append(make_record(impl="k", case="M=4", samples=[t_sol / 0.9] * 5))
    recs.append(make_record(impl="k", case="M=5", samples=[t_sol] * 5, status="skipped"))
    s = _by_impl(make_run(recs))["k"]
    assert max(s.sols) == 1.0  # capped
    assert s.cases == 4 and s.skipped == 1
    assert s.at_sol == 2  # 1.0 and 0.9; the failed case counts in the denominator, not the numerator


def test_geomean_of_nothing_is_no_number():
    empty = ImplSummary("x", False)
    assert empty.geomean_sol is None and empty.geomean_speedup("eager") is None
    two = ImplSummary("x", False, sols=[0.25, 1.0], speedups={"eager": [2.0, 8.0]})
    assert two.geomean_sol == pytest.approx(0.5) and two.geomean_speedup("eager") == pytest.approx(4.0)


def test_markdown_report_has_summary_tables_env_and_reasons(tmp_path):
    run = mixed_run()
    path = write_report(as_run(run), tmp_path / "report.md", charts=False)
    text = path.read_text()
    s = _by_impl(run)
    assert "## Summary" in text
    assert f"{s['eager'].geomean_sol * 100:.1f}%" in text
    assert f"{s['cuda'].geomean_speedup('eager'):.2f}x (1)" in text
    for op in ("gemm", "softmax"):
        assert f"## Op: {op}" in text
    header = "| shape | dtype | impl | median time | TFLOP/s | GB/s | SOL % | MFU % | speedup | status |"
    assert text.count(header) == 2
    table_rows = [ln for ln in text.splitlines() if ln.startswith("| M=")]
    assert len(table_rows) == len(run["records"])
    # Reasons for every failed and invalid record.
    assert "max_abs_err 0.5 > atol 0.01" in text and "SOL > 1" in text
    # The invalid record's 3x speedup is never shown as a win.
    invalid_row = next(r for r in table_rows if "invalid" in r and "bfloat16 | cuda" in r)
    assert invalid_row.split("|")[9].strip() == "-"
    for fact in ("580.159.04", "2.11.0+cu130", "0123456789abcdef", "SM 1980 MHz"):
        assert fact in text
    assert "![" not in text  # charts off


def test_markdown_report_writes_linked_images_next_to_it(tmp_path):
    path = write_report(as_run(mixed_run()), tmp_path / "out" / "r.md", charts=True)
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", path.read_text())
    assert len(links) == 6  # roofline + SOL bars, for the whole run and for each of two ops
    for link in links:
        assert (path.parent / link).read_bytes()[:4] == b"\x89PNG"


def test_html_report_is_self_contained(tmp_path):
    path = write_report(as_run(mixed_run()), tmp_path / "r.html", charts=True)
    text = path.read_text()
    images = re.findall(r"src='data:image/png;base64,([^']+)'", text)
    assert len(images) == 6
    assert base64.b64decode(images[0])[:4] == b"\x89PNG"
    assert "http://" not in text and "https://" not in text
    assert text.count("<table") == 4  # summary, environment, two ops
    assert "Op: softmax" in text


def test_report_blocks_for_an_op_with_nothing_plottable_still_have_its_table():
    run = make_run([make_record(samples=noisy_samples(1e-3, 0.01, 10, 1)),
                    make_record(op="broken", status="failed")])
    blocks = build_blocks(as_run(run))
    images = sorted(b.name for b in blocks if b.kind == "image")
    # The failed op has no chart: no point to draw and no SOL to show (issue 11 #12: no empty chart).
    assert images == ["all-roofline", "all-sol", "gemm-roofline", "gemm-sol"]
    assert "Op: broken" in [b.content for b in blocks if b.kind == "h2"]
    at = next(i for i, b in enumerate(blocks) if b.kind == "h2" and b.content == "Op: broken")
    broken_table = blocks[at + 1].content
    assert list(broken_table["status"]) == ["failed: max_abs_err 0.5 > atol 0.01"]


def test_cli_report_and_bad_suffix(tmp_path):
    path = write_run(tmp_path / "run.json", mixed_run())
    res = CliRunner().invoke(app, ["report", str(path), "-o", str(tmp_path / "r.md"), "--no-charts"])
    assert res.exit_code == 0, res.output
    assert "## Op: gemm" in (tmp_path / "r.md").read_text()
    res = CliRunner().invoke(app, ["report", str(path), "-o", str(tmp_path / "r.txt")])
    assert res.exit_code == 2 and "r.txt" in res.output
    res = CliRunner().invoke(app, ["report", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "missing.json" in res.output
