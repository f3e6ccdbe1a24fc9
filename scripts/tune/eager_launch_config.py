"""Launch shape of PyTorch's own elementwise kernels on the GPU present (kernel name, grid,
block, registers, duration), read from a torch.profiler trace.

    python scripts/tune/eager_launch_config.py

On the H200 (torch 2.11) eager GELU/SiLU/neg fp32 launch 262144 blocks of 128 threads at
31-32 registers on 32768x8192: 2 float4 per thread, 2048 threads per SM; that is what led
the kernel library to try (and adopt) small tiles at full occupancy for cheap maps.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def kernels_of(fn) -> list[dict]:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        events = json.loads(Path(path).read_text())["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel"]


def main() -> None:
    x = torch.randn(32768, 8192, device="cuda")
    xb = x.bfloat16()
    ops = {"gelu_f32": lambda: F.gelu(x), "silu_f32": lambda: F.silu(x), "add_f32": lambda: x + x,
           "gelu_bf16": lambda: F.gelu(xb), "neg_f32": lambda: torch.neg(x)}
    for name, fn in ops.items():
        for e in kernels_of(fn):
            a = e.get("args", {})
            print(name, e["name"][:120], "grid", a.get("grid"), "block", a.get("block"),
                  "regs", a.get("registers per thread"), "dur_us", e.get("dur"))


if __name__ == "__main__":
    main()
