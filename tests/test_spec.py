import copy
from pathlib import Path

import pytest
import yaml

from solbench import spec
from solbench.job import Case
from solbench.errors import UserError

GOOD = {
    "op": "scale",
    "summary": "y = 2x",
    "cases": [{"M": 4, "N": 8}, {"M": 64, "N": 128}],
    "dtypes": ["float32", "bfloat16"],
    "inputs": {"x": {"shape": ["M", "N"], "init": "randn"}},
    "outputs": {"y": {"shape": ["M", "N"]}},
    "flops": "M * N",
    "bytes": "auto",
    "compute": "simt",
    "reference": {"fn": "torch.mul", "kwargs": {"other": 2}},
    "baselines": {"eager": {"fn": "torch.mul", "kwargs": {"other": 2}}},
    "tolerance": {"float32": {"atol": 1e-6, "rtol": 1e-6}, "bfloat16": {"atol": 1e-2, "rtol": 1e-2}},
}


def write(tmp_path: Path, data: dict, name: str = "scale.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def mutate(**changes) -> dict:
    data = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


def test_builtin_specs_all_load():
    specs = spec.load_all()
    for name in ("gemm", "attention", "softmax", "rmsnorm", "layernorm", "add", "gelu", "transpose",
                 "row_sum", "rope", "cross_entropy", "silu", "swiglu"):
        assert name in specs, name
    for s in specs.values():
        assert len(s.cases) >= 2, f"{s.op}: need a small case and a large one"


def test_builtin_large_cases_move_at_least_4x_h200_l2():
    l2 = 62914560
    for s in spec.load_all().values():
        if s.notes.startswith("latency-bound"):
            continue   # e.g. NMS: its work is a dependent scan over a few thousand boxes, not bytes
        env = Case(s.op, s.cases[-1], s.dtypes[0]).env()
        nbytes = s.bytes_for(s.dtypes[0], env)
        assert nbytes >= 4 * l2, f"{s.op}: largest default case moves only {nbytes / 2**20:.0f} MiB"


def test_good_spec_parses(tmp_path):
    s = spec.load_file(write(tmp_path, GOOD))
    assert s.op == "scale" and s.params == ("M", "N")
    assert s.baselines[0].name == "eager"
    assert s.compute_unit("bfloat16") == "simt"
    assert s.tolerance["bfloat16"].atol == 1e-2


def test_sweep_is_a_product(tmp_path):
    data = mutate(cases=None, sweep={"M": [1, 2], "N": [3, 4, 5]})
    assert len(spec.load_file(write(tmp_path, data)).cases) == 6


@pytest.mark.parametrize("data, field, words", [
    (mutate(flops="M * Q"), "flops", "unknown parameter 'Q'"),
    (mutate(flops="__import__('os')"), "flops", "__import__"),
    (mutate(color="red"), "color", "unknown key 'color'"),
    (mutate(summary=None), "summary", "missing required field"),
    (mutate(dtypes=["float33"]), "dtypes[0]", "unknown dtype 'float33'"),
    (mutate(compute="gpu"), "compute.default", "unknown compute unit"),
    (mutate(tolerance={"float32": {"atol": 1, "rtol": 1}}), "tolerance", "no tolerance for dtype 'bfloat16'"),
    (mutate(tolerance={"float32": {"atol": 1}, "bfloat16": {"norm": 1}}), "tolerance.float32", "atol and rtol together"),
    (mutate(tolerance={"float32": {"atol": "x", "rtol": 1}, "bfloat16": {"norm": 1}}), "tolerance.float32.atol", "expected a number"),
    (mutate(cases=[{"M": 1, "N": 2}, {"M": 1}]), "cases[1]", "differ"),
    (mutate(cases=[{"M": -1, "N": 2}]), "cases[0].M", "non-negative"),
    (mutate(inputs={"x": {"shape": ["M", "Z"]}}), "inputs.x.shape[1]", "unknown parameter 'Z'"),
    (mutate(inputs={"x": {"shape": ["M"], "init": "zeros"}}), "inputs.x.init", "unknown init 'zeros'"),
    (mutate(inputs={"x": {"shape": ["M"], "init": "uniform", "low": 2, "high": 1}}), "inputs.x.low", "low < high"),
    (mutate(baselines={}), "baselines", "at least one baseline"),
    (mutate(baselines={"eager": {"fn": "torch.mul", "device": "tpu"}}), "baselines.eager.device", "expected 'cuda'"),
    (mutate(baselines={"eager": {"fn": "torch.mul", "kwargs": {"k": "=M + Q"}}}), "baselines.eager.kwargs.k", "unknown parameter 'Q'"),
])
def test_validation_errors_name_file_and_field(tmp_path, data, field, words):
    path = write(tmp_path, data)
    with pytest.raises(UserError) as info:
        spec.load_file(path)
    message = str(info.value)
    assert str(path) in message
    assert f"field '{field}'" in message
    assert words in message


def test_bad_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("op: x\nsummary: [unclosed\n")
    with pytest.raises(UserError, match=r"broken.yaml: not valid YAML \(line"):
        spec.load_file(path)


def test_extra_spec_dirs_and_env(tmp_path, monkeypatch):
    write(tmp_path, GOOD)
    assert "scale" in spec.load_all([tmp_path])
    monkeypatch.setenv(spec.SPECS_ENV, str(tmp_path))
    assert "scale" in spec.load_all()
    with pytest.raises(UserError, match="does not exist"):
        spec.load_all([tmp_path / "nope"])


def _counts(op: str, params: dict, dtype: str) -> tuple[float, float]:
    s = spec.load_all()[op]
    case = Case(op, params, dtype)
    env = case.env()
    nbytes = s.bytes_for(dtype, env)
    return s.flops.evaluate(env), nbytes


def test_gemm_counts_by_hand():
    flops, nbytes = _counts("gemm", {"M": 8192, "N": 4096, "K": 1024}, "bfloat16")
    assert flops == 2 * 8192 * 4096 * 1024
    assert nbytes == (8192 * 1024 + 4096 * 1024 + 8192 * 4096) * 2
    flops, nbytes = _counts("gemm", {"M": 64, "N": 32, "K": 16}, "float8_e4m3fn")
    assert nbytes == (64 * 16 + 32 * 16) * 1 + 64 * 32 * 2   # fp8 operands, bf16 output
    s = spec.load_all()["gemm"]
    assert s.compute_unit("float32") == "simt" and s.compute_unit("bfloat16") == "tensor"


def test_attention_counts_by_hand():
    p = {"B": 4, "H": 32, "HKV": 32, "SQ": 4096, "SK": 4096, "D": 128, "causal": False}
    flops, nbytes = _counts("attention", p, "bfloat16")
    assert flops == 4 * 4 * 32 * 4096 * 4096 * 128
    assert nbytes == 4 * (4 * 32 * 4096 * 128) * 2
    causal_flops, _ = _counts("attention", {**p, "causal": True}, "bfloat16")
    assert causal_flops == 4 * 4 * 32 * 128 * (4096 * 4097 // 2)   # exactly the unmasked pairs
    # bottom-right causal with SQ < SK: query i sees SK - SQ + i + 1 keys
    q = {**p, "SQ": 3, "SK": 5, "causal": True}
    small, _ = _counts("attention", q, "bfloat16")
    assert small == 4 * 4 * 32 * 128 * (3 + 4 + 5)


def test_cross_entropy_bytes_use_each_tensors_dtype():
    _, nbytes = _counts("cross_entropy", {"N": 16, "V": 100}, "bfloat16")
    assert nbytes == 16 * 100 * 2 + 16 * 8 + 4      # the loss is written in fp32


def test_specs_are_found_in_a_checkout_or_an_installed_prefix(tmp_path):
    from solbench.paths import specs_root

    installed = tmp_path / "prefix" / "share" / "solbench" / "specs"
    (installed / "ops").mkdir(parents=True)
    assert specs_root(checkout=tmp_path / "no-checkout", prefix=tmp_path / "prefix") == installed
    with pytest.raises(UserError, match="cannot find solbench's built-in specs"):
        specs_root(checkout=tmp_path / "no-checkout", prefix=tmp_path / "empty")


def test_output_bytes_count_each_output_at_its_own_dtype():
    from solbench import spec as specmod

    s = specmod.load_all()["cross_entropy_rows"]
    env = {"N": 16, "V": 100}
    assert s.output_bytes("bfloat16", env) == 16 * 4          # fp32 losses whatever the logits' dtype
    assert s.fused_bytes("bfloat16", env) == 16 * 100 * 2 + 16 * 8 + 16 * 4
