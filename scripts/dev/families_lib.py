"""ctypes bindings of libskfamilies.so (scripts/dev/families_shim.cu) as torch-level functions.

Each function mirrors its PyTorch binding in kernels_ext/csrc/bindings/<family>.cpp (the same
allocation, scratch and semantics) so the GPU driver can check and time the kernels before the
extension is built. Outputs are poisoned (NaN, or 0xff bytes) before each launch, so an element a
kernel forgets to write shows as wrong.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
REDUCTION_CODE = {"none": 0, "mean": 1, "sum": 2}
INT_CODE = {torch.uint8: 0, torch.int32: 1}

_I64 = ctypes.c_int64
_INT = ctypes.c_int
_PTR = ctypes.c_void_p
_F32 = ctypes.c_float


class KernelError(RuntimeError):
    """A launcher returned a CUDA error."""


class Families:
    """The loaded library; one method per op."""

    def __init__(self, path: Path, poison: bool = True):
        self.lib = ctypes.CDLL(str(path))
        self.poison = poison
        sig = {
            "sk_rope": [_INT, _PTR, _PTR, _PTR, _PTR, _PTR, _I64, _INT, _INT, _INT, _PTR, _INT, _PTR],
            "sk_transpose": [_INT, _PTR, _PTR, _I64, _I64, _I64, _I64, _I64, _PTR],
            "sk_cross_entropy_workspace": [_INT, _PTR, _I64, _I64, _INT],
            "sk_cross_entropy": [_INT, _PTR, _PTR, _PTR, _I64, _I64, _I64, _INT, _PTR, _PTR],
            "sk_embedding": [_INT, _PTR, _PTR, _PTR, _I64, _I64, _I64, _I64, _PTR, _PTR],
            "sk_histogram": [_INT, _PTR, _I64, _INT, _PTR, _PTR],
            "sk_fp8_quant": [_INT, _PTR, _PTR, _PTR, _I64, _PTR],
            "sk_fp8_quant_dynamic": [_INT, _PTR, _PTR, _PTR, _PTR, _I64, _PTR],
            "sk_fp8_quant_rows": [_INT, _PTR, _PTR, _PTR, _I64, _I64, _PTR],
            "sk_fp8_dequant": [_INT, _PTR, _PTR, _INT, _PTR, _I64, _I64, _PTR],
            "sk_gemv": [_INT, _PTR, _PTR, _PTR, _I64, _I64, _I64, _I64, _I64, _PTR],
            "sk_gemv_mma": [_INT, _PTR, _PTR, _PTR, _I64, _I64, _I64, _I64, _I64, _PTR],
            "sk_nms": [_PTR, _PTR, _I64, _F32, _PTR, _PTR, _PTR, _PTR],
            "sk_nms_words": [_I64],
        }
        for name, args in sig.items():
            fn = getattr(self.lib, name)
            fn.argtypes = args
            fn.restype = _I64 if name in ("sk_cross_entropy_workspace", "sk_nms_words") else _INT

    # ------------------------------------------------------------------ helpers
    def _call(self, name: str, *args) -> None:
        err = getattr(self.lib, name)(*args)
        if err != 0:
            raise KernelError(f"{name}: CUDA error {err}")

    @staticmethod
    def _stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    def _empty(self, shape, dtype, device) -> torch.Tensor:
        out = torch.empty(shape, dtype=dtype, device=device)
        if self.poison:
            if out.is_floating_point() and out.element_size() >= 2:
                out.fill_(float("nan"))
            else:
                out.view(torch.uint8).fill_(0xFF)
        return out

    # ------------------------------------------------------------------ ops
    def rope_into(self, q, k, cos_sin, q_out, k_out, neox: bool) -> None:
        strides = (ctypes.c_int64 * 9)(q.stride(0), q.stride(1), k.stride(0), k.stride(1), q_out.stride(0),
                                       q_out.stride(1), k_out.stride(0), k_out.stride(1), cos_sin.stride(0))
        self._call("sk_rope", DTYPE_CODE[q.dtype], q.data_ptr(), k.data_ptr(), cos_sin.data_ptr(),
                   q_out.data_ptr(), k_out.data_ptr(), q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                   strides, int(neox), self._stream())

    def rope(self, q, k, cos_sin, neox: bool = True):
        q_out = self._empty(q.shape, q.dtype, q.device)
        k_out = self._empty(k.shape, k.dtype, k.device)
        self.rope_into(q, k, cos_sin, q_out, k_out, neox)
        return q_out, k_out

    def rope_inplace(self, q, k, cos_sin, neox: bool = True):
        self.rope_into(q, k, cos_sin, q, k, neox)
        return q, k

    def transpose(self, x):
        rows, cols = x.shape[-2:]
        y = self._empty((*x.shape[:-2], cols, rows), x.dtype, x.device)
        v = x.reshape(-1, rows, cols)
        if v.stride(2) != 1 and cols > 1:
            v = v.contiguous()
        self._call("sk_transpose", DTYPE_CODE[x.dtype], v.data_ptr(), y.data_ptr(), v.shape[0], rows, cols,
                   v.stride(0), v.stride(1), self._stream())
        return y

    def cross_entropy(self, logits, target, ignore_index: int = -100, reduction: str = "mean"):
        red = REDUCTION_CODE[reduction]
        rows, vocab = logits.shape
        out = self._empty((rows,) if reduction == "none" else (), torch.float32, logits.device)
        code = DTYPE_CODE[logits.dtype]
        ws_bytes = self.lib.sk_cross_entropy_workspace(code, logits.data_ptr(), rows, vocab, red)
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=logits.device)
        self._call("sk_cross_entropy", code, logits.data_ptr(), target.data_ptr(), out.data_ptr(), rows, vocab,
                   ignore_index, red, ws.data_ptr(), self._stream())
        return out

    def embedding(self, table, indices, check: bool = True):
        out = self._empty((*indices.shape, table.shape[1]), table.dtype, table.device)
        status = torch.zeros(2, dtype=torch.int64, device=table.device) if check else None
        self._call("sk_embedding", DTYPE_CODE[table.dtype], table.data_ptr(), indices.data_ptr(), out.data_ptr(),
                   indices.numel(), table.shape[0], table.shape[1], table.stride(0),
                   status.data_ptr() if check else None, self._stream())
        if check:
            last_bad, count = status.tolist()  # waits for the kernel, as the binding does
            if last_bad:
                value = int(indices.reshape(-1)[last_bad - 1])
                raise IndexError(f"embedding: {count} of {indices.numel()} indices out of range for a table of "
                                 f"{table.shape[0]} rows, e.g. indices.flatten()[{last_bad - 1}] = {value}")
        return out

    def histogram(self, x, bins: int):
        counts = torch.zeros(bins, dtype=torch.int64, device=x.device)
        self._call("sk_histogram", INT_CODE[x.dtype], x.data_ptr(), x.numel(), bins, counts.data_ptr(),
                   self._stream())
        return counts

    def fp8_quant(self, x, scale):
        q = self._empty(x.shape, torch.float8_e4m3fn, x.device)
        self._call("sk_fp8_quant", DTYPE_CODE[x.dtype], x.data_ptr(), scale.data_ptr(), q.data_ptr(), x.numel(),
                   self._stream())
        return q

    def fp8_quant_dynamic(self, x):
        q = self._empty(x.shape, torch.float8_e4m3fn, x.device)
        scale = self._empty((), torch.float32, x.device)
        amax = torch.zeros(1, dtype=torch.int32, device=x.device)
        self._call("sk_fp8_quant_dynamic", DTYPE_CODE[x.dtype], x.data_ptr(), q.data_ptr(), scale.data_ptr(),
                   amax.data_ptr(), x.numel(), self._stream())
        return q, scale

    def fp8_quant_rows(self, x):
        q = self._empty(x.shape, torch.float8_e4m3fn, x.device)
        scales = self._empty(x.shape[:-1], torch.float32, x.device)
        cols = x.shape[-1]
        self._call("sk_fp8_quant_rows", DTYPE_CODE[x.dtype], x.data_ptr(), q.data_ptr(), scales.data_ptr(),
                   x.numel() // cols, cols, self._stream())
        return q, scales

    def fp8_dequant(self, q, scale):
        y = self._empty(q.shape, torch.bfloat16, q.device)
        cols = q.shape[-1]
        self._call("sk_fp8_dequant", DTYPE_CODE[torch.bfloat16], q.data_ptr(), scale.data_ptr(),
                   int(scale.numel() != 1), y.data_ptr(), q.numel() // cols, cols, self._stream())
        return y

    def gemv(self, a, x, variant: str = "simt"):
        vector = x.dim() == 1
        batch = 1 if vector else x.shape[0]
        y = self._empty((a.shape[0],) if vector else (batch, a.shape[0]), a.dtype, a.device)
        self._call("sk_gemv_mma" if variant == "mma" else "sk_gemv", DTYPE_CODE[a.dtype], a.data_ptr(), x.data_ptr(), y.data_ptr(), a.shape[0], a.shape[1],
                   batch, a.stride(0), a.shape[1] if vector else x.stride(0), self._stream())
        return y

    def nms(self, boxes, scores, iou_threshold: float):
        n = boxes.shape[0]
        if n == 0:
            return torch.empty(0, dtype=torch.int64, device=boxes.device)
        order = scores.sort(0, descending=True)[1]  # torchvision's call: ties resolve alike
        words = self.lib.sk_nms_words(n)
        mask = torch.empty(n * words, dtype=torch.int64, device=boxes.device)
        keep = self._empty((n,), torch.int64, boxes.device)
        count = torch.empty(1, dtype=torch.int64, device=boxes.device)
        self._call("sk_nms", boxes.data_ptr(), order.data_ptr(), n, iou_threshold, mask.data_ptr(), keep.data_ptr(),
                   count.data_ptr(), self._stream())
        return keep[: int(count.item())]
