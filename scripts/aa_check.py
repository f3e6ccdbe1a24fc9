"""A/A check: two runs of the same cases must agree within their own reported noise.

    python scripts/aa_check.py RESULTS_A RESULTS_B

Per case (op, case, dtype, impl, status ok in both): both medians, the relative difference and the
combined noise sqrt(rse_a^2 + rse_b^2), where rse is the record's `time_s.rse`: the same definition the
harness reports (within-run noise, SM-clock spread, the events tare's error and the per-device
run-to-run floor, in quadrature; see solbench/measure/noise.py). A pair fails when |difference| > 3 x combined
(no extra allowance: the floor is part of each run's reported noise). Exit 1 on any failure, when the
files share no measured case, or when they come from a harness whose rse lacked the run-to-run part.

It also estimates the run-to-run floor from this pair: the excess of the squared differences over the
noise the runs could see themselves, floor^2 = mean(diff^2 - seen_a^2 - seen_b^2) / 2 (seen = rse without
its floor part). If that exceeds the floor the records used, the floor constant is too small for this
device and should be raised (solbench.measure.noise.RUN_TO_RUN_FLOOR).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from solbench.results import Record, load_records

SIGMAS = 3.0


def _floor(r: Record) -> float:
    noise = (r.telemetry or {}).get("noise") or {}
    return float(noise.get("floor") or 0.0)


def main(a_path: Path, b_path: Path) -> int:
    a = {r.key: r for r in load_records(a_path) if r.status == "ok" and r.time_s}
    b = {r.key: r for r in load_records(b_path) if r.status == "ok" and r.time_s}
    keys = sorted(set(a) & set(b))
    if not keys:
        print("no case measured (status ok) in both files")
        return 1
    old = [k for k in keys if "rse_within" not in a[k].time_s or "rse_within" not in b[k].time_s]
    if old:
        print(f"{len(old)} case(s) come from a harness whose rse was within-run only: re-run both files")
        return 1
    bad = 0
    excess, floors = [], []
    print(f"{'op':<10} {'case':<22} {'dtype':<9} {'impl':<9} {'A us':>10} {'B us':>10} {'diff %':>7} "
          f"{'noise %':>7} {'limit %':>7}  verdict")
    for k in keys:
        ma, mb = a[k].time_s["median"], b[k].time_s["median"]
        ra, rb = a[k].time_s["rse"], b[k].time_s["rse"]
        diff = (mb - ma) / ma
        noise = math.sqrt(ra ** 2 + rb ** 2)
        limit = SIGMAS * noise
        ok = abs(diff) <= limit
        bad += not ok
        fa, fb = _floor(a[k]), _floor(b[k])
        seen = max(ra ** 2 - fa ** 2, 0.0) + max(rb ** 2 - fb ** 2, 0.0)
        excess.append(diff ** 2 - seen)
        floors.append(max(fa, fb))
        op, case, dtype, impl = k
        print(f"{op:<10} {case[:22]:<22} {dtype:<9} {impl:<9} {ma * 1e6:>10.2f} {mb * 1e6:>10.2f} "
              f"{diff * 100:>7.2f} {noise * 100:>7.2f} {limit * 100:>7.2f}  {'ok' if ok else 'DIFFERS'}")
    only = sorted(set(a) ^ set(b))
    if only:
        print(f"{len(only)} case(s) measured in only one file (not compared)")
    est = math.sqrt(max(sum(excess) / len(excess) / 2, 0.0))
    used = max(floors)
    print(f"run-to-run floor: records used {used:.2%}; this pair estimates {est:.2%} per run "
          f"(from {len(keys)} cases{', a rough estimate' if len(keys) < 10 else ''})"
          + ("" if est <= used else ": the floor constant is too small for this device"))
    print(f"{len(keys) - bad}/{len(keys)} within noise")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/aa_check.py RESULTS_A RESULTS_B")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
