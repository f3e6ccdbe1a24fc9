"""Every timer of solbench.measure on three calls, through bench(), with triton's do_bench beside it.

Usage: python scripts/dev/measure_table.py OUT.json   (on a GPU machine; about a minute)
Prints a short table: call, timer, median, noise, samples, target reached, cross-check, ratio to CUPTI.
"""

from __future__ import annotations

import json
import sys
import traceback

import torch

from solbench.measure import TimerCache, bench
from solbench.nvml import device_facts


def calls() -> dict[str, tuple]:
    g = torch.Generator(device="cuda").manual_seed(0)
    big = [torch.randn(2**24, device="cuda", generator=g) for _ in range(2)]
    small = [torch.randn(2**18, device="cuda", generator=g) for _ in range(2)]
    a, b = (torch.randn(4096, 4096, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    return {"add fp32 2^24 (192 MiB)": (lambda: torch.add(*big), 3 * 4 * 2**24, 0.0),
            "add fp32 2^18 (3 MiB)": (lambda: torch.add(*small), 3 * 4 * 2**18, 0.0),
            "bf16 gemm 4096^3": (lambda: a @ b, 3 * 2 * 4096**2, 2 * 4096**3)}


def do_bench_s(fn) -> float | None:
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    return do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3


def main(out_path: str) -> int:
    cache, rows, failed = TimerCache(), [], 0
    for name, (fn, nbytes, flops) in calls().items():
        found = {}
        for timer in ("cupti", "events", "graph", "wall"):
            try:
                m = bench(fn, timer=timer, budget_s=1.0, cache=cache)
            except Exception as exc:  # one timer failing must not lose the others
                failed += 1
                print(f"{name} {timer}: {type(exc).__name__}: {exc}")
                traceback.print_exc(file=sys.stderr)
                continue
            found[timer] = m
            rows.append({"call": name, "timer": timer, "median_s": m.stats.median, "rse": m.stats.rse,
                         "rse_within": m.time_json()["rse_within"], "n": m.stats.n, "reached": m.reached_target,
                         "cross_check": m.cross_check, "overhead_s": m.overhead_s, "notes": m.notes,
                         "invalid": m.invalid, "gb_s": nbytes / m.stats.median / 1e9,
                         "tflop_s": flops / m.stats.median / 1e12 if flops else None})
        t = do_bench_s(fn)
        if t is not None:
            rows.append({"call": name, "timer": "triton do_bench", "median_s": t, "gb_s": nbytes / t / 1e9,
                         "tflop_s": flops / t / 1e12 if flops else None})
        ref = found.get("cupti")
        for r in rows:
            if r["call"] == name and ref is not None:
                r["vs_cupti"] = r["median_s"] / ref.stats.median
    with open(out_path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "nvml": device_facts(0), "rows": rows}, f, indent=1)
    print(f"{'call':<24} {'timer':<15} {'median':>10} {'rse':>6} {'n':>5} {'tgt':>4} {'xchk':>5} "
          f"{'GB/s':>7} {'TFLOP/s':>8} {'/cupti':>7}")
    for r in rows:
        xc = r.get("cross_check")
        print(f"{r['call']:<24} {r['timer']:<15} {r['median_s'] * 1e6:>8.2f}us "
              f"{r['rse'] * 100 if 'rse' in r else float('nan'):>5.2f}% {r.get('n', 0):>5} "
              f"{'yes' if r.get('reached') else '-':>4} {('ok' if xc['ok'] else 'BAD') if xc else '-':>5} "
              f"{r['gb_s']:>7.0f} {r['tflop_s'] or 0:>8.1f} {r.get('vs_cupti', float('nan')):>7.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "measure_table.json"))
