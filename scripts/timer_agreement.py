"""Do the three CUDA timers agree? Prints a table and writes JSON (run on a GPU machine).

    python scripts/timer_agreement.py OUT.json

For each kernel: the median per-call time of each timer (events, graph, cupti), its reported noise (rse,
the same field as a record's time_s.rse) and its ratio to CUPTI's device time. The events timer
subtracts its calibrated per-call tare (measured once for the whole script, as once per worker in a
run); the tare and its probes are printed and written. Acceptance: kernels of 20 us or more agree within
5% across timers; for the 3 MiB add the default timer (events) is within 25% of CUPTI. Exit 1 if either
fails.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from solbench import measure as timing
from solbench.telemetry import ClockMonitor

LONG_TOL = 0.05
SMALL_TOL = 0.25


def kernels() -> list[tuple[str, Callable[[int], Any], bool]]:
    """(name, call(i) rotating through 3 input sets, is_small)."""
    def rotating(make: Callable[[], tuple], fn: Callable[..., Any]) -> Callable[[int], Any]:
        sets = [make() for _ in range(3)]
        return lambda i: fn(*sets[i % 3])

    dev = "cuda"
    return [
        ("add fp32 2^18 (3 MiB)", rotating(lambda: (torch.randn(2**18, device=dev), torch.randn(2**18, device=dev)),
                                           torch.add), True),
        ("add fp32 2^24 (192 MiB)", rotating(lambda: (torch.randn(2**24, device=dev), torch.randn(2**24, device=dev)),
                                             torch.add), False),
        ("softmax fp32 8192x8192", rotating(lambda: (torch.randn(8192, 8192, device=dev),),
                                            lambda x: torch.softmax(x, -1)), False),
        ("gemm bf16 4096^3", rotating(lambda: (torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16),
                                               torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)),
                                      torch.matmul), False),
    ]


def main(out_path: Path) -> int:
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", None)
    monitor = ClockMonitor.open("cuda", 0)
    cache = timing.TimerCache()
    rows, ok = [], True
    for name, call, small in kernels():
        medians = {}
        for timer in ("cupti", "events", "graph"):
            cfg = timing.TimingConfig(timer=timer, budget_s=2.0, cross_check=False)
            monitor.reset()
            m = timing.measure(call, "cuda", cfg, l2, monitor.sm_max_mhz, monitor, cache)
            medians[timer] = m.stats.median
            rows.append({"kernel": name, "timer": timer, "median_s": m.stats.median, "rse": m.stats.rse,
                         "rse_within": m.noise.within if m.noise else None, "overhead_s": m.overhead_s,
                         "n": m.stats.n, "notes": m.notes})
        ref = medians["cupti"]
        for r in rows[-3:]:
            r["ratio_to_cupti"] = r["median_s"] / ref
            if small:
                r["pass"] = r["timer"] != "events" or abs(r["ratio_to_cupti"] - 1) <= SMALL_TOL
            else:
                r["pass"] = ref >= 20e-6 and abs(r["ratio_to_cupti"] - 1) <= LONG_TOL
            ok &= r["pass"]
    tares = [t.to_json() for t in cache.event_overhead.values()]
    for t in tares:
        probes = "; ".join(f"{p['probe']}: events {p['events_median_s'] * 1e6:.2f} / cupti "
                           f"{p['cupti_median_s'] * 1e6:.2f} us" for p in t["probes"])
        print(f"events tare: {t['overhead_s'] * 1e6:.2f} +- {t['se_s'] * 1e6:.2f} us subtracted per call "
              f"(floor {t['floor_s'] * 1e6:.2f} us; {probes}){'; NOTE ' + t['note'] if t['note'] else ''}")
    print(f"{'kernel':<26} {'timer':<7} {'median us':>10} {'rse %':>6} {'within%':>7} {'tare us':>7} "
          f"{'x cupti':>8}  verdict")
    for r in rows:
        within = f"{r['rse_within'] * 100:>7.2f}" if r["rse_within"] is not None else f"{'-':>7}"
        print(f"{r['kernel']:<26} {r['timer']:<7} {r['median_s'] * 1e6:>10.2f} {r['rse'] * 100:>6.2f} {within} "
              f"{r['overhead_s'] * 1e6:>7.2f} {r['ratio_to_cupti']:>8.3f}  {'PASS' if r['pass'] else 'FAIL'}")
    out_path.write_text(json.dumps({"device": props.name, "torch": torch.__version__, "rows": rows,
                                    "events_tare": tares, "pass": ok}, indent=1))
    print(f"{'ALL PASS' if ok else 'SOME FAIL'}; wrote {out_path}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/timer_agreement.py OUT.json")
    sys.exit(main(Path(sys.argv[1])))
