"""Output shapes the op table learned for issue 15's histogram and NMS: a length given by an
int argument ("[bins]") and a length only the op learns as it runs ("[?]"), on a CPU."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernels_ext import checks, codegen  # noqa: E402
from kernels_ext.fakes import make_fake  # noqa: E402
from kernels_ext.optable import OpTableError, load_table  # noqa: E402

COUNTS = """
count_into:
  doc: counts [bins] of the values of x.
  impl: custom
  args:
    x: {type: Tensor, shape: "[...]", dtypes: [uint8, int32]}
    bins: {type: int}
  returns:
    counts: {shape: "[bins, 2 * bins]", dtype: int64}
"""

KEPT = """
keep_some:
  doc: the indices of the rows of x that survive.
  impl: custom
  args:
    x: {type: Tensor, shape: "[N, 4]", dtypes: float32}
    threshold: {type: float}
  returns:
    keep: {shape: "[?]", dtype: int64}
"""


def _load(tmp_path: Path, family: str, text: str):
    path = tmp_path / "csrc" / family / "ops.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return load_table(tmp_path / "csrc")


def test_an_output_length_can_be_an_int_argument(tmp_path):
    (op,) = _load(tmp_path, "counts", COUNTS)
    out = make_fake(op)(torch.zeros(7, dtype=torch.int32), 5)
    assert out.shape == (5, 10) and out.dtype == torch.int64
    ctx = checks.bind_dims(op, {"x": torch.zeros(3, dtype=torch.uint8), "bins": 3})
    assert checks.output_shape(op, 0, ctx) == [3, 6]


def test_an_int_argument_in_a_rows_output_is_allocated_with_its_value(tmp_path):
    (op,) = _load(tmp_path, "rowsum", """
        row_hist:
          doc: per-row counts.
          impl: rows
          args:
            x: {type: Tensor, shape: "[*B, N]", dtypes: float}
            bins: {type: int, default: 4}
          returns:
            y: {shape: "[*B, bins]", dtype: x}
        """)
    text = codegen.generate([op])
    assert "shape_y.push_back(bins);" in text


@pytest.mark.parametrize("shape, pattern", [
    ('"[threshold]"', r"returns\.counts\.shape: 'threshold': 'threshold' is not a dim bound by a "
                      r"required tensor or a required int argument"),
    ('"[limit]"', r"'limit' is not a dim bound by a required tensor or a required int argument"),
])
def test_only_required_int_arguments_size_an_output(tmp_path, shape, pattern):
    text = f"""
        bad:
          doc: d.
          impl: custom
          args:
            x: {{type: Tensor, shape: "[N]", dtypes: float32}}
            threshold: {{type: float}}
            limit: {{type: "int?"}}
          returns:
            counts: {{shape: {shape}, dtype: int64}}
        """
    with pytest.raises(OpTableError, match=pattern):
        _load(tmp_path, "bad", text)


def test_a_data_dependent_length_is_for_custom_outputs_only(tmp_path):
    with pytest.raises(OpTableError, match=r"args\.x\.shape: '\?' \(a length known only after "
                                           r"the op has run\) is for output shapes"):
        _load(tmp_path, "bad_in", """
            bad_in:
              doc: d.
              impl: custom
              args:
                x: {type: Tensor, shape: "[?]", dtypes: float32}
              returns:
                y: {like: x}
            """)
    with pytest.raises(OpTableError, match=r"returns\.y\.shape: impl rows allocates its outputs "
                                           r"before the launch: a '\?' length needs impl: custom"):
        _load(tmp_path / "rows", "bad_rows", """
            bad_rows:
              doc: d.
              impl: rows
              args:
                x: {type: Tensor, shape: "[*B, N]", dtypes: float}
              returns:
                y: {shape: "[?]", dtype: x}
            """)


def test_a_data_dependent_length_has_no_static_shape(tmp_path):
    (op,) = _load(tmp_path, "kept", KEPT)
    ctx = checks.bind_dims(op, {"x": torch.zeros(6, 4), "threshold": 0.5})
    with pytest.raises(ValueError, match=r"keep_some: output keep has a length only the op learns"):
        checks.output_shape(op, 0, ctx)
    assert checks.output_shape(op, 0, ctx, lambda: 11) == [11]
    assert op.schema() == "keep_some(Tensor x, float threshold) -> Tensor"


def test_the_fake_of_a_data_dependent_length_is_an_unbacked_size(tmp_path):
    """Registered on a throwaway library and run the way torch.compile runs fakes: the length is
    a fresh unbacked symbol, not a guess."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

    (op,) = _load(tmp_path, "kept", KEPT)
    lib = torch.library.Library("sk_test_optable_outputs", "FRAGMENT")
    try:
        lib.define(op.schema())
        torch.library.register_fake(f"sk_test_optable_outputs::{op.name}", lib=lib)(make_fake(op))
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            x = mode.from_tensor(torch.zeros(6, 4))
            keep = torch.ops.sk_test_optable_outputs.keep_some(x, 0.5)
        assert keep.dtype == torch.int64 and keep.dim() == 1
        assert free_unbacked_symbols(keep.shape[0])
    finally:
        lib._destroy()


def test_histogram_and_nms_are_in_the_table():
    ops = {op.name: op for op in load_table()}
    assert ops["histogram"].schema() == "histogram(Tensor x, int bins) -> Tensor"
    assert ops["nms"].schema() == "nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor"
    assert [d.kind for d in ops["nms"].outputs[0].shape.dims] == ["dynamic"]
