"""Fault-injection ops for testing the service: only served with `solbench serve --test-ops`, never by default.

- test_raise: the implementation raises (the request gets a 500; the worker and the server carry on);
- test_fault: on CUDA a kernel stores far outside its buffer, a sticky illegal-address error that leaves
  the CUDA context unusable, so the worker must be replaced; on a CPU the worker process is killed by
  SIGSEGV, which exercises the same restart;
- test_sleep: sleeps `ms` milliseconds, then copies its input (fills the queue; trips the op timeout).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from solbench.spec import OpSpec, parse_text

_TEMPLATE = """\
op: {op}
summary: "test-only ({what}); served only with solbench serve --test-ops"
cases: [{{N: 16{extra_case}}}]
dtypes: [float32]
inputs: {{x: {{shape: [N]}}}}
outputs: {{y: {{shape: [N]}}}}
flops: 0
bytes: auto
compute: simt
reference: {{fn: "solbench.serve.faults:copy"}}
baselines: {{eager: {{fn: "solbench.serve.faults:{cpu_fn}"{kwargs}}}}}
impls: {{cuda: {{fn: "solbench.serve.faults:{cuda_fn}", device: cuda{kwargs}}}}}
tolerance: {{float32: {{atol: 0, rtol: 0}}}}
"""

_OPS = {
    "test_raise": dict(what="raises", cpu_fn="raise_error", cuda_fn="raise_error", extra_case="", kwargs=""),
    "test_fault": dict(what="sticky CUDA error / worker crash", cpu_fn="crash_worker", cuda_fn="illegal_address",
                       extra_case="", kwargs=""),
    "test_sleep": dict(what="sleeps ms milliseconds", cpu_fn="sleep_copy", cuda_fn="sleep_copy",
                       extra_case=", ms: 0", kwargs=', kwargs: {ms: "=ms"}'),
}


def fault_specs() -> list[OpSpec]:
    return [parse_text(_TEMPLATE.format(op=op, **v), Path(f"<serve --test-ops>/{op}.yaml")) for op, v in _OPS.items()]


def copy(x: Any) -> Any:
    return x.clone()


def raise_error(x: Any) -> Any:
    raise RuntimeError("test_raise: this implementation always raises (a deliberate fault)")


def sleep_copy(x: Any, ms: int = 0) -> Any:
    time.sleep(ms / 1000)
    return x.clone()


def crash_worker(x: Any) -> Any:
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)       # the signal arrives; never returns
    return x


def illegal_address(x: Any) -> Any:
    """Store 1 TiB past the output buffer: cudaErrorIllegalAddress, sticky for the whole context."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def store_far(ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(ptr + i + (1 << 40), tl.full([BLOCK], 1.0, tl.float32), mask=i < n)

    y = torch.empty_like(x)
    store_far[(triton.cdiv(x.numel(), 128),)](y, x.numel(), BLOCK=128)
    torch.cuda.synchronize()
    return y
