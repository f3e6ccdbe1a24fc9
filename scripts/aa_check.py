"""A/A check: two runs of the same cases must agree within their own reported noise.

    python scripts/aa_check.py RESULTS_A RESULTS_B

Per case (op, case, dtype, impl, status ok in both): both medians, the relative difference and the
combined noise sqrt(rse_a^2 + rse_b^2). A pair fails when |difference| > 3 x combined + 1%. Exit 1 on any
failure (or when the files share no measured case).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from solbench.results import load_records

SIGMAS = 3.0
FLOOR = 0.01


def main(a_path: Path, b_path: Path) -> int:
    a = {r.key: r for r in load_records(a_path) if r.status == "ok" and r.time_s}
    b = {r.key: r for r in load_records(b_path) if r.status == "ok" and r.time_s}
    keys = sorted(set(a) & set(b))
    if not keys:
        print("no case measured (status ok) in both files")
        return 1
    bad = 0
    print(f"{'op':<10} {'case':<22} {'dtype':<9} {'impl':<9} {'A us':>10} {'B us':>10} {'diff %':>7} "
          f"{'noise %':>7} {'limit %':>7}  verdict")
    for k in keys:
        ma, mb = a[k].time_s["median"], b[k].time_s["median"]
        ra, rb = a[k].time_s.get("rse") or 0.0, b[k].time_s.get("rse") or 0.0
        diff = (mb - ma) / ma
        noise = math.sqrt(ra ** 2 + rb ** 2)
        limit = SIGMAS * noise + FLOOR
        ok = abs(diff) <= limit
        bad += not ok
        op, case, dtype, impl = k
        print(f"{op:<10} {case[:22]:<22} {dtype:<9} {impl:<9} {ma * 1e6:>10.2f} {mb * 1e6:>10.2f} "
              f"{diff * 100:>7.2f} {noise * 100:>7.2f} {limit * 100:>7.2f}  {'ok' if ok else 'DIFFERS'}")
    only = sorted(set(a) ^ set(b))
    if only:
        print(f"{len(only)} case(s) measured in only one file (not compared)")
    print(f"{len(keys) - bad}/{len(keys)} within noise")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/aa_check.py RESULTS_A RESULTS_B")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
