"""What torch.compile launches for a baseline: the Triton source Inductor generated and, from one
profiled call, each kernel's grid, block and time. The cases are the small transposes, FP8
quantisation, embedding, and the issue-6 small cases it wins (softmax, rmsnorm, GELU, swiglu).
It is what our kernels are measured against at the small and odd sizes, so reading its tiling is
the first step when it wins. From the repo root, on a
CUDA machine:

    TORCH_LOGS=output_code python scripts/tune/inductor_kernels.py [--out DIR] 2> code.log

code.log gets the generated source (Inductor's output_code log, each case after a line naming it);
DIR/launches.json, per case, each kernel's name, grid, block, registers, shared memory and time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import torch

from solbench.torch_ops import embedding as Em
from solbench.torch_ops import layout as Lay
from solbench.torch_ops import pointwise as Pw
from solbench.torch_ops import quant as Qu
from solbench.torch_ops import rows as Rw


def cases() -> dict[str, tuple[Callable, tuple]]:
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device="cuda").to(dtype)

    scale = torch.tensor(0.01, device="cuda")
    return {
        "transpose_bf16_1024x1024": (Lay.transpose, (rnd(1024, 1024),)),
        "transpose_bf16_4095x4097": (Lay.transpose, (rnd(4095, 4097),)),
        "transpose_batched_bf16_16x256x256": (Lay.transpose_last2, (rnd(16, 256, 256),)),
        "transpose_batched_bf16_7x129x1000": (Lay.transpose_last2, (rnd(7, 129, 1000),)),
        "fp8_quant_bf16_4096x1024": (Qu.fp8_quant, (rnd(4096, 1024), scale)),
        "embedding_bf16_4096x1024": (Em.embedding, (rnd(32000, 1024), torch.randint(0, 32000, (4096,), device="cuda"))),
        "embedding_fp32_4096x1024": (Em.embedding, (rnd(32000, 1024, dtype=torch.float32),
                                                    torch.randint(0, 32000, (4096,), device="cuda"))),
        # the issue-6 families' small cases that torch.compile wins (docs/PERF.md, stage small)
        "softmax_bf16_4096x1024": (lambda x: torch.softmax(x, dim=-1), (rnd(4096, 1024),)),
        "rmsnorm_bf16_4096x1024": (lambda x, w: Rw.rmsnorm(x, w, eps=1e-6), (rnd(4096, 1024), rnd(1024))),
        "gelu_fp32_1024x1024": (torch.nn.functional.gelu, (rnd(1024, 1024, dtype=torch.float32),)),
        "swiglu_fp32_1024x1024": (Pw.swiglu, (rnd(1024, 1024, dtype=torch.float32),
                                              rnd(1024, 1024, dtype=torch.float32))),
    }


def launches(fn: Callable, args: tuple, trace: Path) -> list[dict]:
    """The kernels of one call, with the launch dims the profiler's trace records."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text()).get("traceEvents", [])
    trace.unlink()
    keep = ("grid", "block", "registers per thread", "shared memory")
    return [{"name": e["name"], "us": e.get("dur"), **{k: e.get("args", {}).get(k) for k in keep}}
            for e in events if e.get("cat") == "kernel"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("inductor_kernels"))
    ns = ap.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name, (fn, args) in cases().items():
        torch._dynamo.reset()
        print(f"==== case {name}", file=sys.stderr, flush=True)
        compiled = torch.compile(fn, dynamic=False)
        for _ in range(3):
            compiled(*args)
        summary[name] = launches(compiled, args, ns.out / "trace.json")
        print(name, summary[name])
    (ns.out / "launches.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
