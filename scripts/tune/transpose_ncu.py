"""The odd-size transposes under Nsight Compute: our automatic pick and our 32 x 32 ldsm block in
column order against torch.compile's Triton kernel (32 x 32 tiles, column order) on the same tensors (4095 x 4097 and 7 x 129 x 1000, bf16), where the compiled kernel is
faster. Each call is warmed up, then profiled once inside cudaProfilerStart/Stop. On a CUDA machine,
from the repo root:

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section Occupancy -o out python scripts/tune/transpose_ncu.py
    ncu --import out.ncu-rep --page details > out.txt
"""

from __future__ import annotations

import torch

import kernels_ext
from solbench.torch_ops import layout as Lay


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(4095, 4097), (7, 129, 1000)]
    for shape in shapes:
        x = torch.randn(*shape, generator=g, device="cuda").bfloat16()
        compiled = torch.compile(Lay.transpose_last2, dynamic=False)
        calls = {"ours": lambda: kernels_ext.transpose(x), "compiled": lambda: compiled(x),
                 # our 32 x 32 block in column order: Triton's tile and order, for a like-for-like look
                 "ldsm_32x32_columns": lambda: kernels_ext.transpose(x, "ldsm", 65536)}
        want = x.transpose(-2, -1).contiguous()
        for name, fn in calls.items():
            for _ in range(3):
                assert torch.equal(fn(), want), name
        torch.cuda.synchronize()
        for name, fn in calls.items():
            print(f"profiling {name} {shape}", flush=True)
            torch.cuda.cudart().cudaProfilerStart()
            fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
