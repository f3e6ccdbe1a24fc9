"""The peak tables in specs/gpus/ are the denominator of every score: check them against each other.

Each check recomputes a figure from first principles (SM count x per-SM rate x clock, clock x bus
width) so that a typo, a sparse figure stored as dense or a figure copied from another card fails CI.
"""

from __future__ import annotations


import pytest
import yaml

from solbench.peaks import load_gpu_tables
from solbench.paths import specs_root

TABLE_PATHS = sorted((specs_root() / "gpus").glob("*.yaml"))
RAW = {p.stem: yaml.safe_load(p.read_text()) for p in TABLE_PATHS}

REQUIRED_POSITIVE = ("sm_count", "l2_bytes", "memory_gib", "boost_clock_mhz", "peak_clock_mhz",
                     "memory_bandwidth_gbps")
REQUIRED = REQUIRED_POSITIVE + ("name", "match", "compute_capability", "simt_tflops", "tensor_tflops", "sources")

# FP32 lanes per SM. Turing is listed too (T4); Ampere GA10x (8.6) doubled the lanes of GA100 (8.0).
FP32_LANES_PER_SM = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.9": 128, "9.0": 128, "10.0": 128}

# Dense fp16/bf16 tensor FLOP per clock per SM with fp32 accumulation on professional/datacenter parts.
# GeForce parts run fp32 accumulation at half this rate (the figure PyTorch gets), see GEFORCE_FACTOR.
TENSOR_FLOP_PER_CLK_SM = {"7.0": 1024, "7.5": 1024, "8.0": 2048, "8.6": 1024, "8.9": 1024,
                          "9.0": 4096, "10.0": 8192}
GEFORCE_FACTOR = 0.5

REL_TOL = 0.03        # datasheets round to 2-3 significant digits

# (torch.cuda.get_device_name(), SM count, total memory in GiB as torch reports it) -> expected table
REAL_DEVICES = [
    ("NVIDIA H200", 132, 139.8, "h200"),
    ("NVIDIA H100 80GB HBM3", 132, 79.1, "h100_sxm"),
    ("NVIDIA H100 PCIe", 114, 79.1, "h100_pcie"),
    ("NVIDIA B200", 148, 178.4, "b200"),
    ("NVIDIA A100-SXM4-40GB", 108, 39.4, "a100_sxm_40gb"),
    ("NVIDIA A100-SXM4-80GB", 108, 79.2, "a100_sxm_80gb"),
    ("NVIDIA A100-PCIE-40GB", 108, 39.4, "a100_pcie_40gb"),
    ("NVIDIA A100 80GB PCIe", 108, 79.2, "a100_pcie_80gb"),
    ("NVIDIA L40S", 142, 44.4, "l40s"),
    ("NVIDIA L4", 58, 22.0, "l4"),
    ("NVIDIA A10", 72, 22.0, "a10"),
    ("Tesla T4", 40, 14.6, "t4"),
    ("Tesla V100-SXM2-16GB", 80, 15.8, "v100_sxm2"),
    ("Tesla V100-SXM2-32GB", 80, 31.7, "v100_sxm2"),
    ("NVIDIA GeForce RTX 4090", 128, 23.6, "rtx_4090"),
    ("NVIDIA GeForce RTX 3090", 82, 23.7, "rtx_3090"),
]

# Near-miss names of other cards: each must match no table (their clocks or bandwidth differ).
OTHER_DEVICES = [
    ("NVIDIA H100 NVL", 132, 93.1),
    ("NVIDIA H200 NVL", 132, 139.8),
    ("NVIDIA GB200", 152, 184.0),
    ("NVIDIA A10G", 80, 22.0),
    ("NVIDIA L40", 142, 44.4),
    ("NVIDIA GeForce RTX 4090 D", 114, 23.6),
    ("NVIDIA GeForce RTX 3090 Ti", 84, 23.7),
    ("Tesla V100-PCIE-16GB", 80, 15.8),
    ("NVIDIA T400", 6, 2.0),
]


def _close(a: float, b: float, tol: float = REL_TOL) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b))


def _tensor_rate_key(raw: dict) -> str:
    return "bf16" if "bf16" in raw["tensor_tflops"] else "fp16"


def test_every_expected_card_has_a_table() -> None:
    expected = {key for *_, key in REAL_DEVICES}
    assert expected <= set(RAW), f"missing tables: {sorted(expected - set(RAW))}"


@pytest.mark.parametrize("key", sorted(RAW))
def test_table_loads_with_required_positive_fields(key: str) -> None:
    raw = RAW[key]
    missing = [f for f in REQUIRED if f not in raw]
    assert not missing, f"{key}: missing {missing}"
    for f in REQUIRED_POSITIVE:
        assert isinstance(raw[f], (int, float)) and raw[f] > 0, f"{key}.{f} = {raw[f]!r}"
    assert raw["simt_tflops"].get("fp32", 0) > 0, f"{key}: simt_tflops.fp32 is required"
    for section in ("simt_tflops", "tensor_tflops"):
        for k, v in raw[section].items():
            assert isinstance(v, (int, float)) and v > 0, f"{key}.{section}.{k} = {v!r}"
    assert raw["match"]["sm_count"] == raw["sm_count"], key
    assert raw["compute_capability"] in FP32_LANES_PER_SM, f"{key}: unknown compute capability"
    assert raw["sources"].get("compute") and raw["sources"].get("memory"), f"{key}: cite both sources"
    # The loader agrees (it rejects unknown keys and non-positive figures with a UserError).
    assert key in {t.key for t in load_gpu_tables()}


@pytest.mark.parametrize("key", sorted(RAW))
def test_clocks_and_l2_are_plausible(key: str) -> None:
    raw = RAW[key]
    assert raw["peak_clock_mhz"] <= raw["boost_clock_mhz"], key
    assert raw.get("simt_clock_mhz", raw["peak_clock_mhz"]) <= raw["boost_clock_mhz"], key
    assert 2**20 <= raw["l2_bytes"] <= 256 * 2**20, f"{key}: l2_bytes {raw['l2_bytes']} (bytes, not KiB or MB?)"


@pytest.mark.parametrize("key", sorted(k for k in RAW if "memory_clock_mhz" in RAW[k]))
def test_bandwidth_matches_memory_clock_and_bus(key: str) -> None:
    # Convention: memory_clock_mhz is what NVML reports (nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)).
    # For HBM2/2e/3/3e and for GDDR6/GDDR6X alike NVML reports half the per-pin data rate, so
    # bandwidth = 2 x clock x bus width / 8 holds for every card here (e.g. RTX 4090: 21 Gbps <-> 10501 MHz).
    # B200 carries no clock/bus (not confirmed on a card), so it is not collected here.
    raw = RAW[key]
    derived_gbps = 2 * raw["memory_clock_mhz"] * 1e6 * raw["memory_bus_bits"] / 8 / 1e9
    assert _close(derived_gbps, raw["memory_bandwidth_gbps"]), (
        f"{key}: 2 x {raw['memory_clock_mhz']} MHz x {raw['memory_bus_bits']} bit / 8 = {derived_gbps:.0f} GB/s, "
        f"table says {raw['memory_bandwidth_gbps']}")


@pytest.mark.parametrize("key", sorted(RAW))
def test_fp32_matches_sm_count_lanes_and_clock(key: str) -> None:
    raw = RAW[key]
    clock = raw.get("simt_clock_mhz", raw["peak_clock_mhz"])
    derived = 2 * raw["sm_count"] * FP32_LANES_PER_SM[raw["compute_capability"]] * clock * 1e6 / 1e12
    assert _close(derived, raw["simt_tflops"]["fp32"]), (
        f"{key}: 2 x {raw['sm_count']} SMs x lanes x {clock} MHz = {derived:.1f} TFLOP/s, "
        f"table says {raw['simt_tflops']['fp32']}")


@pytest.mark.parametrize("key", sorted(RAW))
def test_tensor_rate_matches_sm_count_and_clock(key: str) -> None:
    # Catches sparse figures stored as dense (2x) and GeForce fp16-accumulate figures (2x).
    raw = RAW[key]
    rate_key = _tensor_rate_key(raw)
    per_sm = TENSOR_FLOP_PER_CLK_SM[raw["compute_capability"]]
    if "geforce" in raw["name"].lower():
        per_sm *= GEFORCE_FACTOR
    derived = raw["sm_count"] * per_sm * raw["peak_clock_mhz"] * 1e6 / 1e12
    assert _close(derived, raw["tensor_tflops"][rate_key]), (
        f"{key}: {raw['sm_count']} SMs x {per_sm} FLOP/clk x {raw['peak_clock_mhz']} MHz = {derived:.1f}, "
        f"table says {rate_key} {raw['tensor_tflops'][rate_key]}")


@pytest.mark.parametrize("key", sorted(RAW))
def test_tensor_ratios_between_dtypes(key: str) -> None:
    t = RAW[key]["tensor_tflops"]
    if "fp8" in t:
        assert _close(t["fp8"], 2 * t["bf16"], 0.01), f"{key}: fp8 {t['fp8']} != 2 x bf16 {t['bf16']}"
    if "fp16" in t and "bf16" in t:
        # Every card listed runs fp16 and bf16 at the same tensor rate (fp32 accumulation).
        assert t["fp16"] == t["bf16"], f"{key}: fp16 {t['fp16']} != bf16 {t['bf16']}"
    if "tf32" in t:
        # Holds on Ampere, Ada, Hopper and Blackwell, datacenter and GeForce (fp32-accumulate figures).
        assert _close(t["tf32"], t["bf16"] / 2, 0.015), f"{key}: tf32 {t['tf32']} != bf16/2 {t['bf16'] / 2}"
    if "int8" in t and "fp8" in t and "geforce" not in RAW[key]["name"].lower():
        # GeForce halves fp8 with fp32 accumulation but not int8 (int32 accumulation).
        assert _close(t["int8"], t["fp8"], 0.01), f"{key}: int8 {t['int8']} != fp8 {t['fp8']}"


def test_no_table_reuses_another_cards_figures() -> None:
    # Copying one card's numbers into another's table is the most common error seen in the wild.
    # The A100 40 GB SXM4 and PCIe parts are the one pair the datasheet gives identical figures.
    allowed = {frozenset({"a100_sxm_40gb", "a100_pcie_40gb"})}
    seen: dict[tuple, str] = {}
    for key, raw in sorted(RAW.items()):
        fingerprint = (raw["sm_count"], raw["memory_bandwidth_gbps"], raw["peak_clock_mhz"], raw["memory_gib"])
        if fingerprint in seen:
            assert frozenset({key, seen[fingerprint]}) in allowed, f"{key} and {seen[fingerprint]} have identical figures"
        seen[fingerprint] = key


@pytest.mark.parametrize("name,sm_count,mem_gib,expected", REAL_DEVICES)
def test_real_device_names_match_exactly_one_table(name: str, sm_count: int, mem_gib: float, expected: str) -> None:
    tables = load_gpu_tables()
    with_facts = [t.key for t in tables if t.matches(name, sm_count, mem_gib)]
    assert with_facts == [expected], f"{name!r} matched {with_facts}"
    # Names alone must be unambiguous too: SM count is a safety net, not the only discriminator.
    names_only = [t.key for t in tables if t.matches(name, None, None)]
    assert names_only == [expected], f"{name!r} (name only) matched {names_only}"


@pytest.mark.parametrize("name,sm_count,mem_gib", OTHER_DEVICES)
def test_other_cards_match_no_table(name: str, sm_count: int, mem_gib: float) -> None:
    matched = [t.key for t in load_gpu_tables() if t.matches(name, sm_count, mem_gib)]
    assert matched == [], f"{name!r} should match no table, matched {matched}"


def test_peaks_are_in_base_units() -> None:
    h200 = next(t for t in load_gpu_tables() if t.key == "h200").peaks()
    assert h200.memory_bandwidth == pytest.approx(4.8e12)
    assert h200.tensor["bf16"] == pytest.approx(989.4e12)
    assert h200.simt["fp32"] == pytest.approx(66.9e12)
