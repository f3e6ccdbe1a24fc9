"""FP8 (float8_e4m3fn) quantisation and dequantisation, written as PyTorch users write them.

These formulas are the definition the kernels match bit for bit, so the specs run them as their
references too (in float32, the dtype of the arithmetic). Every division is tensor by tensor on
the data's device: with a Python or CPU scalar divisor PyTorch's CUDA kernels multiply by the
reciprocal instead, which rounds differently.
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0          # the largest finite e4m3fn value
MIN_AMAX = 1e-12         # an all-zero tensor still gets a finite scale
SCALE_LOW, SCALE_HIGH = 0.002, 0.02   # static scales: randn / scale spans subnormals to saturation


def quant_scale(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
                device: str) -> torch.Tensor:
    """A per-tensor scale far from 1: x / scale reaches past 448 (saturating) for |x| > ~1, and
    into fp8's subnormals for the smallest |x|."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64)
    return (SCALE_LOW + (SCALE_HIGH - SCALE_LOW) * u).to(dtype)


def fp8_codes(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
              device: str) -> torch.Tensor:
    """Every finite e4m3fn code with equal probability (subnormals, both zeros, +-448); no NaN."""
    codes = torch.randint(0, 254, shape, generator=generator, device=device)
    codes = codes + (codes >= 0x7F).to(codes.dtype)           # skip 0x7f, the positive NaN
    return codes.to(torch.uint8).view(FP8).to(dtype)          # 0xff (negative NaN) is never drawn


def _quantise(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _scale_of(amax: torch.Tensor) -> torch.Tensor:
    return amax.float().clamp(min=MIN_AMAX) / torch.full_like(amax, FP8_MAX, dtype=torch.float32)


def fp8_quant(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(x.float() / scale).clamp(-448, 448).to(float8_e4m3fn) with a given per-tensor scale."""
    return _quantise(x, scale.float())


def fp8_quant_dynamic(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor dynamic scaling: scale = amax(|x|).clamp(min=1e-12) / 448."""
    scale = _scale_of(x.abs().amax())
    return _quantise(x, scale), scale


def fp8_quant_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale per row of the last dim."""
    scale = _scale_of(x.abs().amax(dim=-1, keepdim=True))
    return _quantise(x, scale), scale.squeeze(-1)


def fp8_dequant(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(q.float() * scale).to(bfloat16); scale per tensor (one element) or per row."""
    s = scale.float().reshape(()) if scale.numel() == 1 else scale.float()[..., None]
    return (q.float() * s).to(torch.bfloat16)
