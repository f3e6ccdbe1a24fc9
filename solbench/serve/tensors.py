"""The worker's half of the wire formats (solbench/serve/wire.py): request bytes -> torch tensors, outputs
-> reply bytes. Runs in the worker process only; the server process never imports torch."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from solbench.dtypes import precision
from solbench.serve.wire import INT_DTYPES, ST_TAGS, TensorMeta

def tensors_from_safetensors(body: bytes, metas: Mapping[str, TensorMeta]) -> dict[str, Any]:
    """CPU tensors viewing the body's bytes (read-only memory: callers copy before anything writes)."""
    import warnings

    import torch

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # "buffer is not writable": nothing writes to these views
        for name, m in metas.items():
            dtype = getattr(torch, precision(str(m.dtype)).storage)
            count = math.prod(m.shape)
            flat = (torch.frombuffer(body, dtype=dtype, count=count, offset=m.offset) if count
                    else torch.empty(0, dtype=dtype))
            out[name] = flat.view(m.shape)
    return out


def tensors_from_json(values: Mapping[str, list[Any]],
                      inputs: Mapping[str, tuple[str, tuple[int, ...]]]) -> dict[str, Any]:
    import torch

    out = {}
    for name, (dtype, shape) in inputs.items():
        storage = getattr(torch, precision(dtype).storage)
        via = storage if dtype in INT_DTYPES else torch.float64
        out[name] = torch.tensor(values[name], dtype=via).to(storage).view(shape)
    return out


def encode_safetensors(outputs: Mapping[str, Any]) -> bytearray:
    """The outputs in the safetensors format, written straight into one buffer: one copy of each tensor's
    bytes (safetensors' own save made three and was a sixth of the GPU worker's time per request)."""
    import torch

    tags = {k: ST_TAGS.get(str(v.dtype).removeprefix("torch.")) for k, v in outputs.items()}
    if None in tags.values():          # a dtype the wire format does not name: safetensors' own writer
        return bytearray(_encode_with_safetensors(outputs))
    header: dict[str, Any] = {}
    flat: list[Any] = []
    offset = 0
    for k, v in outputs.items():
        raw = v.contiguous().reshape(-1).view(torch.uint8)
        header[k] = {"dtype": tags[k], "shape": list(v.shape), "data_offsets": [offset, offset + raw.numel()]}
        flat.append(raw)
        offset += raw.numel()
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)             # the data starts 8-byte aligned, as safetensors writes it
    buf = bytearray(8 + len(text) + offset)
    buf[:8] = len(text).to_bytes(8, "little")
    buf[8:8 + len(text)] = text
    at = 8 + len(text)
    for raw in flat:
        n = raw.numel()
        if n:
            buf[at:at + n] = raw.numpy().data
        at += n
    return buf


def _encode_with_safetensors(outputs: Mapping[str, Any]) -> bytes:
    from safetensors.torch import save

    # safetensors refuses tensors that share memory (an op may return one tensor twice): copy those.
    seen: set[int] = set()
    out = {}
    for k, v in outputs.items():
        v = v.contiguous()
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    return save(out)


def encode_json(outputs: Mapping[str, Any], extra: Mapping[str, Any]) -> bytes:
    import torch

    doc = dict(extra)
    doc["outputs"] = {}
    for name, t in outputs.items():
        values = t.tolist() if t.dtype in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool) \
            else t.float().tolist()
        doc["outputs"][name] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "data": values}
    return json.dumps(doc).encode()
