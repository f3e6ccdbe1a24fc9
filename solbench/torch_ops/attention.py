"""Attention baselines and references: q [B, H, SQ, D], k and v [B, HKV, SK, D].

Conventions shared with kernels_ext's attention kernels:
- grouped-query attention: HKV divides H and query head h reads key/value head h // (H // HKV);
- causal masking is bottom-right aligned (FlashAttention's convention, and what decoding with a
  KV cache needs): query i sees key j when j <= i + SK - SQ. With SQ == SK that is the ordinary
  lower triangle;
- a query that sees no key (causal with SQ > SK) has output 0 and log-sum-exp -inf.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

_SDPA_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                  "cudnn": "CUDNN_ATTENTION"}
# Elements of one block of scores the reference materialises (2^27 fp32 = 512 MiB): the full
# [B, H, SQ, SK] matrix of the large cases would not fit even on an H200.
_REFERENCE_BLOCK_ELEMENTS = 1 << 27


# ----------------------------------------------------------------------------- references
def causal_visible(seq_q: int, seq_k: int, device: torch.device | str | None = None) -> torch.Tensor:
    """[SQ, SK] bool: query i sees key j (bottom-right aligned causal mask)."""
    i = torch.arange(seq_q, device=device)[:, None]
    j = torch.arange(seq_k, device=device)[None, :]
    return j <= i + (seq_k - seq_q)


def causal_pairs(seq_q: int, seq_k: int) -> int:
    """Visible (query, key) pairs of the bottom-right causal mask, per (batch, head)."""
    m = min(seq_q, seq_k)
    return m * (seq_k - m) + m * (m + 1) // 2


def attention_reference_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                            scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) by the definition, in the dtype of the inputs (the harness upcasts them).

    Scores are formed a block of query rows at a time so the large cases fit in memory; each
    block is softmax(scale * q k^T + mask) v written out step by step: the row max (0 for a
    row that sees nothing, so no -inf - -inf), exp, the row sum, then the weighted sum of v.
    """
    batch, heads, seq_q, dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]
    if heads % heads_kv:
        raise ValueError(f"attention_reference: {heads_kv} key/value heads do not divide {heads} query heads")
    group = heads // heads_kv
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    if seq_k == 0:  # no keys: every row is empty
        return q.new_zeros(q.shape), q.new_full((batch, heads, seq_q), float("-inf"))
    # [B, HKV, G, SQ, D] against [B, HKV, 1, SK, D]: query head h = hkv * G + g reads key head hkv.
    qg = q.reshape(batch, heads_kv, group, seq_q, dim)
    kg = k[:, :, None]
    vg = v[:, :, None]
    rows = max(1, _REFERENCE_BLOCK_ELEMENTS // max(1, batch * heads * seq_k))
    outs, lses = [], []
    for r0 in range(0, seq_q, rows):
        r1 = min(seq_q, r0 + rows)
        scores = (qg[:, :, :, r0:r1] @ kg.transpose(-2, -1)) * scale
        if is_causal:
            visible = causal_visible(seq_q, seq_k, q.device)[r0:r1]
            scores = scores.masked_fill(~visible, float("-inf"))
        row_max = scores.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isinf(row_max) & (row_max < 0), torch.zeros_like(row_max), row_max)
        p = torch.exp(scores - row_max)
        total = p.sum(dim=-1, keepdim=True)
        empty = total == 0
        outs.append(torch.where(empty, torch.zeros_like(total), (p @ vg) / torch.where(empty, 1, total)))
        lses.append(torch.where(empty, float("-inf"), row_max + torch.log(total)).squeeze(-1))
    o = torch.cat(outs, dim=3).reshape(batch, heads, seq_q, dim)
    lse = torch.cat(lses, dim=3).reshape(batch, heads, seq_q)
    return o, lse


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                        scale: float | None = None) -> torch.Tensor:
    return attention_reference_lse(q, k, v, is_causal, scale)[0]


# ----------------------------------------------------------------------------- SDPA
def _causal_kwargs(q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> dict:
    """SDPA's is_causal is top-left aligned; with SQ != SK the bottom-right convention needs
    torch's CausalBias (which routes to the backends that support it natively)."""
    if not is_causal:
        return {}
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if seq_q == seq_k:
        return {"is_causal": True}
    from torch.nn.attention.bias import causal_lower_right

    return {"attn_mask": causal_lower_right(seq_q, seq_k)}


def _native_gqa(backend: str | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> bool:
    """Whether the (pinned) backend takes k/v with fewer heads itself (enable_gqa)."""
    if backend in (None, "math") or q.device.type != "cuda":
        return True
    from torch.backends import cuda as backends

    check = {"flash": backends.can_use_flash_attention, "efficient": backends.can_use_efficient_attention,
             "cudnn": backends.can_use_cudnn_attention}[backend]
    params = backends.SDPAParams(q, k, v, None, 0.0, bool(is_causal), True)
    return bool(check(params))


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
         backend: str | None = None, scale: float | None = None) -> torch.Tensor:
    """scaled_dot_product_attention, optionally pinned to one backend (an error if it cannot run).

    Grouped-query inputs go in as they are (enable_gqa) where the backend supports that; a
    backend without GQA support gets k and v expanded to every query head first, inside the
    timed call, as a user of that backend would have to.
    """
    context = contextlib.nullcontext()
    if backend is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        context = sdpa_kernel(getattr(SDPBackend, _SDPA_BACKENDS[backend]))
    kwargs = _causal_kwargs(q, k, bool(is_causal))
    if scale is not None:
        kwargs["scale"] = float(scale)
    if k.shape[1] != q.shape[1]:
        if _native_gqa(backend, q, k, v, bool(is_causal)):
            kwargs["enable_gqa"] = True
        else:
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    with context:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


# ----------------------------------------------------------------------------- flex attention
@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    """torch.compile'd flex_attention (its Triton kernels are generated on the first call)."""
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError as exc:  # torch < 2.5
        raise RuntimeError(f"flex_attention needs torch >= 2.5 (this is {torch.__version__})") from exc
    return torch.compile(flex_attention, dynamic=False)


@functools.cache
def _causal_block_mask(seq_q: int, seq_k: int, device: str):
    """flex_attention's block mask for the bottom-right causal mask, built once per shape (it
    is a property of the shape, not of the data: building it is not part of attention)."""
    from torch.nn.attention.flex_attention import create_block_mask

    offset = seq_k - seq_q

    def visible(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return create_block_mask(visible, B=None, H=None, Q_LEN=seq_q, KV_LEN=seq_k, device=device)


def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
         scale: float | None = None) -> torch.Tensor:
    """torch.compile'd flex_attention (Triton-generated), causal through a block mask."""
    mask = _causal_block_mask(q.shape[-2], k.shape[-2], str(q.device)) if is_causal else None
    return _compiled_flex()(q, k, v, block_mask=mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1])
