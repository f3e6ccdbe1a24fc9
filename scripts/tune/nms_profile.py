"""Where an NMS call's time goes, ours against torchvision.ops.nms: wall time per call (the host
waits for the kept count either way), and one call's timeline from torch.profiler (host ops and
GPU kernels, microseconds from the call's start). From the repo root, on a CUDA machine:

    python scripts/tune/nms_profile.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import kernels_ext
from solbench.torch_ops import nms as Nm


def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(n)
    return (Nm.detection_boxes((n, 4), torch.float32, g, "cuda"), Nm.scores_uniform((n,), torch.float32, g, "cuda"))


def wall_us(fn, reps: int = 60) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def timeline(fn) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.time_range.elapsed_us() > 0]
    t0 = min(e.time_range.start for e in events)
    rows = []
    for e in sorted(events, key=lambda e: e.time_range.start):
        gpu = e.device_type == torch.autograd.DeviceType.CUDA
        rows.append({"name": e.name[:60], "gpu": gpu, "start_us": e.time_range.start - t0,
                     "dur_us": e.time_range.elapsed_us()})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import torchvision

    out = []
    for n in (1000, 5000, 20000):
        boxes, scores = inputs(n)
        impls = {"ours": lambda: kernels_ext.nms(boxes, scores, 0.5),
                 "torchvision": lambda: torchvision.ops.nms(boxes, scores, 0.5),
                 "sort only": lambda: scores.sort(0, descending=True)}
        for name, fn in impls.items():
            rec = {"n": n, "impl": name, "wall_us": wall_us(fn), "timeline": timeline(fn)}
            out.append(rec)
            print(f"N={n:6d} {name:12s} wall {rec['wall_us']:8.1f} us")
            if name != "sort only":
                for r in rec["timeline"]:
                    if r["gpu"] or r["dur_us"] > 3:
                        print(f"    {'GPU' if r['gpu'] else 'cpu'} {r['start_us']:8.1f} +{r['dur_us']:7.1f}  {r['name']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
