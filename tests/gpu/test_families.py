"""Issue 15's kernel families on a CUDA GPU, through kernels_ext: odd sizes, bad input, exactness.

Run on the GPU machine:
    python -m pytest -m gpu tests/gpu/test_families.py -q
Every output is checked against a float64 reference, bit for bit where the op is exact (transpose,
embedding, fp8 casts, histogram counts) and index for index against torchvision.ops.nms.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import kernels_ext  # noqa: E402
from solbench.torch_ops import histogram as Hs  # noqa: E402
from solbench.torch_ops import loss as L  # noqa: E402
from solbench.torch_ops import nms as Nm  # noqa: E402
from solbench.torch_ops import quant as Q  # noqa: E402
from solbench.torch_ops import rope as R  # noqa: E402

pytestmark = pytest.mark.gpu

DEV = "cuda"
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
UNIT = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


@pytest.fixture(scope="module", autouse=True)
def built_library():
    return kernels_ext.build(progress=print)


def g(seed: int = 0) -> torch.Generator:
    return torch.Generator(device=DEV).manual_seed(seed)


def rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    x = torch.randn(*shape, device=DEV, generator=g(seed)) * scale
    return torch.where(x.abs() < 1e-2 * scale, torch.full_like(x, 1e-2 * scale), x).to(dtype)


def poison_next(shape, dtype):
    """Leave NaN (or 0xff bytes) in the caching allocator's next block of this size, so an output element
    a kernel forgets to write shows."""
    t = torch.empty(shape, device=DEV, dtype=dtype)
    (t.fill_(float("nan")) if t.is_floating_point() and t.element_size() > 1 else t.view(torch.uint8).fill_(255))
    del t


def assert_within(out, ref, atol, rtol, what=""):
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o = out.double()
    assert torch.isfinite(o).all(), f"{what}: non-finite outputs (unwritten?)"
    excess = (o - ref).abs() - (atol + rtol * ref.abs())
    assert float(excess.max()) <= 0, f"{what}: {int((excess > 0).sum())} elements outside the bound"


def assert_same_bits(out, ref, what=""):
    assert out.shape == ref.shape and out.dtype == ref.dtype, f"{what}: {out.shape} {out.dtype} vs {ref.dtype}"
    o, r = out.contiguous().view(-1).view(torch.uint8), ref.contiguous().view(-1).view(torch.uint8)
    bad = int((o != r).sum())
    assert bad == 0, f"{what}: {bad} of {r.numel()} bytes differ"


# ----------------------------------------------------------------------------- rope
ROPE_SHAPES = [(1, 1, 1, 2), (5, 3, 1, 6), (64, 4, 2, 72), (1031, 7, 3, 80), (300, 8, 8, 128)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("shape", ROPE_SHAPES, ids=str)
def test_rope_against_float64(dtype, neox, shape):
    T, H, KH, D = shape
    u = UNIT[dtype]
    q, k = rand(T, H, D, dtype=dtype, seed=1), rand(T, KH, D, dtype=dtype, seed=2)
    cs = R.cos_sin_cache((T, D), dtype, g(3), DEV)
    ref = R.rope_reference(q.double(), k.double(), cs.double(), neox)
    poison_next(q.shape, dtype)
    out = kernels_ext.rope(q, k, cs, neox)
    for o, r, name in zip(out, ref, "qk"):
        # fp32 math, one rounding: within an output rounding plus fp32 noise of the pair's length
        assert_within(o, r, atol=8 * 2.0 ** -24, rtol=1.01 * u, what=name)
    qi, ki = q.clone(), k.clone()
    assert kernels_ext.rope_inplace(qi, ki, cs, neox) is None
    assert torch.equal(qi, out[0]) and torch.equal(ki, out[1])


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_rope_in_place_on_slices_of_a_fused_projection(neox):
    T, H, KH, D = 257, 8, 2, 128
    qkv = rand(T, H + 2 * KH, D, dtype=torch.bfloat16, seed=4)
    cs = R.cos_sin_cache((T, D), torch.bfloat16, g(5), DEV)
    v = qkv[:, H + KH:].clone()
    q, k = qkv[:, :H], qkv[:, H:H + KH]
    ref = R.rope_reference(q.double(), k.double(), cs.double(), neox)
    kernels_ext.rope_inplace(q, k, cs, neox)
    assert_within(q, ref[0], 8 * 2.0 ** -24, 1.01 * 2.0 ** -8, "q")
    assert_within(k, ref[1], 8 * 2.0 ** -24, 1.01 * 2.0 ** -8, "k")
    assert torch.equal(qkv[:, H + KH:], v), "v must stay untouched"
    out = kernels_ext.rope(qkv[:, :H], qkv[:, H:H + KH], cs, neox)     # strided inputs, fresh outputs
    assert out[0].is_contiguous()


def test_rope_rejects_bad_input():
    q, k, cs = rand(4, 2, 8), rand(4, 1, 8), rand(4, 8)
    with pytest.raises(ValueError, match="even"):
        kernels_ext.rope(rand(4, 2, 7), rand(4, 1, 7), rand(4, 7))
    with pytest.raises(TypeError, match="dtype"):
        kernels_ext.rope(q, k.bfloat16(), cs)
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        kernels_ext.rope(rand(4, 8, 2).transpose(1, 2), k, cs)
    with pytest.raises(RuntimeError, match="single memory location"):
        kernels_ext.rope_inplace(rand(4, 1, 8).expand(4, 2, 8), k, cs)


# ----------------------------------------------------------------------------- transpose
TRANSPOSE_VARIANTS = ["smem", "smem_w16", "smem_w32", "smem_w64", "regs", "ldsm", "ldsm_32x64", "ldsm_64x32", "ldsm_64x64",
                      "ldsm_64x32_flat", "ldsm_el", "ldsm_64x32_el", "ldsm_64x32_flat_el", "auto"]


@pytest.mark.parametrize("variant", TRANSPOSE_VARIANTS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (33, 1), (63, 65), (4095, 4097), (1024, 1024), (3, 129, 1000),
                                   (2, 3, 64, 96), (5, 1, 1), (8, 8), (72, 40), (4, 136, 264), (200, 4096),
                                   (7, 129, 1000), (9, 33, 65), (3, 1, 77), (2, 2, 65, 63)],
                         ids=str)
def test_transpose_is_exact(dtype, shape, variant):
    """regs runs where every dim and stride is whole 16-byte packs (8 x 8, 72 x 40, 136 x 264, ...:
    whole and partial tiles) and falls back to smem elsewhere."""
    x = rand(*shape, dtype=dtype, seed=6)
    poison_next((*shape[:-2], shape[-1], shape[-2]), dtype)
    assert torch.equal(kernels_ext.transpose(x, variant), x.transpose(-2, -1).contiguous())


@pytest.mark.parametrize("variant", TRANSPOSE_VARIANTS)
def test_transpose_of_strided_and_misaligned_views(variant):
    big = rand(300, 1032, dtype=torch.bfloat16, seed=7)
    batched = rand(3, 64, 80, dtype=torch.float32, seed=8)
    odd = rand(5, 33, 72, dtype=torch.bfloat16, seed=10)   # 16-bit views the word path cannot take
    for view in (big[:, 3:1003], big[:, :512], big[:, 8:520], big[1:, 1:].t(), batched[:, :, 8:72],
                 batched[::2], odd[:, :, 1:], odd[::2, 1:, :71]):
        assert torch.equal(kernels_ext.transpose(view, variant), view.transpose(-2, -1).contiguous())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(32, 32), (64, 96), (96, 64), (5, 32, 64), (3, 256, 256), (1024, 2048), (2048, 32),
                                   (2, 2, 128, 160)], ids=str)
@pytest.mark.parametrize("variant", ["smem_w16", "smem", "auto"])
def test_transpose_small_tile_is_exact(dtype, shape, variant):
    """smem_w16's 32 x 32 tile (16-bit, both dims multiples of 32; fp32 falls back), also smem's and
    auto's pick for these one-wave grids, on whole matrices and on views: every other matrix of a
    batch, rows longer than the view, and views starting mid-word or with odd rows, which the word
    path (and so the small tile) does not take."""
    x = rand(*shape, dtype=dtype, seed=15)
    poison_next((*shape[:-2], shape[-1], shape[-2]), dtype)
    assert torch.equal(kernels_ext.transpose(x, variant), x.transpose(-2, -1).contiguous())
    wide = rand(4, 64, 160, dtype=dtype, seed=16)
    for view in (wide[::2], wide[:, :, 32:96], wide[:, 32:, 64:160], wide[:, :, 1:65], wide[:, 1:, :64],
                 wide[1:3, :32, :32]):
        assert torch.equal(kernels_ext.transpose(view, variant), view.transpose(-2, -1).contiguous())
    for band in (2, 1 << 20):  # tile orders other than rows: the 64-column tiles
        assert torch.equal(kernels_ext.transpose(x, variant, band), x.transpose(-2, -1).contiguous())


@pytest.mark.parametrize("variant", TRANSPOSE_VARIANTS)
@pytest.mark.parametrize("band", [1, 2, 3, 8, 32, 1000])
@pytest.mark.parametrize("shape", [(4095, 4097), (3, 129, 1000), (2, 200, 4096), (520, 64), (64, 520)], ids=str)
def test_transpose_is_exact_in_every_tile_order(shape, band, variant):
    """Bands taller than the matrix, shorter last bands, one column of tiles, and batches."""
    x = rand(*shape, dtype=torch.bfloat16, seed=9)
    assert torch.equal(kernels_ext.transpose(x, variant, band), x.transpose(-2, -1).contiguous())


@pytest.mark.parametrize("shape", [(8191, 4097), (64, 33, 1023), (16, 100, 4097), (32, 511, 1023), (1, 3000, 5001)],
                         ids=str)
def test_transpose_auto_rule_branches_are_exact(shape):
    """Each branch of csrc/transpose/odd16_rule.h on a shape that takes it: smem in column order from
    2^25 elements, the flattened batch, ldsm in column order; and a batch view that cannot be
    flattened (every other matrix) beside the one that can."""
    x = rand(*shape, dtype=torch.bfloat16, seed=13)
    assert torch.equal(kernels_ext.transpose(x, "auto"), x.transpose(-2, -1).contiguous())
    if len(shape) == 3:
        strided = x[::2]
        assert torch.equal(kernels_ext.transpose(strided, "auto"), strided.transpose(-2, -1).contiguous())
        assert torch.equal(kernels_ext.transpose(strided, "ldsm_64x32_flat"), strided.transpose(-2, -1).contiguous())


def test_transpose_ldsm_offsets_beyond_32_bits():
    """Rows 2^30 + 3 elements apart (a 4 GiB storage): the ldsm kernel's 32-bit offsets do not fit,
    so it takes 64-bit ones; compared bit for bit (the storage outside the view is never read)."""
    stride = 2**30 + 3
    base = torch.empty(2 * stride + 1001, dtype=torch.bfloat16, device=DEV)
    x = base.as_strided((3, 1001), (stride, 1))
    x.copy_(rand(3, 1001, dtype=torch.bfloat16, seed=14))
    want = x.transpose(-2, -1).contiguous().view(torch.int16)
    for variant in ("auto", "ldsm", "ldsm_64x32", "ldsm_64x32_flat", "ldsm_64x64", "ldsm_64x32_el"):
        for band in (0, 1, 1 << 20):
            assert torch.equal(kernels_ext.transpose(x, variant, band).view(torch.int16), want), (variant, band)


# ----------------------------------------------------------------------------- cross-entropy
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
# 20000 and 9000 rows: one row per block, and the finishing block's steps of 8 x 1024 rows, the last one partial;
# 8 and 64 rows: rows split into chunks.
@pytest.mark.parametrize("n, v", [(1, 1), (3, 7), (1000, 4096), (129, 50257), (8, 262144), (64, 262147), (20000, 64),
                                  (9000, 300)], ids=str)
def test_cross_entropy_against_float64(dtype, n, v):
    logits = rand(n, v, dtype=dtype, seed=8, scale=2.0)
    full = torch.randint(0, v, (n,), device=DEV, generator=g(9))
    ignored = torch.where(torch.rand(n, device=DEV, generator=g(10)) < 0.2, torch.full_like(full, -100), full)
    ignored[0] = full[0]                       # at least one row counts
    tol = dict(atol=1e-5, rtol=2e-5)           # fp32 math whatever the dtype of the logits
    ref_rows = L.cross_entropy_reference(logits.double(), full, reduction="none")
    out = kernels_ext.cross_entropy_rows(logits, full)
    assert out.dtype == torch.float32
    assert_within(out, ref_rows, what="rows", **tol)
    assert_within(kernels_ext.cross_entropy_rows(logits, ignored),
                  L.cross_entropy_reference(logits.double(), ignored, reduction="none"), what="rows, ignored", **tol)
    for red in ("mean", "sum"):
        assert_within(kernels_ext.cross_entropy(logits, ignored, -100, red),
                      L.cross_entropy_reference(logits.double(), ignored, reduction=red), what=red, **tol)


def test_cross_entropy_edge_cases():
    logits = rand(6, 300, seed=11)
    tgt = torch.randint(0, 300, (6,), device=DEV, generator=g(12))
    tgt[2] = 300                                # out of range: NaN, never a read out of bounds
    rows = kernels_ext.cross_entropy_rows(logits, tgt)
    assert bool(rows[2].isnan()) and bool(rows[torch.arange(6, device=DEV) != 2].isfinite().all())
    assert bool(kernels_ext.cross_entropy(logits, tgt).isnan())
    assert bool(kernels_ext.cross_entropy(logits, torch.full_like(tgt, -100)).isnan())   # like PyTorch
    custom = torch.where(tgt == 300, torch.full_like(tgt, 5), tgt)
    ref = F.cross_entropy(logits.double(), custom, ignore_index=int(custom[0]))
    assert float(kernels_ext.cross_entropy(logits, custom, int(custom[0]))) == pytest.approx(float(ref), rel=2e-5)
    empty = kernels_ext.cross_entropy(rand(0, 10), torch.zeros(0, dtype=torch.int64, device=DEV))
    assert bool(empty.isnan())
    with pytest.raises(TypeError, match="int64"):
        kernels_ext.cross_entropy(logits, tgt.int())
    with pytest.raises(ValueError, match="reduction"):
        kernels_ext.cross_entropy(logits, tgt, -100, "none")


def ce_inputs(n, v, dtype=torch.float32, seed=0, ignored=0.2):
    """Logits and targets with about `ignored` of the rows ignored (-100); row 0 always counts."""
    logits = rand(n, v, dtype=dtype, seed=seed, scale=2.0)
    tgt = torch.randint(0, v, (n,), device=DEV, generator=g(seed + 1))
    tgt = torch.where(torch.rand(n, device=DEV, generator=g(seed + 2)) < ignored, torch.full_like(tgt, -100), tgt)
    tgt[0] = v // 2
    return logits, tgt


def exact_totals(logits, tgt):
    """(sum, mean) of the kernel's own row losses over the counted rows, each rounded once from the
    exact sum (math.fsum) to fp32. The finishing block sums in double, so it may differ by an ulp."""
    rows = kernels_ext.cross_entropy_rows(logits, tgt)
    counted = tgt != -100
    exact = math.fsum(rows[counted].double().tolist())
    count = int(counted.sum())
    total = torch.tensor([exact, exact / count if count else math.nan], dtype=torch.float64, device=DEV).float()
    return total[0], total[1]


# One row per block (V = 300) and, below two waves of rows (~2k on an H200), rows split into chunks
# (V = 65536; 2111 x 4096 splits fp32 rows in two); odd counts leave the last chunks and waves partial.
CE_ROW_COUNTS = [(1, 300), (7, 300), (33, 300), (1000, 300), (9000, 300), (20000, 300),
                 (1, 65536), (7, 65536), (33, 65536), (1000, 65536), (2111, 4096)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n, v", CE_ROW_COUNTS, ids=str)
def test_cross_entropy_mean_and_sum_are_the_sum_of_the_row_losses(n, v, dtype):
    """The reduction over rows is the sum of the fp32 row losses within an ulp of it exactly rounded, the
    same bits every call, within fp32 noise of the float64 reference."""
    logits, tgt = ce_inputs(n, v, dtype, seed=50)
    want = dict(zip(("sum", "mean"), exact_totals(logits, tgt)))
    for red in ("sum", "mean"):
        out = kernels_ext.cross_entropy(logits, tgt, -100, red)
        assert out.shape == () and out.dtype == torch.float32
        assert_within_ulp(out, want[red], what=f"{red} against fsum of the rows")
        assert_same_bits(kernels_ext.cross_entropy(logits, tgt, -100, red), out, what=f"{red}, second call")
        assert_within(out, L.cross_entropy_reference(logits.double(), tgt, reduction=red), atol=1e-5, rtol=2e-5,
                      what=red)


@pytest.mark.parametrize("n, v", [(1, 300), (33, 300), (9000, 300), (7, 65536)], ids=str)
def test_cross_entropy_with_every_row_ignored_matches_pytorch(n, v):
    """The mean of no rows is NaN and their sum 0, as F.cross_entropy gives; the next call counts afresh."""
    logits = rand(n, v, seed=51)
    tgt = torch.full((n,), -100, device=DEV, dtype=torch.int64)
    assert bool(kernels_ext.cross_entropy(logits, tgt).isnan()) and bool(F.cross_entropy(logits, tgt).isnan())
    total = kernels_ext.cross_entropy(logits, tgt, -100, "sum")
    assert float(total) == float(F.cross_entropy(logits, tgt, reduction="sum")) == 0.0
    tgt[n // 2] = 5
    ref = F.cross_entropy(logits.double(), tgt)
    assert float(kernels_ext.cross_entropy(logits, tgt)) == pytest.approx(float(ref), rel=2e-5)


@pytest.mark.parametrize("v", [300, 65536], ids=str)
def test_cross_entropy_reductions_propagate_nan_and_inf_like_pytorch(v):
    logits, tgt = ce_inputs(40, v, seed=52)
    tgt[3], tgt[5], tgt[6] = -100, 11, 12
    logits[3, 7] = math.nan                     # in an ignored row: counts for nothing
    for red in ("mean", "sum"):
        ref = F.cross_entropy(logits.double(), tgt, reduction=red)
        assert float(kernels_ext.cross_entropy(logits, tgt, -100, red)) == pytest.approx(float(ref), rel=2e-5), red
    inf = logits.clone()
    inf[6, tgt[6]] = -math.inf                  # that row's loss is +inf
    for red in ("mean", "sum"):
        assert float(kernels_ext.cross_entropy(inf, tgt, -100, red)) == math.inf == float(
            F.cross_entropy(inf, tgt, reduction=red)), red
    inf[5, 9] = math.nan                        # a counted row's NaN wins over the +inf
    for red in ("mean", "sum"):
        assert bool(kernels_ext.cross_entropy(inf, tgt, -100, red).isnan()), red
        assert bool(F.cross_entropy(inf, tgt, reduction=red).isnan()), red


def ce_totals(logits, tgt):
    """(sum, mean) from one synchronised call each: what every later call must give, bit for bit."""
    out = (kernels_ext.cross_entropy(logits, tgt, -100, "sum"), kernels_ext.cross_entropy(logits, tgt, -100, "mean"))
    torch.cuda.synchronize()
    return out


def assert_within_ulp(out, want, what=""):
    """|out - want| at most one fp32 ulp of want (both fp32 scalars)."""
    ulp = (torch.nextafter(want.abs(), torch.tensor(math.inf, device=want.device)) - want.abs()).double()
    assert float((out.double() - want.double()).abs()) <= float(ulp), f"{what}: {float(out)!r} vs {float(want)!r}"


def test_cross_entropy_back_to_back_calls_agree():
    """Calls of every shape and reduction straight after each other, none synchronised (7 and 1 rows
    straight after 20000, split rows after whole ones), each the same bits as its first call."""
    shapes = [(20000, 300), (7, 300), (1000, 65536), (1, 300), (33, 65536), (9000, 300), (1, 65536)]
    inputs = [ce_inputs(n, v, seed=60 + i) for i, (n, v) in enumerate(shapes)]
    want = [ce_totals(x, t) for x, t in inputs]
    rows = [kernels_ext.cross_entropy_rows(x, t) for x, t in inputs]
    got = []
    for rep in range(4):
        order = range(len(inputs)) if rep % 2 == 0 else reversed(range(len(inputs)))
        for i in order:
            x, t = inputs[i]
            got.append((i, "sum", kernels_ext.cross_entropy(x, t, -100, "sum")))
            got.append((i, "rows", kernels_ext.cross_entropy_rows(x, t)))
            got.append((i, "mean", kernels_ext.cross_entropy(x, t, -100, "mean")))
    torch.cuda.synchronize()
    for i, red, out in got:
        ref = rows[i] if red == "rows" else want[i][0 if red == "sum" else 1]
        assert_same_bits(out, ref, what=f"{shapes[i]} {red}")


def test_cross_entropy_on_concurrent_streams():
    """Calls on two streams that run at once each use their own workspace: each gives its first call's bits."""
    a, b = ce_inputs(9000, 300, seed=70), ce_inputs(33, 65536, seed=71)
    want_a, want_b = ce_totals(*a)[1], ce_totals(*b)[0]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    outs = []
    for _ in range(30):
        with torch.cuda.stream(streams[0]):
            outs.append((kernels_ext.cross_entropy(*a), want_a))
        with torch.cuda.stream(streams[1]):
            outs.append((kernels_ext.cross_entropy(*b, -100, "sum"), want_b))
    torch.cuda.synchronize()
    for k, (out, want) in enumerate(outs):
        assert_same_bits(out, want, what=f"call {k}")


def test_cross_entropy_in_a_cuda_graph():
    """Captured calls (the finishing kernel a programmatic dependent inside the graph): replays and eager
    calls between them give the eager calls' bits."""
    a, b = ce_inputs(9000, 300, torch.bfloat16, seed=72), ce_inputs(7, 65536, torch.bfloat16, seed=73)
    mean_a, sum_b = ce_totals(*a)[1], ce_totals(*b)[0]
    rows_b = kernels_ext.cross_entropy_rows(*b)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):               # warm up on a side stream, as a capture needs
        kernels_ext.cross_entropy(*a)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [kernels_ext.cross_entropy(*a), kernels_ext.cross_entropy(*b, -100, "sum"),
                kernels_ext.cross_entropy_rows(*b), kernels_ext.cross_entropy(*a)]
    wants = [mean_a, sum_b, rows_b, mean_a]
    for rep in range(3):
        for out in outs:
            out.fill_(0.0)
        graph.replay()
        eager = kernels_ext.cross_entropy(*a)
        torch.cuda.synchronize()
        for k, (out, want) in enumerate(zip(outs, wants)):
            assert_same_bits(out, want, what=f"replay {rep}, output {k}")
        assert_same_bits(eager, mean_a, what=f"eager call after replay {rep}")


# ----------------------------------------------------------------------------- embedding
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("vocab, dim, idx_shape", [(1, 1, (5,)), (1000, 1000, (4095,)), (32000, 4096, (2, 33)),
                                                   (50257, 768, (7, 3, 5))], ids=str)
def test_embedding_is_exact(dtype, vocab, dim, idx_shape):
    table = rand(vocab, dim, dtype=dtype, seed=13)
    idx = torch.randint(0, vocab, idx_shape, device=DEV, generator=g(14))
    for check, order in ((True, "after"), (True, "before"), (False, "after")):
        poison_next((*idx_shape, dim), dtype)
        assert torch.equal(kernels_ext.embedding(table, idx, check, order), F.embedding(idx, table))
    strided = rand(vocab, dim + 8, dtype=dtype, seed=15)[:, 8:]
    assert torch.equal(kernels_ext.embedding(strided, idx), F.embedding(idx, strided))
    for units in (1, 2, 4):   # the automatic pick takes 2 or 4; every count at every size
        poison_next((*idx_shape, dim), dtype)
        assert torch.equal(kernels_ext.embedding(table, idx, False, "after", units), F.embedding(idx, table))


def test_embedding_units_keep_bad_rows_nan():
    table = rand(100, 64, seed=20)
    idx = torch.randint(0, 100, (300,), device=DEV, generator=g(21))
    idx[[0, 150, 299]] = torch.tensor([-5, 100, 1 << 40], device=DEV)
    bad = (idx < 0) | (idx >= 100)
    for units in (1, 2, 4):
        out = kernels_ext.embedding(table, idx, False, "after", units)
        assert bool(out[bad].isnan().all()) and torch.equal(out[~bad], F.embedding(idx[~bad], table))
    torch.cuda.synchronize()


@pytest.mark.parametrize("order", ["after", "before"])
def test_embedding_bad_indices_raise_and_never_read_out_of_bounds(order):
    table = rand(100, 64, seed=16)
    idx = torch.randint(0, 100, (4, 10), device=DEV, generator=g(17))
    idx[1, 3], idx[3, 9] = -1, 100
    with pytest.raises(IndexError, match=r"2 of 40 indices are out of range .* indices.flatten\(\)\[39\] = 100"):
        kernels_ext.embedding(table, idx, check_order=order)
    out = kernels_ext.embedding(table, idx, check=False)
    bad = (idx < 0) | (idx >= 100)
    assert bool(out[bad].isnan().all()) and torch.equal(out[~bad], F.embedding(idx[~bad], table))
    torch.cuda.synchronize()   # the context is healthy: nothing read out of bounds
    with pytest.raises(TypeError, match="int64"):
        kernels_ext.embedding(table, idx.int())


@pytest.mark.parametrize("n, bad", [(1, [0]), (1023, [1022]), (4096, [5, 4095]), (300_000, [0, 123_457, 299_999]),
                                    (5_000_000, [4_999_999])], ids=str)
def test_embedding_index_pass_counts_every_block(n, bad):
    """check_order "before" over one block, a few, and the most blocks the pass launches (two per SM):
    the count and the position named come from the per-block partials the host adds up."""
    table = rand(10, 8, seed=18)
    idx = torch.randint(0, 10, (n,), device=DEV, generator=g(19))
    idx[bad] = torch.tensor([10 + i for i in range(len(bad))], device=DEV)
    named = rf"{len(bad)} of {n} indices .* indices.flatten\(\)\[{bad[-1]}\] = {9 + len(bad)}"
    with pytest.raises(IndexError, match=named):
        kernels_ext.embedding(table, idx, check_order="before")
    idx[bad] = 0
    assert torch.equal(kernels_ext.embedding(table, idx, check_order="before"), F.embedding(idx, table))


# ----------------------------------------------------------------------------- fp8
QUANT_SHAPES = [(1, 1), (7, 3), (1000, 999), (4096, 1024), (3, 70001)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", QUANT_SHAPES, ids=str)
def test_fp8_quant_is_bit_exact_with_torch(dtype, shape):
    x = rand(*shape, dtype=dtype, seed=18)
    scale = Q.quant_scale((), torch.float32, g(19), DEV)
    poison_next(shape, torch.float8_e4m3fn)
    assert_same_bits(kernels_ext.fp8_quant(x, scale), Q.fp8_quant(x, scale), "static")
    for o, r, what in zip(kernels_ext.fp8_quant_dynamic(x), Q.fp8_quant_dynamic(x), ("q", "scale")):
        assert_same_bits(o, r, f"dynamic {what}")
    for o, r, what in zip(kernels_ext.fp8_quant_rows(x), Q.fp8_quant_rows(x), ("q", "scales")):
        assert_same_bits(o, r, f"rows {what}")


def test_fp8_quant_misaligned_and_special_values():
    flat = rand(1 + 4096 * 33, dtype=torch.bfloat16, seed=20)[1:].view(4096, 33)     # 2 bytes off
    scale = Q.quant_scale((), torch.float32, g(21), DEV)
    assert_same_bits(kernels_ext.fp8_quant(flat, scale), Q.fp8_quant(flat, scale))
    specials = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 447.9, 448.0, 464.0, 1e6, -1e6, float("inf"),
                             -float("inf"), float("nan")], device=DEV).bfloat16()
    one = torch.ones((), device=DEV)
    assert_same_bits(kernels_ext.fp8_quant(specials, one), Q.fp8_quant(specials, one), "specials")
    zeros = torch.zeros(16, 16, device=DEV, dtype=torch.bfloat16)
    for o, r in zip(kernels_ext.fp8_quant_dynamic(zeros), Q.fp8_quant_dynamic(zeros)):
        assert_same_bits(o, r, "all zeros: amax clamped to 1e-12")


def _every_16_bit_pattern(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(-32768, 32768, device=DEV, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_fp8_quant_fast_division_is_exact_for_every_input(dtype):
    """The quantisers divide by Markstein's correction (quant/fp8_division.cuh) where it can vouch
    for the byte, by IEEE division elsewhere: every 16-bit pattern (NaN, inf, zeros, subnormals)
    and 2^20 random fp32 patterns, scales in and out of the fast range, and per-row / dynamic scales
    (rows holding inf or NaN take the exact path), each bit for bit against PyTorch."""
    if dtype == torch.float32:
        x = torch.randint(-2**31, 2**31 - 1, (1 << 20,), device=DEV, generator=g(41), dtype=torch.int32).view(dtype)
    else:
        x = _every_16_bit_pattern(dtype)
    for s in (0.002, 0.0113, 1 / 448, 1.0, 3.0, 1e-12 / 448, 2.0 ** -60, 2.0 ** 61, 1e-40, 0.0):
        scale = torch.tensor(s, device=DEV, dtype=torch.float32)
        assert_same_bits(kernels_ext.fp8_quant(x, scale), Q.fp8_quant(x, scale), f"static, scale {s}")
    finite = x[torch.isfinite(x.float())]
    moderate = finite[finite.float().abs() < 1e4]   # amax / 448 is a fast scale
    for t in (x, finite, moderate):
        for o, r, what in zip(kernels_ext.fp8_quant_dynamic(t), Q.fp8_quant_dynamic(t), ("q", "scale")):
            assert_same_bits(o, r, f"dynamic {what}")
    # Rows of 256 consecutive patterns: each spans a few binades, so their scales run from the
    # clamped 1e-12 / 448 through the fast range to beyond it (and inf / NaN rows in x itself).
    for t in (x.view(-1, 256), finite[:finite.numel() // 256 * 256].view(-1, 256),
              moderate[:moderate.numel() // 64 * 64].view(-1, 64)):
        for o, r, what in zip(kernels_ext.fp8_quant_rows(t), Q.fp8_quant_rows(t), ("q", "scales")):
            assert_same_bits(o, r, f"rows {what}")


@pytest.mark.parametrize("shape", [(1, 1), (1000, 999), (4096, 1024)], ids=str)
def test_fp8_dequant_is_bit_exact_with_torch(shape):
    q = Q.fp8_codes(shape, torch.float8_e4m3fn, g(22), DEV)
    scale = Q.quant_scale((), torch.float32, g(23), DEV)
    rows = Q.quant_scale((shape[0],), torch.float32, g(24), DEV)
    assert_same_bits(kernels_ext.fp8_dequant(q, scale), Q.fp8_dequant(q, scale), "per tensor")
    assert_same_bits(kernels_ext.fp8_dequant(q, rows), Q.fp8_dequant(q, rows), "per row")


def test_fp8_rejects_bad_input():
    x = rand(8, 8)
    with pytest.raises(ValueError, match="one element"):
        kernels_ext.fp8_quant(x, torch.ones(2, device=DEV))
    with pytest.raises(TypeError, match="float32"):
        kernels_ext.fp8_quant(x, torch.ones((), device=DEV, dtype=torch.float64))
    with pytest.raises(ValueError, match="empty"):
        kernels_ext.fp8_quant_dynamic(rand(0, 8))


# ----------------------------------------------------------------------------- gemv
@pytest.mark.parametrize("variant", ["simt", "mma", "decode", "auto"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m, k, b", [(1, 1, 1), (33, 7, 2), (65536, 128, 4), (4095, 16384, 8), (1000, 1001, 3),
                                     (777, 4096, 11), (4096, 4096, 1), (37, 264, 5), (33, 1024, 2), (17, 8, 8),
                                     (100, 136, 1)], ids=str)
def test_gemv_against_float64(dtype, m, k, b, variant):
    """mma (16-bit, K % 8 == 0) covers partial 16-row tiles, K not a multiple of its 128-wide step,
    1, 2, 4 and 8 K slices, batches below and beyond 8; decode (the GEMM's small-M kernel) batches up
    to 16 and K tails inside its 32-wide chunk; elsewhere both fall back to simt."""
    a, x = rand(m, k, dtype=dtype, seed=25), rand(b, k, dtype=dtype, seed=26)
    ref = x.double() @ a.double().t()
    poison_next((b, m), dtype)
    y = kernels_ext.gemv(a, x, variant)
    scale = x.double().abs() @ a.double().abs().t()
    # one output rounding plus an fp32 accumulation allowance of 8 sqrt(K) ulps of sum |a x|
    bound = 2 * UNIT[dtype] * ref.abs() + 8 * math.sqrt(k) * 2.0 ** -24 * scale
    assert torch.isfinite(y).all()
    assert float(((y.double() - ref).abs() / bound).max()) <= 1.0


@pytest.mark.parametrize("variant", ["simt", "mma", "decode"])
def test_gemv_vector_and_strided_weights(variant):
    big = rand(500, 600, dtype=torch.bfloat16, seed=27)
    a, v = big[:, 8:520], rand(512, dtype=torch.bfloat16, seed=28)
    y = kernels_ext.gemv(a, v, variant)
    assert y.shape == (500,)
    ref = a.double() @ v.double()
    assert float(torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref)) < 2 ** -7
    with pytest.raises(ValueError, match="x must have shape"):
        kernels_ext.gemv(a, rand(2, 511, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="dtype"):
        kernels_ext.gemv(a, v.float())


# ----------------------------------------------------------------------------- histogram, nms
@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8], ids=str)
@pytest.mark.parametrize("n, bins", [(1, 1), (17, 256), (1000003, 4096), (1 << 22, 256), (100000, 8192)], ids=str)
def test_histogram_counts_exactly(dtype, n, bins):
    high = min(bins, 256) if dtype == torch.uint8 else bins
    uniform = torch.randint(0, high, (n,), device=DEV, generator=g(29)).to(dtype)
    skewed = Hs.skewed_values((n,), dtype, g(30), DEV)
    constant = torch.full((n,), min(7, bins - 1), device=DEV, dtype=dtype)
    for x in (uniform, skewed, constant, uniform[3:]):
        assert torch.equal(kernels_ext.histogram(x, bins), Hs.histogram_reference(x, bins))


def test_histogram_ignores_out_of_range_and_rejects_bad_input():
    x = torch.randint(-50, 300, (100001,), device=DEV, generator=g(31)).int()
    assert torch.equal(kernels_ext.histogram(x, 256), Hs.histogram_reference(x, 256))
    xb = torch.randint(0, 256, (100001,), device=DEV, generator=g(31)).to(torch.uint8)
    for bins in (1, 100, 255, 256, 300):   # uint8 values at and beyond the last bin
        assert torch.equal(kernels_ext.histogram(xb, bins), Hs.histogram_reference(xb, bins))
    assert torch.equal(kernels_ext.histogram(x.view(1, -1), 256), Hs.histogram_reference(x, 256))
    with pytest.raises(ValueError, match=r"bins must be in \[1, 8192\], got 0"):
        kernels_ext.histogram(x, 0)
    with pytest.raises(ValueError, match=r"bins must be in \[1, 8192\], got 0"):
        torch.ops.solbench_kernels.histogram(x, 0)
    with pytest.raises(TypeError, match="uint8, int32"):
        kernels_ext.histogram(x.float(), 256)
    with pytest.raises(ValueError, match="contiguous"):
        kernels_ext.histogram(x[:100000].view(1000, 100).t(), 256)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 5000, 20000])
@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_keeps_what_torchvision_keeps(n, thr):
    torchvision = pytest.importorskip("torchvision")
    boxes = Nm.detection_boxes((n, 4), torch.float32, g(32), DEV)
    scores = Nm.scores_uniform((n,), torch.float32, g(33), DEV)
    assert torch.equal(kernels_ext.nms(boxes, scores, thr), torchvision.ops.nms(boxes, scores, thr))


@pytest.mark.parametrize("n", [64, 200, 5000])
def test_nms_long_chains_and_identical_boxes(n):
    """Boxes in a row, each overlapping its next two (every other one kept: the scan settles a
    rank block in as many rounds as its longest chain), and identical boxes (one kept)."""
    torchvision = pytest.importorskip("torchvision")
    x = torch.arange(n, device=DEV, dtype=torch.float32) * 0.3
    chain = torch.stack((x, torch.zeros_like(x), x + 1.0, torch.ones_like(x)), dim=1)
    same = torch.tensor([[1.0, 2.0, 5.0, 7.0]], device=DEV).repeat(n, 1)
    for boxes in (chain, same):
        for scores in (torch.linspace(1, 0, n, device=DEV), torch.rand(n, device=DEV, generator=g(36))):
            expected = torchvision.ops.nms(boxes, scores, 0.3)
            assert torch.equal(kernels_ext.nms(boxes, scores, 0.3), expected)
    assert kernels_ext.nms(same, torch.rand(n, device=DEV, generator=g(37)), 0.5).numel() == 1


@pytest.mark.parametrize("n", [1000, 3000, 5000, 16384, 16385])
def test_nms_order_matches_torchs_sort_on_ties_and_signed_zeros(n):
    """Up to kNmsRankSortMax boxes the score order comes from one ranking launch, not torch's sort:
    it must be the same permutation, ties (by index) and -0.0 below +0.0 included."""
    torchvision = pytest.importorskip("torchvision")
    boxes = Nm.detection_boxes((n, 4), torch.float32, g(38), DEV)
    levels = torch.tensor([-1.0, -0.0, 0.0, 0.25, 0.5, 1.0], device=DEV)
    scores = levels[torch.randint(0, 6, (n,), device=DEV, generator=g(39))]
    assert torch.equal(kernels_ext.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5))


def test_nms_ties_and_bad_input():
    torchvision = pytest.importorskip("torchvision")
    boxes = Nm.detection_boxes((3000, 4), torch.float32, g(34), DEV)
    scores = (torch.rand(3000, device=DEV, generator=g(35)) * 64).floor() / 64
    assert torch.equal(kernels_ext.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5))
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        kernels_ext.nms(boxes[:, :3].contiguous(), scores, 0.5)
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        torch.ops.solbench_kernels.nms(boxes[:, :3].contiguous(), scores, 0.5)
    with pytest.raises(ValueError, match="at most 65536 boxes, got 70000"):
        kernels_ext.nms(torch.zeros(70000, 4, device=DEV), torch.zeros(70000, device=DEV), 0.5)
    with pytest.raises(TypeError, match="float32"):
        kernels_ext.nms(boxes.double(), scores, 0.5)


# ----------------------------------------------------------------------------- torch.compile
def test_family_ops_pass_opcheck():
    """Schemas, fakes and the CUDA impls agree (what torch.compile relies on)."""
    from torch.library import opcheck

    ops = torch.ops.solbench_kernels
    q, k = rand(16, 4, 64, dtype=torch.bfloat16), rand(16, 2, 64, dtype=torch.bfloat16)
    cs = R.cos_sin_cache((16, 64), torch.bfloat16, g(36), DEV)
    logits, tgt = rand(8, 100), torch.randint(0, 100, (8,), device=DEV, generator=g(37))
    x = rand(32, 48, dtype=torch.bfloat16)
    for op, args in ((ops.rope, (q, k, cs, True)), (ops.rope_inplace, (q.clone(), k.clone(), cs, False)),
                     (ops.transpose, (x,)), (ops.cross_entropy, (logits, tgt, -100, "mean")),
                     (ops.cross_entropy_rows, (logits, tgt, -100)),
                     (ops.embedding, (x, torch.randint(0, 32, (5,), device=DEV), False)),
                     (ops.fp8_quant_rows, (x,)), (ops.fp8_quant_dynamic, (x,)),
                     (ops.gemv, (x, rand(3, 48, dtype=torch.bfloat16))),
                     (ops.histogram, (torch.randint(0, 300, (1000,), device=DEV, generator=g(38)).int(), 256))):
        opcheck(op, args)
    # NMS's output length is data-dependent: its fake returns an unbacked size, which opcheck's
    # fake-tensor test accepts only when the op is marked as such; the schema and the real kernel
    # are still checked.
    boxes = Nm.detection_boxes((200, 4), torch.float32, g(39), DEV)
    scores = Nm.scores_uniform((200,), torch.float32, g(40), DEV)
    opcheck(ops.nms, (boxes, scores, 0.5), test_utils=("test_schema", "test_autograd_registration"))
