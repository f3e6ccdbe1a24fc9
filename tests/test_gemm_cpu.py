"""The GEMM family without a GPU: the generated wgmma wrappers are current, the op table entries
and specs say what the kernels do, inputs are refused before any build, and the GPU driver's
pure parts (tile-config names, the summary table) behave."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kernels_ext  # noqa: E402
from kernels_ext import optable  # noqa: E402
from solbench import spec as spec_mod  # noqa: E402
from solbench.torch_ops import gemm as gemm_ops  # noqa: E402
from tests.host_check import run_host_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GEMM_OPS = ("gemm", "sgemm", "gemm_mma", "gemm_wgmma", "gemm_fp8", "gemm_decode", "gemm_decode_mma",
            "sgemm_decode", "linear_residual")


pytestmark = pytest.mark.usefixtures("no_kernel_build")


def _load_script(name: str):
    path = ROOT / "scripts" / "dev" / f"{name}.py"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(mod_spec)
    assert mod_spec.loader is not None
    sys.modules[name] = mod   # dataclasses resolve their annotations through sys.modules
    mod_spec.loader.exec_module(mod)
    return mod


def test_generated_wgmma_wrappers_are_current():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "dev" / "gen_wgmma.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_wgmma_wrappers_name_every_accumulator_once():
    gen = _load_script("gen_wgmma")
    text = (ROOT / "kernels_ext" / "csrc" / "tile" / "wgmma_ops.cuh").read_text()
    for n in gen.SHAPES_N:
        assert f"m64n{n}k16.f32.bf16.bf16" in text and f"m64n{n}k32.f32.e4m3.e4m3" in text
    # m64n256: 128 accumulators %0..%127, then the descriptors and the scale-d predicate
    branch = text.split("N == 256")[1].split("N == ")[0] if "N == 256" in text else ""
    assert '"+f"(d[127])' in branch and '"+f"(d[128])' not in branch


def test_gemm_ops_are_in_the_table_with_their_schemas():
    ops = {op.name: op for op in optable.load_table() if op.family == "gemm"}
    assert set(ops) == set(GEMM_OPS)
    assert ops["gemm_wgmma"].schema() == "gemm_wgmma(Tensor a, Tensor w, str config='auto') -> Tensor"
    assert ops["gemm_fp8"].schema() == ("gemm_fp8(Tensor a, Tensor w, Tensor? scale_a=None, "
                                        "Tensor? scale_b=None, str config='auto') -> Tensor")
    assert ops["linear_residual"].schema() == "linear_residual(Tensor x, Tensor w, Tensor residual, str config='auto') -> Tensor"
    assert ops["sgemm"].schema() == "sgemm(Tensor a, Tensor w, str config='auto') -> Tensor"
    assert ops["gemm_mma"].schema() == "gemm_mma(Tensor a, Tensor w, str config='auto') -> Tensor"
    assert ops["gemm_decode_mma"].schema() == ("gemm_decode_mma(Tensor a, Tensor w, str grid='auto', "
                                               "int prefetch=-1) -> Tensor")
    assert ops["sgemm_decode"].schema() == ("sgemm_decode(Tensor a, Tensor w, str config='auto', "
                                            "str grid='auto', int prefetch=-1) -> Tensor")
    for name in GEMM_OPS:
        assert name in kernels_ext.OPS


def test_wgmma_config_choices_match_the_launchers_names():
    choices = optable.load_table()
    op = next(o for o in choices if o.name == "gemm_wgmma")
    config = next(a for a in op.scalars if a.name == "config")
    header = (ROOT / "kernels_ext" / "csrc" / "gemm" / "hgemm_wgmma.cu").read_text()
    for name in config.choices:
        assert f'return "{name}";' in header, f"{name} is not a wgmma_config_name() of the launcher"
    bench = _load_script("gemm_bench")
    assert set(bench.WGMMA_CONFIGS.values()) | {"auto"} == set(config.choices)


@pytest.mark.parametrize("op, source, bench_dict", [
    ("sgemm", "sgemm_fp32.cu", "SGEMM_CONFIGS"),
    ("gemm_mma", "hgemm_mma.cu", "MMA_CONFIGS"),
])
def test_loader_config_choices_match_the_launchers_names(op, source, bench_dict):
    entry = next(o for o in optable.load_table() if o.name == op)
    config = next(a for a in entry.scalars if a.name == "config")
    text = (ROOT / "kernels_ext" / "csrc" / "gemm" / source).read_text()
    # every choice the table allows is a name the launcher knows (the binding looks it up), in
    # the enum's order
    names = [line.split('"')[1] for line in text.splitlines() if 'return "' in line and "case " in line]
    assert tuple(names) == tuple(config.choices), (names, config.choices)
    bench = _load_script("gemm_bench")
    assert set(getattr(bench, bench_dict).values()) | {"auto"} == set(config.choices)


def _launcher_names(source: str, function: str) -> tuple[str, ...]:
    """The names a launcher's `function` (a switch of `case ...: return "name";`) returns, in order."""
    text = (ROOT / "kernels_ext" / "csrc" / "gemm" / source).read_text()
    body = text[text.index(f"const char* {function}("):]
    body = body[:body.index("\n}\n")]
    return tuple(line.split('"')[1] for line in body.splitlines() if 'return "' in line and "case " in line)


def test_decode_config_and_grid_choices_match_the_launchers_names():
    table = {o.name: o for o in optable.load_table()}
    grids = _launcher_names("gemm_decode_mma.cu", "decode_grid_name")
    for op in ("gemm_decode_mma", "sgemm_decode"):
        grid = next(a for a in table[op].scalars if a.name == "grid")
        assert tuple(grid.choices) == grids, (op, grid.choices, grids)
    config = next(a for a in table["sgemm_decode"].scalars if a.name == "config")
    assert tuple(config.choices) == _launcher_names("sgemm_decode.cu", "sdecode_config_name")


def _t(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("call, error, words", [
    (lambda: kernels_ext.gemm(_t(8, 16), _t(4, 12)), ValueError, "kernels_ext.gemm"),
    (lambda: kernels_ext.gemm(_t(8, 16), _t(4, 16, dtype=torch.float16)), TypeError, "dtype"),
    (lambda: kernels_ext.gemm(_t(16, 8).t(), _t(4, 16)), ValueError, "contiguous"),
    (lambda: kernels_ext.gemm(_t(8, 16), _t(4, 16)), ValueError, "cuda"),
    (lambda: kernels_ext.sgemm(_t(8, 16), _t(4, 16)), TypeError, "dtype"),
    (lambda: kernels_ext.gemm_mma(_t(8, 16, dtype=torch.float32), _t(4, 16, dtype=torch.float32)),
     TypeError, "dtype"),
    (lambda: kernels_ext.gemm_wgmma(_t(8, 20), _t(4, 20)), ValueError, "multiple of 8"),
    (lambda: kernels_ext.gemm_wgmma(_t(8, 16), _t(4, 16), "256x256"), ValueError, "config"),
    (lambda: kernels_ext.gemm_decode(_t(65, 16), _t(4, 16)), ValueError, "M <= 64"),
    (lambda: kernels_ext.gemm_decode(_t(8, 16), _t(4, 16), 3), ValueError, "split_k"),
    (lambda: kernels_ext.gemm_decode_mma(_t(17, 16), _t(4, 16)), ValueError, "M <= 16"),
    (lambda: kernels_ext.gemm_decode_mma(_t(8, 20), _t(4, 20)), ValueError, "multiple of 8"),
    (lambda: kernels_ext.gemm_decode_mma(_t(8, 16), _t(4, 16), "rows"), ValueError, "grid must be one of"),
    (lambda: kernels_ext.gemm_decode_mma(_t(8, 16), _t(4, 16), "auto", 65), ValueError, "prefetch must be"),
    (lambda: kernels_ext.sgemm_decode(_t(8, 16, dtype=torch.float32), _t(4, 16, dtype=torch.float32), "auto",
                                      "auto", -2), ValueError, "got -2"),
    (lambda: kernels_ext.gemm_decode_mma(_t(8, 16, dtype=torch.float32), _t(4, 16, dtype=torch.float32)),
     TypeError, "dtype"),
    (lambda: kernels_ext.sgemm(_t(8, 16, dtype=torch.float32), _t(4, 16, dtype=torch.float32), "bk64"),
     ValueError, "config"),
    (lambda: kernels_ext.sgemm_decode(_t(17, 16, dtype=torch.float32), _t(4, 16, dtype=torch.float32)),
     ValueError, "M <= 16"),
    (lambda: kernels_ext.sgemm_decode(_t(8, 18, dtype=torch.float32), _t(4, 18, dtype=torch.float32)),
     ValueError, "multiple of 4"),
    (lambda: kernels_ext.sgemm_decode(_t(8, 16), _t(4, 16)), TypeError, "float32"),
    (lambda: kernels_ext.sgemm_decode(_t(8, 16, dtype=torch.float32), _t(4, 16, dtype=torch.float32), "rows8"),
     ValueError, "config must be one of"),
    (lambda: kernels_ext.sgemm_decode(_t(8, 16, dtype=torch.float32), _t(4, 16, dtype=torch.float32), "auto",
                                      "rows"), ValueError, "grid must be one of"),
    (lambda: kernels_ext.gemm_mma(_t(8, 16), _t(4, 16), "bk16"), ValueError, "config"),
    (lambda: kernels_ext.gemm_fp8(_t(8, 16), _t(4, 16)), TypeError, "float8_e4m3fn"),
    (lambda: kernels_ext.gemm_fp8(_t(8, 24, dtype=torch.float8_e4m3fn), _t(4, 24, dtype=torch.float8_e4m3fn)),
     ValueError, "multiple of 16"),
    (lambda: kernels_ext.linear_residual(_t(8, 16), _t(4, 16), _t(8, 5)), ValueError, "residual"),
])
def test_bad_inputs_are_refused_before_any_build(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words.lower() in str(info.value).lower(), str(info.value)


def test_specs_name_the_variants_with_per_call_dtypes():
    gemm = spec_mod.load_file(ROOT / "specs" / "ops" / "gemm.yaml")
    impls = {c.name: c for c in gemm.impls}
    assert impls["hgemm_wgmma"].dtypes == ("bfloat16", "float16")
    assert impls["fp8_wgmma"].dtypes == ("float8_e4m3fn",)
    assert impls["sgemm_fp32"].dtypes == ("float32",)
    assert impls["sgemm_fp32_bk32"].kwargs == {"config": "bk32"}
    assert impls["hgemm_mma_bk64"].kwargs == {"config": "bk64"}
    compiled = next(c for c in gemm.baselines if c.name == "compiled")
    assert compiled.compile and compiled.compile_options["mode"] == "max-autotune-no-cudagraphs"  # graphs reuse outputs
    assert compiled.dtypes == ("bfloat16",)      # one autotuned dtype keeps the run bounded
    assert [tuple(c.values()) for c in gemm.cases][1:] == [
        (4096, 4096, 4096), (8192, 8192, 8192), (4096, 8192, 8192), (16, 8192, 8192)]
    decode = spec_mod.load_file(ROOT / "specs" / "ops" / "gemm_decode.yaml")
    assert {c.name: c.fn for c in decode.impls} == {
        "decode_wgmma": "kernels_ext:gemm_decode", "decode_mma": "kernels_ext:gemm_decode_mma",
        "decode_mma_tiles": "kernels_ext:gemm_decode_mma", "sgemm_decode": "kernels_ext:sgemm_decode",
        "sgemm_decode_rows4": "kernels_ext:sgemm_decode", "sgemm_decode_rows2": "kernels_ext:sgemm_decode",
        "sgemm": "kernels_ext:sgemm", "auto": "kernels_ext:gemm"}
    assert next(c for c in decode.impls if c.name == "sgemm_decode_rows2").dtypes == ("float32",)
    assert next(c for c in decode.impls if c.name == "sgemm_decode_rows4").kwargs == {"config": "rows4"}
    assert next(c for c in decode.impls if c.name == "decode_mma_tiles").kwargs == {"grid": "tiles"}
    assert all(case["M"] <= 16 for case in decode.cases)     # gemm_decode_mma's range
    assert (16, 8192, 8192) in [tuple(c.values()) for c in decode.cases]
    lr = spec_mod.load_file(ROOT / "specs" / "ops" / "linear_residual.yaml")
    assert {c.name for c in lr.baselines} == {"unfused", "addmm"}
    # fused bytes: x, w and residual read once, out written once
    env = {"M": 4, "N": 8, "K": 16}
    assert lr.bytes_for("bfloat16", env) == 2 * (4 * 16 + 8 * 16 + 4 * 8 + 4 * 8)


def test_linear_residual_baselines_agree_with_the_reference():
    x, w, r = torch.randn(33, 64, dtype=torch.float64), torch.randn(48, 64, dtype=torch.float64), \
        torch.randn(33, 48, dtype=torch.float64)
    ref = gemm_ops.linear_residual_reference(x, w, r)
    assert torch.allclose(gemm_ops.linear_then_add(x, w, r), ref)
    assert torch.allclose(gemm_ops.linear_addmm(x, w, r), ref)
    assert not torch.allclose(ref, x @ w.t())          # the residual really is added


def test_bench_summary_lists_timings_and_failures_only():
    bench = _load_script("gemm_bench")
    rec = bench.Record
    rows = [vars(rec("wgmma", "hgemm_wgmma", "bfloat16", 8192, 8192, 8192, "auto", True, 1e-3, 1.5,
                     733.0, "cublas", 1.6, 1.07)),
            vars(rec("wgmma", "hgemm_wgmma", "bfloat16", 33, 1000, 264, "auto", True, 1e-3)),
            vars(rec("fp8", "fp8_wgmma", "float8_e4m3fn", 1, 256, 512, "auto", False, 0.5))]
    table = bench.summary_table(rows)
    assert "8192x8192x8192" in table and "1.07x" in table
    assert "33x1000x264" not in table          # a passing correctness-only row is not listed
    assert "1x256x512" in table and "NO" in table


@pytest.mark.parametrize("check", ["check_decode_mma", "check_sgemm_loaders", "check_sgemm_micro_tiles",
                                   "check_mma_interior_copies", "check_mma_pipe"])
def test_index_models_of_the_round2_kernels_match_numpy(check):
    # Lane-level models of gemm_decode_mma's fragments and rings, sgemm's bk32 copies and
    # gemm_mma's bk64 interior copies (they follow the C++ line by line; see the module doc).
    models = _load_script("gemm_index_models")
    getattr(models, check)()


SGEMM_RULE_CHECK = r"""
#include <cstdio>
#include "gemm/sgemm_rule.h"
int main() {
  int bad = 0;
  // The H100's measured shapes (132 SMs): 1024^3 ran bm64 38% faster, 4096^3 and up bk32.
  bad += !sk::gemm::sgemm_prefers_bm64(1024, 1024, 132);
  bad += sk::gemm::sgemm_prefers_bm64(4096, 4096, 132) + sk::gemm::sgemm_prefers_bm64(8192, 8192, 132);
  bad += sk::gemm::sgemm_prefers_bm64(4096, 8192, 132);
  // One row tile either way (M = 16): the same 64 blocks, bm64's of half the threads (slower).
  bad += sk::gemm::sgemm_prefers_bm64(16, 8192, 132) + sk::gemm::sgemm_prefers_bm64(64, 1024, 132);
  bad += !sk::gemm::sgemm_prefers_bm64(65, 1024, 132);
  // The boundary: up to 132 blocks of 128 x 128 (at most one per SM) take bm64, 133 bk32.
  bad += !sk::gemm::sgemm_prefers_bm64(128 * 12, 128 * 11, 132) + sk::gemm::sgemm_prefers_bm64(128 * 133, 128, 132);
  bad += sk::gemm::sgemm_prefers_bm64(1024, 1024, 0);   // SM count unknown: bk32
  std::printf("%d wrong\n", bad);
  return bad != 0;
}
"""


def test_sgemm_rule_picks_what_the_h100_measured(tmp_path):
    """csrc/gemm/sgemm_rule.h compiled for the host: bm64 at 1024^3 (64 blocks of 128 x 128 on 132
    SMs), bk32 from 4096^3 and where both grids have one row tile (M = 16), the boundary at one
    block per SM."""
    run = run_host_check(tmp_path, SGEMM_RULE_CHECK)
    assert run.returncode == 0 and run.stdout.strip() == "0 wrong", run.stdout + run.stderr


DECODE_RULE_CHECK = r"""
#include <cstdio>
#include "gemm/decode_rule.h"
using namespace sk::gemm;
int main() {
  int bad = 0;
  // Tiles: one CTA per row tile; waves: whole waves of two CTAs per SM, never more CTAs than rows.
  bad += decode_ctas(8192, 32, 2, DecodeGrid::kTiles, 132) != 256;
  bad += decode_ctas(8192, 32, 2, DecodeGrid::kWaves, 132) != 264;
  bad += decode_ctas(8192, 32, 2, DecodeGrid::kAuto, 132) != 264;
  bad += decode_ctas(16384, 32, 2, DecodeGrid::kAuto, 132) != 528;
  bad += decode_ctas(100, 32, 2, DecodeGrid::kWaves, 132) != 100;
  // auto keeps tiles below half a wave (spreading 32 tiles' rows over 264 CTAs would only multiply
  // the CTAs re-reading x), and takes waves from half a wave up
  bad += decode_ctas(1024, 32, 2, DecodeGrid::kAuto, 132) != 32;
  bad += decode_ctas(132 * 32, 32, 2, DecodeGrid::kAuto, 132) != 264;
  bad += decode_ctas(131 * 32, 32, 2, DecodeGrid::kAuto, 132) != 131;
  bad += decode_ctas(8192, 32, 2, DecodeGrid::kAuto, 0) != 256;   // SM count unknown: tiles
  // 16-row CTAs where 32-row ones fill under three quarters of the SMs' two slots
  bad += !decode_prefers_rows16(4096, 132) + decode_prefers_rows16(8192, 132);
  bad += !decode_prefers_rows16(197 * 32, 132) + decode_prefers_rows16(198 * 32, 132);
  bad += decode_prefers_rows16(4096, 0);
  // the one-CTA-per-SM tile's 64-row CTAs halve where they fill under three quarters of the SMs
  bad += !decode_halves_rows(4096, 64, 1, 132) + decode_halves_rows(8192, 64, 1, 132);
  bad += !decode_halves_rows(98 * 64, 64, 1, 132) + decode_halves_rows(99 * 64, 64, 1, 132);
  bad += decode_ctas(8192, 64, 1, DecodeGrid::kAuto, 132) != 132;   // 128 tiles: one wave, rows spread
  // sgemm_decode's token templates: M rounded up to a power of two, 0 outside 1..16
  const int want[18] = {0, 1, 2, 4, 4, 8, 8, 8, 8, 16, 16, 16, 16, 16, 16, 16, 16, 0};
  for (int m = 0; m < 18; ++m) bad += sgemm_decode_tokens(m) != want[m];
  // auto: rows4 at M = 1, 2, rows4_d3 at 4 and 8 tokens (M = 3..8), tf32x3 at 16 (M = 9..16)
  for (int m = 1; m <= 16; ++m) {
    const SdecodeConfig c = sdecode_auto_config(sgemm_decode_tokens(m));
    const SdecodeConfig want_c = m >= 9   ? SdecodeConfig::kTf32x3
                                 : m >= 3 ? SdecodeConfig::kRows4D3
                                          : SdecodeConfig::kRows4;
    bad += c != want_c;
  }
  std::printf("%d wrong\n", bad);
  return bad != 0;
}
"""


def test_decode_rule_deals_rows_as_documented(tmp_path):
    """csrc/gemm/decode_rule.h compiled for the host: the grids of the two decode kernels, the 16-row
    CTA threshold, sgemm_decode's token templates and its automatic thread tile."""
    run = run_host_check(tmp_path, DECODE_RULE_CHECK)
    assert run.returncode == 0 and run.stdout.strip() == "0 wrong", run.stdout + run.stderr


def test_tf32x3_error_model():
    """scripts/dev/tf32x3_error_model.py, the CPU model PERF cites for sgemm_decode's tf32x3: its
    TF32 rounding is cvt.rna's (10 mantissa bits, ties away from zero), hi + lo keeps about 22 bits,
    the three-product sum lands under fp32 summed one k at a time, far under plain TF32, and the
    mma's round-toward-zero sums need a fresh accumulator per piece."""
    import numpy as np

    model = _load_script("tf32x3_error_model")
    f = np.array([1.5, 1 + 2**-10, 1 + 2**-11, -(1 + 2**-11), 1 + 3 * 2**-12, 1 + 2**-12], np.float32)
    want = np.array([1.5, 1 + 2**-10, 1 + 2**-10, -(1 + 2**-10), 1 + 2**-10, 1.0], np.float32)
    assert np.array_equal(model.to_tf32(f), want)
    x = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
    hi = model.to_tf32(x)
    lo = model.to_tf32(x - hi)
    assert np.max(np.abs((hi.astype(np.float64) + lo - x) / x)) < 2.0**-21
    e = model.errors()
    assert e["3xTF32, k8 steps"] < e["fp32, one k at a time"] < 1e-5
    assert e["1xTF32, k8 steps"] > 100 * e["3xTF32, k8 steps"]
    # the tensor cores round each mma's sum toward zero: into one K-long sum that bias builds up
    # (what the H100 showed); a fresh accumulator per 16-k piece keeps it under fp32's error
    assert e["3xTF32 mma RZ, one accumulator"] > 10 * e["3xTF32 mma RZ, fresh per 16 k"]
    assert e["3xTF32 mma RZ, fresh per 16 k"] < e["fp32, one k at a time"]
    assert np.array_equal(model.to_fp32_toward_zero(np.array([1 + 2.0**-30, -(1 + 2.0**-30)])),
                          np.array([1.0, -1.0], np.float32))

