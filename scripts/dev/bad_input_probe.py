"""Which bad inputs crash the compiled ops (device diagnosis): each call in its own process.

python scripts/dev/bad_input_probe.py  (LD_PRELOAD=segv.so for native stacks of a crash)
"""
from __future__ import annotations

import os
import subprocess
import sys

SETUP = """
import torch, kernels_ext
kernels_ext.ensure_loaded()
K = torch.ops.solbench_kernels
D = "cuda"
x = torch.randn(4, 8, device=D)
"""
CASES = {
    "add dtype (TypeError, generated)": "K.add(x.double(), x.double())",
    "add shapes (ValueError, generated)": "K.add(x, x[:, :4].contiguous())",
    "mul dtypes (TypeError, generated)": "K.mul(x, x.bfloat16())",
    "add devices (ValueError, generated)": "K.add(x, x.cpu())",
    "softmax not contiguous (ValueError, generated)": "K.softmax(x.t())",
    "softmax cpu (ValueError, generated)": "K.softmax(torch.randn(4, 8))",
    "rope transposed (ValueError, custom)": "K.rope(torch.randn(4,8,2,device=D).transpose(1,2), torch.randn(4,1,8,device=D), torch.randn(4,8,device=D), True)",
    "rope_inplace expanded (RuntimeError, custom)": "K.rope_inplace(torch.randn(4,1,8,device=D).expand(4,2,8), torch.randn(4,1,8,device=D), torch.randn(4,8,device=D), True)",
    "attention scale (ValueError, custom)": "q=torch.randn(1,4,8,64,device=D,dtype=torch.bfloat16); K.attention(q,q,q,False,-1.0)",
    "gemm_wgmma K%8 (ValueError, custom)": "a=torch.randn(64,4100,device=D,dtype=torch.bfloat16); K.gemm_wgmma(a,a,'auto')",
    "python ValueError via TORCH_CHECK_VALUE in aten": "torch.nn.functional.embedding(torch.tensor([1]), torch.randn(2,2).t().t(), max_norm=-1)",
}


def main() -> int:
    crashed = 0
    for name, stmt in CASES.items():
        code = SETUP + f"try:\n    {stmt}\n    print('RESULT returned')\nexcept Exception as e:\n    print('RESULT', type(e).__name__, str(e).splitlines()[0][:140])\n"
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ), check=False)
        line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT")), "")
        print(f"{name:50} rc={p.returncode:4} {line}")
        if p.returncode != 0:
            crashed += 1
            print("   stderr tail:", "\n   ".join(p.stderr.splitlines()[-25:]))
    return 1 if crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
