"""Roofline and SOL bar charts, checked through matplotlib objects (gids), not pixels."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from solbench.cli import app
from solbench.errors import UserError
from solbench.charts import save_figure
from solbench.roofline import plot_roofline
from solbench.solchart import plot_sol_bars
from synthetic import H200_PEAKS, as_run, make_record, make_run, mixed_run, noisy_samples, write_run


def _lines(fig, prefix: str) -> list:
    return [ln for ax in fig.axes for ln in ax.get_lines() if str(ln.get_gid() or "").startswith(prefix)]


def _annotations(fig, prefix: str) -> list:
    return [t for ax in fig.axes for t in ax.texts if str(t.get_gid() or "").startswith(prefix)]


def test_roofline_draws_one_point_per_record_and_one_roof_per_precision():
    fig, summary = plot_roofline([as_run(mixed_run())])
    # mixed_run: 4 ok records, 1 invalid (SOL > 1), 1 failed (no timing, not drawn).
    assert summary.n_points == 5
    assert len(_lines(fig, "point:")) == 4
    assert len(_lines(fig, "error:")) == 1
    assert sorted(summary.roofs) == ["bf16 tensor", "fp32 simt"]
    roofs = {ln.get_gid(): ln for ln in _lines(fig, "roof:")}
    assert set(roofs) == {"roof:memory", "roof:bf16 tensor", "roof:fp32 simt"}
    assert set(roofs["roof:bf16 tensor"].get_ydata()) == {H200_PEAKS["tensor"]["bf16"]}
    assert all(ln.get_linestyle() == "-" for ln in roofs.values())  # datasheet roofs are solid
    # Ridge points sit where the memory slope meets each roof.
    ridges = {ln.get_gid(): ln.get_xdata()[0] for ln in _lines(fig, "ridge:")}
    bw = H200_PEAKS["memory_bandwidth"]
    assert ridges["ridge:bf16 tensor"] == pytest.approx(H200_PEAKS["tensor"]["bf16"] / bw)
    assert ridges["ridge:fp32 simt"] == pytest.approx(H200_PEAKS["simt"]["fp32"] / bw)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("ridge 206 FLOP/B" in t for t in texts)
    assert any("989 TFLOP/s" in t for t in texts)


def test_point_coordinates_are_intensity_and_achieved_flops():
    run = mixed_run()
    fig, _ = plot_roofline([as_run(run)])
    rec = run["records"][0]
    (line,) = [ln for ln in _lines(fig, "point:") if ln.get_gid().endswith("bfloat16/eager")
               and "gemm" in ln.get_gid()]
    assert line.get_xdata()[0] == pytest.approx(rec["flops"] / rec["bytes"])
    assert line.get_ydata()[0] == pytest.approx(rec["flops"] / rec["time_s"]["median"])


def test_invalid_and_above_roof_points_are_errors_never_wins():
    run = mixed_run()
    # A harness bug: faster than light but still marked ok. The chart must catch it anyway.
    fast = make_record("gemm", "M=512,N=512,K=512", "bfloat16", "cuda", flops=2 * 512**3, nbytes=3 * 512 * 512 * 2,
                       samples=[1e-7] * 10, status="ok")
    run["records"].append(fast)
    fig, summary = plot_roofline([as_run(run)])
    assert len(summary.error_points) == 2
    assert any("above its roof" in e and "M=512" in e for e in summary.error_points)
    assert any("SOL > 1" in e for e in summary.error_points)
    assert len(_lines(fig, "error:")) == 2
    # One panel per op, each with its own legend: the fast gemm and the invalid softmax, one each.
    for ax in fig.axes:
        assert "SOL > 1 / invalid (1)" in [t.get_text() for t in ax.get_legend().get_texts()]
    # No arrow ever points at an error point.
    assert not [a for a in _annotations(fig, "arrow:") if "M=512" in a.get_gid()]


def test_arrows_go_from_baseline_to_each_custom_impl_of_the_same_case():
    fig, _ = plot_roofline([as_run(mixed_run())])
    arrows = [a.get_gid() for a in _annotations(fig, "arrow:")]
    # gemm eager -> cuda only: softmax bf16 cuda is invalid and softmax fp32 cuda failed.
    assert arrows == ["arrow:gemm/M=4096,N=4096,K=4096/bfloat16/eager->cuda"]


def test_filters_select_points_and_roofs():
    run = mixed_run()
    _, s = plot_roofline([as_run(run)], ops=["softmax"])
    assert s.n_points == 3 and s.roofs == ["fp32 simt"]
    _, s = plot_roofline([as_run(run)], dtypes=["float32"])
    assert s.n_points == 1
    _, s = plot_roofline([as_run(run)], impls=["eager"])
    assert s.n_points == 3 and not s.error_points
    with pytest.raises(UserError, match="ops present: gemm, softmax"):
        plot_roofline([as_run(run)], ops=["conv"])


def test_every_precision_present_gets_its_own_roof():
    recs = [make_record(dtype=d, compute_unit="tensor", peak_key=k) for d, k in
            (("float32", "tf32"), ("bfloat16", "bf16"), ("float8_e4m3fn", "fp8"))]
    recs.append(make_record(dtype="float32", impl="simt", compute_unit="simt", peak_key="fp32"))
    fig, s = plot_roofline([as_run(make_run(recs))])
    assert sorted(s.roofs) == ["bf16 tensor", "fp32 simt", "fp8 tensor", "tf32 tensor"]
    assert len(_lines(fig, "roof:")) == 5  # four compute roofs + memory


def test_precisions_with_the_same_peak_share_one_labelled_roof():
    recs = [make_record(dtype="bfloat16", peak_key="bf16"), make_record(dtype="float16", peak_key="fp16")]
    fig, s = plot_roofline([as_run(make_run(recs))])
    assert s.roofs == ["bf16 tensor, fp16 tensor"]
    assert len(_lines(fig, "roof:")) == 2  # that roof + memory


def test_measured_ceilings_are_dashed_next_to_datasheet_roofs():
    run = mixed_run()
    run["peaks"]["measured"] = {"memory_bandwidth": 4.28e12, "tensor": {"bf16": 680e12}, "simt": {"fp32": 51.3e12}}
    fig, s = plot_roofline([as_run(run)])
    styles = {ln.get_gid(): ln.get_linestyle() for ln in _lines(fig, "roof:")}
    assert styles["roof:bf16 tensor"] == "-" and styles["roof:bf16 tensor (measured)"] == "--"
    assert styles["roof:memory"] == "-" and styles["roof:memory (measured)"] == "--"
    assert len(s.roofs) == 4

    measured = mixed_run()
    measured["peaks"]["source"] = "measured"
    fig, _ = plot_roofline([as_run(measured)])
    assert {ln.get_linestyle() for ln in _lines(fig, "roof:")} == {"--"}
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "measured ceiling" in legend and "datasheet roof" not in legend


def test_runs_from_two_gpus_get_their_own_roofs():
    h100 = {**H200_PEAKS, "name": "NVIDIA H100 SXM", "memory_bandwidth": 3.35e12}
    a = make_run([make_record()])
    b = make_run([make_record(peaks=h100)], device="NVIDIA H100", peaks=h100)
    fig, s = plot_roofline([as_run(a), as_run(b)])
    assert s.n_points == 2
    assert sorted(s.roofs) == ["NVIDIA H100 SXM: bf16 tensor", "NVIDIA H200 SXM: bf16 tensor"]
    assert len(_lines(fig, "roof:memory")) == 2
    assert "NVIDIA H100" in s.title and "NVIDIA H200" in s.title
    assert fig.get_suptitle() == s.title


def test_title_names_device_and_peak_source():
    fig, _ = plot_roofline([as_run(mixed_run())])
    title = fig.get_suptitle()
    assert "NVIDIA H200" in title and "datasheet" in title
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["gemm", "softmax"]   # one panel per op


def test_nearly_coincident_points_are_each_identified_by_the_legend():
    recs = [make_record(impl=f"impl{i}", samples=noisy_samples(2.5e-5 * (1 + i * 1e-3), 0.001, 10, i))
            for i in range(12)]
    fig, s = plot_roofline([as_run(make_run(recs))])
    assert s.n_points == 12
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # Twelve impls, twelve markers named in the legend; the case is named once, as the table names it.
    assert {f"impl{i}" for i in range(12)} <= set(legend)
    assert len({ln.get_marker() for ln in _lines(fig, "point:")}) == 12
    assert "M=1024,N=1024,K=1024 bf16" in legend


def test_records_without_positive_flops_are_skipped_and_reported():
    run = make_run([make_record(), make_record(impl="copy", flops=0.0)])
    _, s = plot_roofline([as_run(run)])
    assert s.n_points == 1
    assert s.skipped and "copy" in s.skipped[0]


def test_sol_bars_one_bar_per_ok_record_capped_and_invalid_marked():
    run = mixed_run()
    fig, s = plot_sol_bars([as_run(run)])
    assert s.ops == ["gemm", "softmax"] and len(fig.axes) == 2
    assert s.n_bars == 4
    assert s.invalid == ["softmax/M=4096,N=8192/bfloat16/cuda"]
    assert s.failed == ["softmax/M=4096,N=8192/float32/cuda"]
    bars = {p.get_gid(): p for ax in fig.axes for p in ax.patches if str(p.get_gid() or "").startswith("bar:")}
    for rec in run["records"]:
        name = "/".join((rec["op"], rec["case"], rec["dtype"], rec["impl"]))
        if rec["status"] == "ok":
            assert bars[f"bar:{name}"].get_height() == pytest.approx(rec["sol"])
    invalid = [p for ax in fig.axes for p in ax.patches if str(p.get_gid() or "").startswith("invalid:")]
    assert len(invalid) == 1 and invalid[0].get_hatch() == "xx"
    # Baseline bars come first within each group.
    gemm_bars = sorted((p.get_x(), p.get_gid()) for p in fig.axes[0].patches if p.get_gid())
    assert gemm_bars[0][1].endswith("/eager")


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_save_figure_by_suffix(tmp_path, suffix):
    fig, _ = plot_sol_bars([as_run(mixed_run())], ops=["gemm"])
    path = save_figure(fig, tmp_path / f"chart{suffix}")
    head = path.read_bytes()[:8]
    assert {".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF"}[suffix] in head


def test_save_figure_rejects_unknown_suffix(tmp_path):
    fig, _ = plot_sol_bars([as_run(mixed_run())], ops=["gemm"])
    with pytest.raises(UserError, match="unsupported image type"):
        save_figure(fig, tmp_path / "chart.jpg")


def test_cli_roofline_and_plot_sol(tmp_path):
    path = write_run(tmp_path / "run.json", mixed_run())
    res = CliRunner().invoke(app, ["roofline", str(path), "-o", str(tmp_path / "r.svg"), "--ops", "gemm,softmax"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r.svg").stat().st_size > 0 and "not a win" in res.output
    res = CliRunner().invoke(app, ["plot", "sol", str(path), "-o", str(tmp_path / "s.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    res = CliRunner().invoke(app, ["roofline", str(path), "-o", str(tmp_path / "r.png"), "--ops", "nope"])
    assert res.exit_code == 2 and "no records" in res.output


# ---------------------------------------------------------------- issue 11 #16: a chart a reviewer can paste


def dense_run() -> dict:
    """Eight memory-bound ops x two cases x two dtypes x three impls, like results/h200/kernels_v3.json."""
    recs = []
    for k, op in enumerate(("add", "gelu", "silu", "swiglu", "row_sum", "softmax", "rmsnorm", "layernorm")):
        for case, elems in (("M=1024,N=1024", 1024 * 1024), ("M=32768,N=8192", 32768 * 8192)):
            for dtype, size in (("bfloat16", 2), ("float32", 4)):
                flops, nbytes = (1 + k % 4) * elems, 3 * elems * size
                t_sol = nbytes / H200_PEAKS["memory_bandwidth"]
                for j, impl in enumerate(("eager", "compiled", "cuda")):
                    recs.append(make_record(op, case, dtype, impl, flops=flops, nbytes=nbytes, compute_unit="simt",
                                            peak_key="fp32", is_baseline=impl != "cuda",
                                            samples=noisy_samples(t_sol / (0.3 + 0.2 * j), 0.01, 10, k * 7 + j)))
    return make_run(recs)


@pytest.mark.parametrize("make", [mixed_run, dense_run], ids=["mixed", "dense"])
def test_no_text_overlaps_and_none_is_clipped(make, tmp_path):
    from solbench.chartlabels import overlapping_texts, texts_outside

    fig, s = plot_roofline([as_run(make())])
    assert overlapping_texts(fig) == []
    assert texts_outside(fig) == []
    assert not s.unplaced                          # every roof, memory and ridge value found a free place
    # The same after saving at the docs' resolution (text scales with the dpi like everything else).
    save_figure(fig, tmp_path / "r.png")
    assert overlapping_texts(fig) == [] and texts_outside(fig) == []


def test_roof_values_are_written_like_the_tables_rates():
    peaks = {**H200_PEAKS, "tensor": {**H200_PEAKS["tensor"], "fp8": 1339.6e12}}
    recs = [make_record(dtype="float8_e4m3fn", peak_key="fp8", peaks=peaks)]
    fig, _ = plot_roofline([as_run(make_run(recs, peaks=peaks))])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "fp8 tensor 1,340 TFLOP/s" in texts
    assert "memory 4,800 GB/s" in texts
    assert not any("e+" in t for t in texts)


def test_cases_are_named_as_the_tables_name_them():
    rec = make_record("attention", "B=1,H=4,S=256,D=64,causal=0")
    rec["params"]["causal"] = False                     # a boolean parameter, as the spec writes it
    fig, _ = plot_roofline([as_run(make_run([rec]))])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "B=1,H=4,S=256,D=64,causal=0 bf16" in legend
    assert not any("False" in t or "1x4x256" in t for t in legend)


def test_an_impl_keeps_its_marker_whatever_else_the_chart_shows():
    def marker_of(impls, name):
        recs = [make_record(impl=i, is_baseline=i == "eager") for i in impls]
        fig, _ = plot_roofline([as_run(make_run(recs))])
        (line,) = [ln for ln in _lines(fig, "point:") if ln.get_gid().endswith("/" + name)]
        return line.get_marker()

    assert marker_of(["eager", "cuda"], "cuda") == marker_of(["eager", "compiled", "triton_v2", "cuda"], "cuda")
    assert marker_of(["eager", "my_kernel"], "my_kernel") == marker_of(["eager", "zz", "my_kernel"], "my_kernel")


def test_every_point_is_identified_by_its_panel_colour_and_marker():
    fig, s = plot_roofline([as_run(dense_run())])
    assert s.n_points == 96
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        points = [ln for ln in ax.get_lines() if str(ln.get_gid() or "").startswith("point:")]
        keys = [(ln.get_color(), ln.get_marker()) for ln in points]
        assert len(set(keys)) == len(keys) == 12      # no two points of a panel look alike
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert {"M=1024,N=1024 bf16", "M=32768,N=8192 fp32", "cuda", "eager (baseline)"} <= set(legend)
