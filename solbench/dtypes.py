"""The precisions solbench knows: storage type, element size, and which peak they run at.

Pure data, no torch import at module level, so spec validation and formulas work before torch is
loaded. `tfloat32` is not a storage type: it is float32 tensors multiplied with TF32 tensor-core
math, switched on by `matmul_precision` (the one place that flips torch's TF32 flags).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

from solbench.errors import UserError


@dataclass(frozen=True)
class Precision:
    name: str            # what specs and the CLI call it
    storage: str         # the torch dtype attribute tensors are stored in
    size: int            # bytes per element in memory
    tensor_key: str      # key into the peak table's tensor-core figures
    allow_tf32: bool = False
    min_capability: tuple[int, int] = (0, 0)  # CUDA compute capability needed
    cpu_ok: bool = True


PRECISIONS: dict[str, Precision] = {p.name: p for p in [
    Precision("float64", "float64", 8, "fp64"),
    Precision("float32", "float32", 4, "fp32"),
    Precision("tfloat32", "float32", 4, "tf32", allow_tf32=True, min_capability=(8, 0), cpu_ok=False),
    Precision("bfloat16", "bfloat16", 2, "bf16", min_capability=(8, 0)),
    Precision("float16", "float16", 2, "fp16"),
    Precision("float8_e4m3fn", "float8_e4m3fn", 1, "fp8", min_capability=(8, 9), cpu_ok=False),
    Precision("int64", "int64", 8, "int64"),
    Precision("int32", "int32", 4, "int32"),
    Precision("int8", "int8", 1, "int8"),
    Precision("uint8", "uint8", 1, "int8"),
    Precision("bool", "bool", 1, "int8"),
]}

_ALIASES = {"fp32": "float32", "tf32": "tfloat32", "bf16": "bfloat16", "fp16": "float16",
            "half": "float16", "fp8": "float8_e4m3fn", "fp64": "float64"}


def precision(name: str) -> Precision:
    key = _ALIASES.get(name, name)
    if key not in PRECISIONS:
        raise UserError(f"unknown dtype '{name}' (known: {', '.join(PRECISIONS)})")
    return PRECISIONS[key]


def element_size(name: str) -> int:
    """Bytes per element of a dtype name: the `bytes()` helper of the formula language."""
    return precision(name).size


def supported_on(p: Precision, device_kind: str, capability: tuple[int, int] | None) -> str | None:
    """None when the device can run this precision, else the reason it cannot."""
    if device_kind == "cpu":
        return None if p.cpu_ok else f"{p.name} needs a CUDA device"
    if capability is not None and capability < p.min_capability:
        need = ".".join(map(str, p.min_capability))
        have = ".".join(map(str, capability))
        return f"{p.name} needs compute capability {need}, this device has {have}"
    return None


@contextlib.contextmanager
def matmul_precision(dtype_name: str) -> Iterator[None]:
    """Run the block with TF32 tensor-core math on for `tfloat32` only, off for every other dtype.

    Both of torch's switches are set (matmuls and cuDNN convolutions): a float32 case must run true
    fp32, whatever the process default, or it is timed at the wrong precision and scored against the
    wrong peak. The previous settings are restored on exit, also after an exception.
    """
    import torch

    allow = precision(dtype_name).allow_tf32
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
