"""Where does a short decode call's time go? Kernel by kernel, from the GPU's own timestamps.

    python scripts/tune/decode_timeline.py [--json FILE] [--iters N]

`attention_decode` at 4k-16k keys runs 6-7 us above what its bytes take at the bandwidth it reaches on
long caches (PERF.md, issue 14). The events timer sees only the sum. This puts each call under
torch.profiler (CUPTI activity records) after an L2 flush (`read` mode: the calls only read) and reports,
per call, the median over iterations of:
  - span: first kernel start to last kernel end, the GPU time the call occupies;
  - for each kernel of the call, in launch order: its start offset from the first kernel's start and
    its duration (so a gap between a split kernel and its combine shows as offset - previous end).
A plain read of the same bytes (kernels_ext.row_sum, ~98% of the copy bandwidth) and an empty-ish
kernel give the floors the decode calls are measured against.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile

from solbench.measure.l2flush import L2Flush, flush_bytes
from solbench.torch_ops.attention import sdpa

MiB = 2**20


@dataclass
class KernelStat:
    name: str
    start_us: float      # median offset from the call's first kernel start
    dur_us: float        # median duration


@dataclass
class Timeline:
    name: str
    bytes: int
    span_us: float
    kernels: list[KernelStat] = field(default_factory=list)

    def lines(self) -> list[str]:
        gbs = self.bytes / self.span_us / 1e3 if self.span_us else 0.0
        out = [f"{self.name:40} {self.bytes / MiB:7.1f} MiB  span {self.span_us:7.2f} us  {gbs:6.0f} GB/s"]
        out += [f"    +{k.start_us:7.2f} us  {k.dur_us:7.2f} us  {k.name[:90]}" for k in self.kernels]
        return out


def _bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def _kernel_events(prof: Any) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every GPU kernel, in start order."""
    evs = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start:
            evs.append((e.name, float(e.time_range.start), float(e.time_range.end)))
    return sorted(evs, key=lambda x: x[1])


def timeline(name: str, nbytes: int, fn: Callable[[], Any], flush: L2Flush, iters: int) -> Timeline:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as bare:   # the call's own kernels, by name
        fn()
        torch.cuda.synchronize()
    own = {n for n, _, _ in _kernel_events(bare)}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush()
            fn()
        torch.cuda.synchronize()
    groups: list[list[tuple[str, float, float]]] = []
    current: list[tuple[str, float, float]] = []
    for ev in _kernel_events(prof):
        if ev[0] in own:
            current.append(ev)
        elif current:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    groups = [g for g in groups if len(g) == len(groups[0])] if groups else []
    if not groups:
        return Timeline(name, nbytes, 0.0)
    span = statistics.median(g[-1][2] - g[0][1] for g in groups)
    kernels = [KernelStat(groups[0][i][0], statistics.median(g[i][1] - g[0][1] for g in groups),
                          statistics.median(g[i][2] - g[i][1] for g in groups)) for i in range(len(groups[0]))]
    return Timeline(name, nbytes, span, kernels)


def calls() -> dict[str, tuple[int, Callable[[], Any]]]:
    import kernels_ext

    kernels_ext.ensure_loaded()
    out: dict[str, tuple[int, Callable[[], Any]]] = {}
    tiny = _bf16(1024)
    out["floor: relu of 2 KiB"] = (tiny.nbytes, lambda: kernels_ext.relu(tiny))
    for sq, sk in ((1, 4096), (1, 16384), (1, 65536), (16, 16384)):
        q, k, v = _bf16(1, 64, sq, 128), _bf16(1, 8, sk, 128), _bf16(1, 8, sk, 128)
        kv = k.nbytes + v.nbytes
        out[f"decode {sq}x{sk} GQA8"] = (kv, lambda q=q, k=k, v=v: kernels_ext.attention_decode(q, k, v))
        if sq == 1 and sk <= 16384:
            for splits in (8, 32):
                out[f"decode {sq}x{sk} GQA8 splits={splits}"] = (
                    kv, lambda q=q, k=k, v=v, s=splits: kernels_ext.attention_decode(q, k, v, splits=s))
        out[f"cuDNN {sq}x{sk} GQA8"] = (kv, lambda q=q, k=k, v=v: sdpa(q, k, v, backend="cudnn"))
        rows = k.view(-1, 4096)
        out[f"row_sum of {sk}-key K (reference read, half the bytes)"] = (
            k.nbytes, lambda rows=rows: kernels_ext.row_sum(rows))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = L2Flush(flush_bytes(l2), mode="read")
    rows = []
    for name, (nbytes, fn) in calls().items():
        try:
            t = timeline(name, nbytes, fn, flush, args.iters)
        except Exception as exc:   # one failing call must not lose the others
            print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
            continue
        rows.append(t)
        print("\n".join(t.lines()), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                                         "timelines": [asdict(r) for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
