"""Issue 6's targets, checked from a results file: `python scripts/issue6_table.py RESULTS CALIBRATION`.

Prints the Markdown table of docs/PERF.md: each custom kernel's SOL against the measured copy
bandwidth (the issue's yardstick; the harness itself scores against the best measured
direction), its speed against eager and torch.compile from the same run, and a verdict.
Exits 1 if any kernel misses its target or is not `ok`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MAPS = {"add", "gelu", "silu", "swiglu"}
ROWS = {"row_sum", "softmax", "rmsnorm", "layernorm"}
LARGE_BYTES = 256 * 2**20  # the issue scores tensors moving at least 256 MiB


def verdict(op: str, rec: dict, eager: float, compiled: float, copy_sol: float) -> tuple[str, str]:
    """(target, verdict) for one custom-kernel record."""
    if rec["status"] != "ok":
        return "-", f"FAILS ({rec['status']})"
    t = rec["time_s"]["median"]
    large = rec["bytes"] >= LARGE_BYTES
    if op in MAPS:
        if not large:
            return "-", "reported"
        return "0.92", "meets" if copy_sol >= 0.92 else "MISSES"
    if not large:
        return "not slower than eager", "meets" if t <= eager else "MISSES"
    ok = copy_sol >= 0.90 and t <= eager and t <= compiled
    return "0.90, beats eager and compiled", "meets" if ok else "MISSES"


def main(results: str, calibration: str) -> int:
    run = json.loads(Path(results).read_text())
    copy_bw = json.loads(Path(calibration).read_text())["memory_bandwidth"]
    recs = run["records"]
    median = {(r["op"], r["case"], r["dtype"], r["impl"]): r["time_s"]["median"]
              for r in recs if r["status"] == "ok"}
    print(f"copy bandwidth {copy_bw / 1e9:,.0f} GB/s; harness ceiling "
          f"{run['peaks']['memory_bandwidth'] / 1e9:,.0f} GB/s\n")
    print("| op | case | dtype | eager | compiled | ours | ours SOL (copy) | harness SOL | target "
          "| vs eager | vs compiled | verdict |")
    print("| " + " | ".join(["---"] * 12) + " |")
    missed = 0
    for r in recs:
        if r["kind"] == "baseline" or r["op"] not in MAPS | ROWS:
            continue
        key = (r["op"], r["case"], r["dtype"])
        eager, compiled = median[(*key, "eager")], median[(*key, "compiled")]
        t = r["time_s"]["median"]
        copy_sol = r["t_sol_s"] * r["peak_bandwidth"] / copy_bw / t
        target, v = verdict(r["op"], r, eager, compiled, copy_sol)
        missed += v.startswith(("MISSES", "FAILS"))
        print(f"| {r['op']} | {r['case']} | {r['dtype']} | {eager * 1e6:.1f} us | "
              f"{compiled * 1e6:.1f} us | {t * 1e6:.1f} us | {copy_sol:.3f} | {r['sol']:.3f} | "
              f"{target} | {eager / t:.2f}x | {compiled / t:.2f}x | {v} |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
