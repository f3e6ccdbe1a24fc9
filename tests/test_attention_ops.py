"""Attention references, SDPA baselines and spec formulas on the CPU (solbench/torch_ops/attention.py,
specs/ops/attention*.yaml), and the kernels_ext attention ops' input errors before any build."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import kernels_ext
from solbench import spec
from solbench.torch_ops import attention as att

SPECS = Path(__file__).resolve().parents[1] / "specs" / "ops"


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Row by row, the textbook formula in float64 (independent of the block-wise reference)."""
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    o = torch.zeros(b, h, sq, d, dtype=torch.float64)
    lse = torch.full((b, h, sq), float("-inf"), dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            kh = hi // (h // hkv)
            for i in range(sq):
                keys = [j for j in range(sk) if not causal or j <= i + sk - sq]
                if not keys:
                    continue
                s = torch.stack([q[bi, hi, i].double() @ k[bi, kh, j].double() for j in keys]) / math.sqrt(d)
                w = torch.softmax(s, dim=0)
                o[bi, hi, i] = sum(w[n] * v[bi, kh, j].double() for n, j in enumerate(keys))
                lse[bi, hi, i] = torch.logsumexp(s, dim=0)
    return o, lse


def inputs(b: int, h: int, hkv: int, sq: int, sk: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, sq, d, generator=g, dtype=torch.float64),
            torch.randn(b, hkv, sk, d, generator=g, dtype=torch.float64),
            torch.randn(b, hkv, sk, d, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("shape", [(1, 2, 2, 5, 5, 8), (2, 4, 1, 3, 7, 8), (1, 4, 2, 7, 3, 16), (1, 8, 2, 1, 9, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_the_textbook_formula(shape, causal):
    q, k, v = inputs(*shape)
    o, lse = att.attention_reference_lse(q, k, v, is_causal=causal)
    want_o, want_lse = naive(q, k, v, causal)
    torch.testing.assert_close(o, want_o, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)


def test_rows_that_see_no_key_are_zero_with_lse_minus_infinity():
    q, k, v = inputs(1, 2, 2, 7, 3, 8)          # causal, SQ > SK: queries 0..3 see nothing
    o, lse = att.attention_reference_lse(q, k, v, is_causal=True)
    assert torch.isfinite(o).all()
    assert (o[:, :, :4] == 0).all() and torch.isneginf(lse[:, :, :4]).all()
    assert torch.isfinite(lse[:, :, 4:]).all() and (o[:, :, 4:].abs().sum(-1) > 0).all()


def test_no_keys_gives_zero_rows():
    q, k, v = inputs(1, 2, 2, 3, 0, 8)
    o, lse = att.attention_reference_lse(q, k, v)
    assert (o == 0).all() and torch.isneginf(lse).all() and o.shape == q.shape


def test_block_wise_reference_equals_one_block(monkeypatch):
    q, k, v = inputs(2, 4, 2, 33, 40, 16)
    whole = att.attention_reference_lse(q, k, v, is_causal=True)
    monkeypatch.setattr(att, "_REFERENCE_BLOCK_ELEMENTS", 2 * 4 * 40 * 5)   # 5 query rows per block
    blocks = att.attention_reference_lse(q, k, v, is_causal=True)
    # the same arithmetic per row; only the matmul's blocking may differ in the last bits
    torch.testing.assert_close(blocks[0], whole[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(blocks[1], whole[1], rtol=1e-12, atol=1e-12)


def test_explicit_scale():
    q, k, v = inputs(1, 2, 2, 4, 6, 8)
    o = att.attention_reference(q, k, v, scale=0.3)
    scores = (q @ k.transpose(-2, -1)) * 0.3
    torch.testing.assert_close(o, torch.softmax(scores, -1) @ v)


@pytest.mark.parametrize("shape", [(1, 4, 4, 16, 16, 32), (2, 8, 2, 16, 16, 32), (1, 4, 4, 5, 12, 32),
                                   (1, 8, 2, 6, 20, 32)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_baseline_follows_the_bottom_right_convention(shape, causal):
    q, k, v = (t.float() for t in inputs(*shape))
    for backend in (None, "math"):
        got = att.sdpa(q, k, v, is_causal=causal, backend=backend)
        torch.testing.assert_close(got, att.attention_reference(q, k, v, is_causal=causal), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 9), (9, 1), (17, 1000), (1000, 17), (64, 64), (16, 131072)])
def test_causal_pair_count_and_spec_flops(sq, sk):
    assert att.causal_pairs(sq, sk) == int(att.causal_visible(sq, sk).sum())
    for name in ("attention.yaml", "attention_decode.yaml"):
        s = spec.load_file(SPECS / name)
        env = {"B": 2, "H": 3, "HKV": 1, "SQ": sq, "SK": sk, "D": 64}
        assert s.flops.evaluate({**env, "causal": True}) == 4 * 2 * 3 * 64 * att.causal_pairs(sq, sk)
        assert s.flops.evaluate({**env, "causal": False}) == 4 * 2 * 3 * 64 * sq * sk


def test_specs_count_grouped_kv_bytes_and_start_small():
    s = spec.load_file(SPECS / "attention.yaml")
    gqa = next(c for c in s.cases if c["HKV"] < c["H"])
    b, h, hkv, sq, sk, d = (gqa[n] for n in ("B", "H", "HKV", "SQ", "SK", "D"))
    assert s.bytes_for("bfloat16", gqa) == 2 * (2 * b * h * sq * d + 2 * b * hkv * sk * d)
    assert any(c["SQ"] != c["SK"] and c["causal"] for c in s.cases + s.cpu_cases)
    for name in ("attention.yaml", "attention_decode.yaml"):
        sp = spec.load_file(SPECS / name)
        first = sp.flops.evaluate(sp.cases[0])
        assert all(first <= sp.flops.evaluate(c) for c in sp.cases), name   # --quick runs the first
    decode = spec.load_file(SPECS / "attention_decode.yaml")
    assert all(1 <= c["SQ"] <= 16 for c in decode.cases)


BAD_INPUTS = [
    (dict(d=32), "head dim D must be 64 or 128, got 32"),
    (dict(hkv=3), "the 3 key/value heads must divide the 4 query heads"),
    (dict(dtype=torch.float32), "q has dtype float32; supported: bfloat16, float16"),
    (dict(v_dtype=torch.float16), "v has dtype float16 but q has bfloat16"),
    (dict(transpose=True), "q must be contiguous"),
    (dict(k_batch=2), "with B = 1 (from q)"),
    (dict(), "q is on cpu; a CUDA tensor is required"),
]


@pytest.mark.parametrize("op", ["attention", "attention_lse", "flash_attention_mma", "flash_attention_wgmma",
                                "flash_attention_wgmma_persistent", "attention_decode"])
@pytest.mark.parametrize("bad,message", BAD_INPUTS)
def test_attention_ops_reject_bad_input_before_building(op, bad, message):
    d, hkv, dtype = bad.get("d", 64), bad.get("hkv", 4), bad.get("dtype", torch.bfloat16)
    q = torch.zeros(1, 4, 8, d, dtype=dtype)
    k = torch.zeros(bad.get("k_batch", 1), hkv, 8, d, dtype=dtype)
    v = torch.zeros(bad.get("k_batch", 1), hkv, 8, d, dtype=bad.get("v_dtype", dtype))
    if bad.get("transpose"):
        q = torch.zeros(1, 8, 4, d, dtype=dtype).transpose(1, 2)
    with pytest.raises((TypeError, ValueError), match=f"kernels_ext.{op}: .*{message}".replace("(", r"\(")
                       .replace(")", r"\)")):
        getattr(kernels_ext, op)(q, k, v)


def test_decode_rejects_long_queries_and_unknown_variants_and_tails():
    q = torch.zeros(1, 4, 17, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="kernels_ext.attention_decode: decode needs a query length SQ of 1 to 16, got 17"):
        kernels_ext.attention_decode(q, q, q)
    for splits in (-1, 257):
        with pytest.raises(ValueError, match=f"kernels_ext.attention_decode: splits must be 0 .automatic. to 256, "
                                             f"got {splits}"):
            kernels_ext.attention_decode(q[:, :, :1], q, q, splits=splits)
    with pytest.raises(ValueError, match="kernels_ext.attention_lse: variant must be one of 'auto', 'mma', 'wgmma', "
                       "'wgmma_persistent', 'decode'"):
        kernels_ext.attention_lse(q, q, q, variant="fast")
    with pytest.raises(ValueError, match="kernels_ext.flash_attention_wgmma_persistent: tail must be one of "
                       "'split', 'whole'; got 'halves'"):
        kernels_ext.flash_attention_wgmma_persistent(q, q, q, tail="halves")


TAIL_RULE_CHECK = r"""
#include <cstdio>
#include "attention/prefill_tail_rule.h"
using namespace sk::attn;
int main() {
  int bad = 0;
  // B4 H32 S4096 D128 with 128 x 192 tiles: 4,096 items on 132 SMs are 31 full rounds and 4 items
  // over, each of 22 key tiles: 22 pieces of one tile each (88 blocks of the last round).
  PrefillTailPlan p = plan_prefill_tail(4096, 22, 128, 132, true, false, 256);
  bad += p.grid != 132 || p.first_item != 4092 || p.pieces != 22 || p.tiles_per_piece != 1 || p.rows != 512;
  // B1 H32 S16384: 86 tiles, at most 33 pieces: 3 tiles a piece, 29 pieces.
  p = plan_prefill_tail(4096, 86, 128, 132, true, false, 256);
  bad += p.pieces != 29 || p.tiles_per_piece != 3;
  // Whole items: causal, not asked, a full last round, items under 4 tiles, a tail of more than
  // half the SMs (one piece each); the grid is then min(items, SMs) and nothing is split.
  bad += plan_prefill_tail(4096, 22, 128, 132, true, true, 256).pieces != 0;
  bad += plan_prefill_tail(4096, 22, 128, 132, false, false, 256).pieces != 0;
  bad += plan_prefill_tail(132 * 31, 22, 128, 132, true, false, 256).pieces != 0;
  bad += plan_prefill_tail(4096, 3, 128, 132, true, false, 256).pieces != 0;
  bad += plan_prefill_tail(132 + 100, 22, 128, 132, true, false, 256).pieces != 0;
  p = plan_prefill_tail(64, 3, 128, 132, true, false, 256);
  bad += p.grid != 64 || p.first_item != 64 || p.rows != 0;
  // Fewer items than SMs (no full round: measured slower split): whole.
  p = plan_prefill_tail(64, 22, 128, 132, true, false, 256);
  bad += p.grid != 64 || p.pieces != 0;
  // One full round and 4 over, 8 tiles each: 8 pieces of one tile.
  p = plan_prefill_tail(136, 8, 128, 132, true, false, 256);
  bad += p.grid != 132 || p.first_item != 132 || p.pieces != 8 || p.tiles_per_piece != 1 || p.rows != 4 * 128;
  // Invariants everywhere: the pieces fit the last round, cover every tile, none is empty, never
  // more than the merge's limit.
  for (int64_t sms : {1, 7, 114, 132}) {
    for (int64_t items = 1; items <= 600; items += 7) {
      for (int64_t tiles : {1, 4, 5, 22, 86, 1000}) {
        p = plan_prefill_tail(items, tiles, 128, sms, true, false, 256);
        if (p.pieces == 0) {
          bad += p.first_item != items || p.grid != (items < sms ? items : sms);
          continue;
        }
        const int64_t tail = items - p.first_item;
        bad += items < sms || tail != items % sms || tail * p.pieces > sms || p.pieces > 256 || p.grid != sms;
        bad += int64_t{p.pieces} * p.tiles_per_piece < tiles;
        bad += int64_t{p.pieces - 1} * p.tiles_per_piece >= tiles;
        bad += p.rows != tail * 128;
      }
    }
  }
  std::printf("%d wrong\n", bad);
  return bad != 0;
}
"""


def test_prefill_tail_rule_splits_only_the_last_rounds_items(tmp_path):
    """csrc/attention/prefill_tail_rule.h compiled for the host: the persistent launch's split tail
    at issue 14's cases, where it keeps items whole (fewer items than SMs among them), and its
    invariants over many sizes."""
    from tests.host_check import run_host_check

    run = run_host_check(tmp_path, TAIL_RULE_CHECK)
    assert run.returncode == 0 and run.stdout.strip() == "0 wrong", run.stdout + run.stderr
