"""Rotary position embedding of q [T, H, D] and k [T, KH, D] with a per-token cos/sin cache [T, D].

The cache row of a token holds cos(p * f_i) in its first D/2 entries and sin(p * f_i) in its last D/2
(the layout of vLLM's cos_sin_cache after the position lookup). Two layouts pair the elements of a head:
NeoX rotates the halves (x[i], x[i + D/2]), GPT-J rotates neighbours (x[2i], x[2i + 1]); pair i turns
by the angle of cache entry i either way.
"""

from __future__ import annotations

import torch

ROPE_BASE = 10000.0      # frequency base of the cache (Llama, NeoX)
MAX_POSITION = 32768     # positions are drawn from [1, MAX_POSITION): position 0 would give sin == 0


def cos_sin_cache(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
                  device: str) -> torch.Tensor:
    """A real cache for random token positions: cos^2 + sin^2 = 1, as in every model (independent
    uniform cos and sin would be rotations that scale, and loosen the error bound of the spec)."""
    tokens, dim = shape
    pos = torch.randint(1, MAX_POSITION, (tokens,), generator=generator, device=device).to(torch.float64)
    freq = ROPE_BASE ** (-torch.arange(0, dim // 2, dtype=torch.float64, device=device) * 2.0 / dim)
    angle = pos[:, None] * freq[None, :]
    return torch.cat((angle.cos(), angle.sin()), dim=-1).to(dtype)


def _rotate(x: torch.Tensor, cos_sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """The rotation as models write it in eager PyTorch (vLLM's native path): products, then sums."""
    half = cos_sin.shape[-1] // 2
    cos, sin = cos_sin[:, None, :half], cos_sin[:, None, half:]
    if neox:
        x1, x2 = x[..., :half], x[..., half:]
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def rope(q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor,
         neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Out of place: new rotated q and k."""
    return _rotate(q, cos_sin, bool(neox)), _rotate(k, cos_sin, bool(neox))


def rope_inplace(q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor,
                 neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """In place: q and k are overwritten with their rotation and returned."""
    q.copy_(_rotate(q, cos_sin, bool(neox)))
    k.copy_(_rotate(k, cos_sin, bool(neox)))
    return q, k


def _rotate_reference(x: torch.Tensor, cos_sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """Pairs as complex numbers times e^{i angle}: a formulation independent of `_rotate`."""
    tokens, heads, dim = x.shape
    half = dim // 2
    if neox:
        pairs = torch.stack((x[..., :half], x[..., half:]), dim=-1)
    else:
        pairs = x.reshape(tokens, heads, half, 2)
    turn = torch.complex(cos_sin[:, None, :half], cos_sin[:, None, half:])
    out = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * turn)
    if neox:
        return torch.cat((out[..., 0], out[..., 1]), dim=-1)
    return out.reshape(tokens, heads, dim)


def rope_reference(q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor,
                   neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    return _rotate_reference(q, cos_sin, bool(neox)), _rotate_reference(k, cos_sin, bool(neox))
