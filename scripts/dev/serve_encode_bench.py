"""The GPU worker's reply encoding, timed on the CPU: safetensors' own save vs the worker's direct writer
(solbench/serve/tensors.py), for the speed target's softmax output (256 x 1024 bf16).

    python scripts/dev/serve_encode_bench.py
"""
from __future__ import annotations

import time

import torch

from solbench.serve.tensors import _encode_with_safetensors, encode_safetensors


def main() -> None:
    outputs = {"y": torch.randn(256, 1024).bfloat16()}
    for fn, name in ((_encode_with_safetensors, "safetensors save"), (encode_safetensors, "direct writer")):
        for _ in range(50):
            fn(outputs)
        n, t0 = 2000, time.perf_counter()
        for _ in range(n):
            fn(outputs)
        print(f"{name:17} {(time.perf_counter() - t0) / n * 1e6:6.1f} us per 256x1024 bf16 output")


if __name__ == "__main__":
    main()
