"""kernels_ext attention on a CUDA GPU: every variant against an fp32 reference, LSE included.

Run on the GPU machine (the wgmma variant needs an sm_90 GPU and is skipped elsewhere):
    python -m pytest -m gpu tests/gpu/test_attention.py -x -q
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import kernels_ext  # noqa: E402
from solbench.torch_ops.attention import attention_reference_lse  # noqa: E402

pytestmark = pytest.mark.gpu

DEV = "cuda"
NORM_TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}   # as specs/ops/attention.yaml
LSE_TOL = 2e-3
IS_SM90 = torch.cuda.get_device_capability() == (9, 0)
# wgmma_persistent (one block per SM looping over query tiles) is new and unmeasured: its tests
# carry its name, so a run can take them separately (-k persistent / -k "not persistent").
PREFILL = ["mma"] + (["wgmma", "wgmma_persistent"] if IS_SM90 else [])


@pytest.fixture(scope="module", autouse=True)
def built_library():
    return kernels_ext.build(progress=print)


def rand_qkv(b, h, hkv, sq, sk, d, dtype, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    mk = lambda *s: torch.randn(*s, device=DEV, generator=g, dtype=torch.float32).to(dtype)  # noqa: E731
    return mk(b, h, sq, d), mk(b, hkv, sk, d), mk(b, hkv, sk, d)


def poison(*shapes_dtypes):
    """Leave NaN in the caching allocator's next blocks of these sizes, so an output element a
    kernel forgets to write shows up as NaN."""
    for shape, dtype in shapes_dtypes:
        t = torch.full(shape, float("nan"), device=DEV, dtype=dtype)
        del t


def check(variant, b, h, hkv, sq, sk, d, causal, dtype, scale=None, seed=0):
    q, k, v = rand_qkv(b, h, hkv, sq, sk, d, dtype, seed)
    poison(((b, h, sq, d), dtype), ((b, h, sq), torch.float32))
    o, lse = kernels_ext.attention_lse(q, k, v, causal, scale, variant)
    ref_o, ref_lse = attention_reference_lse(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
    what = f"{variant} B{b} H{h} KV{hkv} SQ{sq} SK{sk} D{d} causal={causal} {dtype}"
    assert o.shape == q.shape and o.dtype == dtype and lse.shape == (b, h, sq) and lse.dtype == torch.float32
    assert not torch.isnan(o).any(), f"{what}: NaN in o (unwritten or bad math)"
    denom = ref_o.norm().item()
    err = (o.float() - ref_o).norm().item() / (denom if denom > 0 else 1.0)
    assert err <= NORM_TOL[dtype], f"{what}: normwise error {err:.3g} > {NORM_TOL[dtype]}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: lse is -inf on other rows than the reference"
    assert (o[empty] == 0).all(), f"{what}: rows that see no key must be 0"
    if (~empty).any():
        lse_err = (lse[~empty] - ref_lse[~empty]).abs().max().item()
        assert lse_err <= LSE_TOL, f"{what}: lse error {lse_err:.3g}"


SEQ = [1, 17, 1000, 4097]


@pytest.mark.parametrize("variant", PREFILL)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", SEQ)
def test_prefill_square(variant, d, causal, seq):
    check(variant, 1, 4, 4, seq, seq, d, causal, torch.bfloat16, seed=seq)


@pytest.mark.parametrize("variant", PREFILL)
@pytest.mark.parametrize("sq,sk", [(17, 1000), (1000, 17), (1, 4097), (4097, 1000), (100, 1000), (333, 334)])
@pytest.mark.parametrize("causal", [False, True])
def test_prefill_query_and_key_lengths_differ(variant, sq, sk, causal):
    check(variant, 2, 2, 2, sq, sk, 128, causal, torch.bfloat16)


@pytest.mark.parametrize("variant", PREFILL + ["decode"])
@pytest.mark.parametrize("ratio", [1, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention(variant, ratio, causal):
    sq = 16 if variant == "decode" else 300
    check(variant, 2, 8, 8 // ratio, sq, 1000, 128, causal, torch.bfloat16)


@pytest.mark.parametrize("variant", PREFILL + ["decode"])
@pytest.mark.parametrize("d", [64, 128])
def test_float16(variant, d):
    check(variant, 1, 8, 2, 16 if variant == "decode" else 1000, 1000, d, True, torch.float16)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("sq", [1, 2, 7, 16])
@pytest.mark.parametrize("sk", [1, 17, 1000, 4097, 70000])
@pytest.mark.parametrize("causal", [False, True])
def test_decode(d, sq, sk, causal):
    check("decode", 1, 8, 2, sq, sk, d, causal, torch.bfloat16, seed=sq * sk)


@pytest.mark.skipif(not IS_SM90, reason="flash_wgmma needs sm_90")
@pytest.mark.parametrize("b,h,hkv,sq,sk,causal", [(3, 48, 8, 777, 2049, False), (3, 48, 8, 777, 2049, True),
                                                  (2, 40, 8, 1000, 17, True), (1, 96, 96, 300, 300, True)])
def test_wgmma_persistent_blocks_loop_over_many_tiles(b, h, hkv, sq, sk, causal):
    # More query tiles than SMs (7 x 144, 8 x 80, 3 x 96 items): each block takes several, with
    # key-tile counts that differ per tile (causal), that are odd (2049 keys: 17 tiles), or zero
    # (causal SQ > SK: the first 983 queries see nothing), so the K/V ring and the Q hand-over
    # cross items at every stage and parity. The grid launch computes each tile the same way.
    check("wgmma_persistent", b, h, hkv, sq, sk, 128, causal, torch.bfloat16, seed=b * sq)
    q, k, v = rand_qkv(b, h, hkv, sq, sk, 128, torch.bfloat16, seed=1)
    o_grid, lse_grid = kernels_ext.attention_lse(q, k, v, causal, None, "wgmma")
    o_pers, lse_pers = kernels_ext.attention_lse(q, k, v, causal, None, "wgmma_persistent")
    assert ((o_pers.float() - o_grid.float()).norm() / o_grid.float().norm()).item() <= 2e-3
    seen = ~torch.isneginf(lse_grid)
    assert torch.equal(seen, ~torch.isneginf(lse_pers))
    assert (lse_pers[seen] - lse_grid[seen]).abs().max().item() <= 1e-4


@pytest.mark.skipif(not IS_SM90, reason="flash_wgmma needs sm_90")
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("b,h,hkv,sq,sk,dtype", [(1, 34, 34, 512, 3000, torch.bfloat16),
                                                 (2, 17, 1, 1000, 2000, torch.bfloat16),
                                                 (1, 133, 7, 128, 777, torch.bfloat16),
                                                 (3, 45, 45, 129, 1500, torch.float16)])
def test_wgmma_persistent_split_tail(d, b, h, hkv, sq, sk, dtype):
    # Shapes whose last round is partly filled on a GPU of 100-133 SMs, after at least one full round,
    # with items of 4 key tiles or more (prefill_tail_rule.h): 136 items (34 heads x 4 query tiles),
    # 272 (GQA 17, a last query tile of 104 rows), 133 with a partial last key tile (GQA 19), 270
    # with one row in each last query tile (fp16). The pieces' merged rows (o and lse) match the
    # reference; against the launch with every item whole they differ only by bf16 rounding of P
    # (taken at other running maxima): 2.5e-3 normwise on an H100, where a lost piece is O(1).
    check("wgmma_persistent", b, h, hkv, sq, sk, d, False, dtype, seed=h * sq)
    q, k, v = rand_qkv(b, h, hkv, sq, sk, d, dtype, seed=2)
    whole = kernels_ext.flash_attention_wgmma_persistent(q, k, v, tail="whole")
    poison(((b, h, sq, d), dtype))
    split = kernels_ext.flash_attention_wgmma_persistent(q, k, v, tail="split")
    assert not torch.isnan(split).any()
    assert ((split.float() - whole.float()).norm() / whole.float().norm()).item() <= 5e-3


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("h,hkv,sq,sk", [(4, 1, 3, 65536), (16, 4, 12, 5000), (32, 4, 5, 3000), (6, 6, 1, 100)])
def test_decode_partitions(d, h, hkv, sq, sk):
    # Each way decode cuts the work: 12 packed rows (16-row blocks, 4 key groups merged in the
    # block) split 256 ways, the most partials the combine takes (1024 key tiles, one K/V head);
    # 48 and 40 rows (64-row blocks, 2 key groups); one row per K/V head split twice.
    check("decode", 1, h, hkv, sq, sk, d, True, torch.bfloat16, seed=h * sq)


@pytest.mark.parametrize("splits", [1, 3, 9, 16, 17, 64, 256])
@pytest.mark.parametrize("h,hkv,sq,sk", [(8, 1, 1, 16384), (64, 8, 16, 5000), (4, 4, 2, 100)])
def test_decode_with_a_chosen_split(splits, h, hkv, sq, sk):
    # One part, odd counts, 16 (the automatic count for 8 K/V heads), and the most the combine takes
    # (clamped to the key tiles where fewer): the mma.sync rows and, at 128 packed rows on sm_90, the
    # wgmma split kernel.
    q, k, v = rand_qkv(1, h, hkv, sq, sk, 128, torch.bfloat16, seed=splits)
    poison(((1, h, sq, 128), torch.bfloat16))
    got = kernels_ext.attention_decode(q, k, v, splits=splits)
    ref, _ = attention_reference_lse(q.float(), k.float(), v.float(), is_causal=False)
    err = ((got.float() - ref).norm() / ref.norm()).item()
    assert err <= NORM_TOL[torch.bfloat16], f"splits={splits} H{h} KV{hkv} SQ{sq} SK{sk}: normwise error {err:.3g}"


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("b,h,hkv,sq,sk,causal", [(1, 64, 8, 1, 16384, False), (1, 64, 8, 4, 5000, True),
                                                  (1, 64, 8, 3, 2, True), (2, 16, 16, 1, 100, False),
                                                  (3, 24, 8, 2, 4097, True)])
def test_decode_few_splits(d, b, h, hkv, sq, sk, causal):
    # Automatic splits of 16 or fewer per row block (8 K/V heads or more): 8 and 32 packed rows (16- and
    # 32-row blocks), keys for one tile only (one split), rows that see no key (SQ > SK, causal), several
    # batches.
    check("decode", b, h, hkv, sq, sk, d, causal, torch.bfloat16, seed=h * sq + sk)


def test_decode_many_rows_per_kv_head():
    # 16 query heads per K/V head x 16 positions = 256 packed rows: two row blocks per K/V head.
    check("decode", 1, 64, 4, 16, 3000, 128, True, torch.bfloat16)


@pytest.mark.parametrize("variant", PREFILL + ["decode"])
def test_explicit_scale_and_no_keys(variant):
    check(variant, 1, 4, 4, 16, 500, 64, False, torch.bfloat16, scale=0.05)
    q = torch.randn(1, 4, 5, 64, device=DEV, dtype=torch.bfloat16)
    kv = torch.empty(1, 4, 0, 64, device=DEV, dtype=torch.bfloat16)
    o, lse = kernels_ext.attention_lse(q, kv, kv, False, None, variant)
    assert (o == 0).all() and torch.isneginf(lse).all()


def test_attention_picks_a_variant_and_matches_lse_output():
    q, k, v = rand_qkv(2, 8, 2, 300, 600, 128, torch.bfloat16)
    o = kernels_ext.attention(q, k, v, causal=True)
    o2, _ = kernels_ext.attention_lse(q, k, v, True)
    assert torch.equal(o, o2)
    for name in ("flash_attention_mma", "attention_decode") + (("flash_attention_wgmma",) if IS_SM90 else ()):
        qq = q[:, :, :16].contiguous() if name == "attention_decode" else q
        out = getattr(kernels_ext, name)(qq, k, v, causal=True)
        ref = attention_reference_lse(qq.float(), k.float(), v.float(), is_causal=True)[0]
        assert ((out.float() - ref).norm() / ref.norm()).item() <= NORM_TOL[torch.bfloat16], name


def test_bad_inputs_name_the_problem():
    q = torch.randn(1, 4, 8, 64, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="head dim D must be 64 or 128, got 96"):
        kernels_ext.attention(*(torch.randn(1, 4, 8, 96, device=DEV, dtype=torch.bfloat16),) * 3)
    with pytest.raises(ValueError, match="the 3 key/value heads must divide the 4 query heads"):
        kv = torch.randn(1, 3, 8, 64, device=DEV, dtype=torch.bfloat16)
        kernels_ext.flash_attention_mma(q, kv, kv)
    with pytest.raises(TypeError, match="k has dtype float16 but q has bfloat16"):
        kernels_ext.attention(q, q.half(), q)
    with pytest.raises(ValueError, match="q must be contiguous"):
        # the right shape in a [B, S, H, D] layout: only the strides are wrong
        kernels_ext.attention(q.transpose(1, 2).contiguous().transpose(1, 2), q, q)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        kernels_ext.attention(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match="decode needs a query length SQ of 1 to 16"):
        kernels_ext.attention_decode(torch.randn(1, 4, 32, 64, device=DEV, dtype=torch.bfloat16), q, q)
    # The compiled op checks too (the AOT .so loaded elsewhere has no Python wrapper).
    with pytest.raises((RuntimeError, ValueError), match="head dim D must be 64 or 128"):
        torch.ops.solbench_kernels.attention(*(torch.randn(1, 4, 8, 32, device=DEV, dtype=torch.bfloat16),) * 3)


@pytest.mark.skipif(IS_SM90, reason="only below sm_90 does flash_wgmma refuse the device")
def test_wgmma_refuses_older_devices():
    q = torch.randn(1, 2, 8, 64, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="flash_wgmma needs an sm_90 GPU"):
        kernels_ext.flash_attention_wgmma(q, q, q)


@pytest.mark.parametrize("variant", PREFILL)
def test_large_case_against_sdpa(variant):
    """A size the speed targets use, against cuDNN/FlashAttention (a full fp32 reference is slow)."""
    q, k, v = rand_qkv(2, 16, 16, 4096, 4096, 128, torch.bfloat16)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    o, _ = kernels_ext.attention_lse(q, k, v, True, None, variant)
    err = ((o.float() - ref).norm() / ref.norm()).item()
    assert err <= 1e-2, f"{variant}: {err:.3g} from SDPA"


# flash_wgmma's tile configurations (the `config` argument; kernels_ext/csrc/attention/flash_wgmma.h).
# The tests carry "config" in their names: `-k config` takes them alone (session.sh stage asweep).
WGMMA_CONFIGS = {
    64: ["auto", "128x128_s2", "128x176_s2", "128x128_s3", "128x192_s2", "192x128_s2", "192x128_s3"],
    128: ["auto", "128x128_s2", "128x176_s2", "128x128_s3", "128x192_s2"],
}
WGMMA_CONFIG_CASES = [(d, c) for d, names in WGMMA_CONFIGS.items() for c in names if c != "auto"]
WGMMA_OPS = {False: "flash_attention_wgmma", True: "flash_attention_wgmma_persistent"}


def check_config(persistent, config, b, h, hkv, sq, sk, d, causal, dtype=torch.bfloat16, seed=0):
    """o of one named configuration against the fp32 reference (the config ops return no LSE)."""
    q, k, v = rand_qkv(b, h, hkv, sq, sk, d, dtype, seed)
    poison(((b, h, sq, d), dtype))
    o = getattr(kernels_ext, WGMMA_OPS[persistent])(q, k, v, causal=causal, config=config)
    ref_o, ref_lse = attention_reference_lse(q.float(), k.float(), v.float(), is_causal=causal)
    what = f"{WGMMA_OPS[persistent]} config={config} B{b} H{h} KV{hkv} SQ{sq} SK{sk} D{d} causal={causal} {dtype}"
    assert o.shape == q.shape and o.dtype == dtype
    assert not torch.isnan(o).any(), f"{what}: NaN in o (unwritten or bad math)"
    denom = ref_o.norm().item()
    err = (o.float() - ref_o).norm().item() / (denom if denom > 0 else 1.0)
    assert err <= NORM_TOL[dtype], f"{what}: normwise error {err:.3g} > {NORM_TOL[dtype]}"
    assert (o[torch.isneginf(ref_lse)] == 0).all(), f"{what}: rows that see no key must be 0"


@pytest.mark.skipif(not IS_SM90, reason="flash_wgmma needs sm_90")
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("d,config", WGMMA_CONFIG_CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("ratio", [1, 4])
def test_wgmma_config_odd_lengths(persistent, d, config, causal, ratio):
    # Square lengths that leave every kind of tail (one row, part of a 16-row group, part of a
    # key tile of 128, 176 or 192, one key past a tile), then causal with SQ != SK both ways
    # (queries that see no key; a chunk against a longer cache); grouped-query heads.
    for seq in SEQ:
        check_config(persistent, config, 1, 4, 4 // ratio, seq, seq, d, causal, seed=seq)
    for sq, sk in ((17, 1000), (1000, 17), (4097, 1000), (333, 334)):
        check_config(persistent, config, 2, 4, 4 // ratio, sq, sk, d, causal, seed=sq + sk)


@pytest.mark.skipif(not IS_SM90, reason="flash_wgmma needs sm_90")
@pytest.mark.parametrize("d,config", WGMMA_CONFIG_CASES)
@pytest.mark.parametrize("b,h,hkv,sq,sk,causal", [(3, 48, 8, 777, 2049, False), (3, 48, 8, 777, 2049, True),
                                                  (2, 40, 8, 1000, 17, True)])
def test_wgmma_config_persistent_blocks_loop_over_many_tiles(d, config, b, h, hkv, sq, sk, causal):
    # Several items per persistent block (5-8 query tiles x 80-144 heads against 132 SMs), so the
    # K/V ring and the Q hand-over (two Q buffers, or one where a third buffer does not fit: D = 128
    # with 176- or 192-key tiles or three stages) cross items at every stage and parity; key tiles
    # differ per item (causal), are odd in number, or are none (SQ > SK). The grid launch agrees.
    check_config(True, config, b, h, hkv, sq, sk, d, causal, seed=b * sq)
    q, k, v = rand_qkv(b, h, hkv, sq, sk, d, torch.bfloat16, seed=1)
    o_grid = kernels_ext.flash_attention_wgmma(q, k, v, causal=causal, config=config)
    o_pers = kernels_ext.flash_attention_wgmma_persistent(q, k, v, causal=causal, config=config)
    assert ((o_pers.float() - o_grid.float()).norm() / o_grid.float().norm()).item() <= 2e-3


@pytest.mark.skipif(not IS_SM90, reason="flash_wgmma needs sm_90")
@pytest.mark.parametrize("d,config", WGMMA_CONFIG_CASES)
def test_wgmma_config_float16_and_explicit_scale(d, config):
    q, k, v = rand_qkv(1, 8, 2, 1000, 1000, d, torch.float16)
    for persistent in (False, True):
        o = getattr(kernels_ext, WGMMA_OPS[persistent])(q, k, v, causal=True, scale=0.05, config=config)
        ref = attention_reference_lse(q.float(), k.float(), v.float(), is_causal=True, scale=0.05)[0]
        err = ((o.float() - ref).norm() / ref.norm()).item()
        assert err <= NORM_TOL[torch.float16], f"{config} D{d} persistent={persistent}: {err:.3g}"


def test_wgmma_config_names_and_the_head_dims_they_apply_to():
    # The table's choices are the launcher's names in its enum's order (the binding looks them up).
    from pathlib import Path

    from kernels_ext import optable
    text = (Path(__file__).resolve().parents[2] / "kernels_ext" / "csrc" / "attention" / "flash_wgmma.cu").read_text()
    names = [line.split('"')[1] for line in text.splitlines() if 'return "' in line and "FlashWgmmaConfig::" in line]
    for op in WGMMA_OPS.values():
        entry = next(o for o in optable.load_table() if o.name == op)
        config = next(a for a in entry.scalars if a.name == "config")
        assert tuple(names) == tuple(config.choices), (op, names, config.choices)
    assert set(WGMMA_CONFIGS[64]) == set(names)


@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
def test_wgmma_config_that_does_not_apply_to_the_head_dim_is_refused(persistent):
    op = WGMMA_OPS[persistent]
    q = torch.randn(1, 2, 8, 128, device=DEV, dtype=torch.bfloat16)
    for config in ("192x128_s2", "192x128_s3"):
        with pytest.raises(ValueError, match=rf"solbench_kernels::{op}: config '{config}' does not apply to head "
                                             r"dim D = 128 \(D = 128 takes auto, 128x128_s2, 128x176_s2, 128x128_s3, "
                                             r"128x192_s2\)"):
            getattr(kernels_ext, op)(q, q, q, config=config)
    with pytest.raises(ValueError, match=f"kernels_ext.{op}: config must be one of 'auto', "):
        getattr(kernels_ext, op)(q, q, q, config="256x128_s2")
