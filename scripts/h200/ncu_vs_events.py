"""Kernel time under Nsight Compute against solbench's own events timer, for the same calls: the audit's
ncu durations (results/h200/issue16/final/audit/audit.json: caches flushed by ncu, so each kernel starts
on a clean L2) beside the fastest committed `solbench run` median of the same (op, case, dtype, impl)
(events timer, L2 flushed by rewriting a buffer: the L2 is left full of dirty lines). Only records
flushed that way count (`telemetry.flush_mode` write, or unrecorded: the default before 2026-12-01), from
runs made before the audit (a kernel changed since would be compared with its old self).

If the rewrite flush charged its write-backs (up to the 60 MiB L2) to the timed call, a call that only
reads would show a larger gap than a copy-like call of the same size, by up to 60 MiB / 4.5 TB/s = 13 us.

    python scripts/h200/ncu_vs_events.py [AUDIT_JSON] [RESULTS_GLOB]
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20


def harness_medians(pattern: str, before: str = "9999") -> dict[tuple[str, str, str, str], float]:
    """The fastest events-timer median of every (op, case, dtype, impl) in the committed results files,
    among the records whose L2 was flushed by `write`, of runs created before `before` (ISO 8601)."""
    out: dict[tuple[str, str, str, str], float] = {}
    for f in sorted(glob.glob(pattern, recursive=True)):
        try:
            doc = json.loads(Path(f).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
            continue
        if str(doc.get("created", "")) >= before:
            continue
        for r in doc["records"]:
            if r.get("status") != "ok" or r.get("timer") != "events" or not r.get("time_s"):
                continue
            if ((r.get("telemetry") or {}).get("flush_mode") or "write") != "write":
                continue
            key = (r["op"], r["case"], r["dtype"], r["impl"])
            out[key] = min(out.get(key, float("inf")), r["time_s"]["median"])
    return out


def main(audit_path: str, pattern: str) -> int:
    audit = json.loads(Path(audit_path).read_text())
    medians = harness_medians(pattern, str(audit.get("created", "9999")))
    rows = []
    for c in audit["calls"]:
        n = c.get("counters") or {}
        key = (c["op"], c["case"], c["dtype"], c["impl"])
        if c.get("bound") != "memory" or not n.get("duration_s") or key not in medians:
            continue
        written = n.get("dram_write_bytes") or 0
        rows.append({"op": c["op"], "case": c["case"], "dtype": c["dtype"], "impl": c["impl"],
                     "read_mib": (n.get("dram_read_bytes") or 0) / MiB, "write_mib": written / MiB,
                     "ncu_us": n["duration_s"] * 1e6, "events_us": medians[key] * 1e6, "kernels": n.get("kernels"),
                     "reads_only": written < 0.05 * (n.get("dram_read_bytes") or 1)})
    print(f"{'op':18} {'case':36} {'impl':16} {'read MiB':>8} {'write MiB':>9} {'ncu us':>8} {'events us':>9} {'gap us':>7}")
    for r in sorted(rows, key=lambda r: (not r["reads_only"], r["read_mib"] + r["write_mib"])):
        print(f"{r['op'][:18]:18} {r['case'][:36]:36} {r['impl'][:16]:16} {r['read_mib']:8.0f} {r['write_mib']:9.0f} "
              f"{r['ncu_us']:8.1f} {r['events_us']:9.1f} {r['events_us'] - r['ncu_us']:7.1f}")
    for label, pick in (("calls that only read (DRAM writes < 5% of reads)", True), ("calls that also write", False)):
        gaps = [r["events_us"] - r["ncu_us"] for r in rows if r["reads_only"] == pick and r["kernels"] == 1]
        if gaps:
            print(f"{label}, one kernel each: median gap {statistics.median(gaps):.1f} us "
                  f"(range {min(gaps):.1f} .. {max(gaps):.1f}, {len(gaps)} calls)")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[0] if args else str(ROOT / "results/h200/issue16/final/audit/audit.json"),
                  args[1] if len(args) > 1 else str(ROOT / "results/h200/**/*.json")))
