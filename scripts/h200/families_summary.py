"""Short table of issue 15's family results (scripts/h200/families_final.sh prints it last).

    python scripts/h200/families_summary.py RESULTS.json [--copy-gbps 4248]

One row per op and dtype for its small case (the spec's first), any case a target names, and its largest case (most bytes):
each kernel variant's time, its SOL against the measured copy bandwidth (the issue's yardstick;
the harness's own SOL is against the datasheet), and x = baseline time / ours for eager,
torch.compile and torchvision. Then every case of the file, odd sizes included, where a baseline
ran faster than our fastest implementation, each with whether the gap is beyond the two records'
noise (2 sigma of the difference, from each median's relative standard error, run-to-run variation
included: time_s.rse), and every record that is not `ok`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solbench.results import Record, load_run  # noqa: E402

OURS = ("cuda", "cuda_regs", "cuda_mma", "cuda_unchecked")
COPY_GBPS = 4248.0   # device-to-device copy measured with the v1 run (results/h200/dev/env_v1.txt)


def us(r: Record | None) -> float | None:
    return r.time_s["median"] * 1e6 if r is not None and r.status == "ok" and r.time_s else None


# Cases an issue's target names that are neither an op's first nor its largest (issue 15: NMS at 5k boxes).
TARGET_CASES = {"nms": ("N=5000",)}


def rows_of(records: list[Record]) -> list[tuple[str, str, str]]:
    """(op, dtype, case) of each op's first case, its TARGET_CASES and its case with the most bytes."""
    keys: list[tuple[str, str, str]] = []
    for op, dtype in dict.fromkeys((r.op, r.dtype) for r in records):
        mine = [r for r in records if (r.op, r.dtype) == (op, dtype)]
        first = mine[0].case
        largest = max(mine, key=lambda r: r.bytes or 0).case
        named = [c for c in TARGET_CASES.get(op, ()) if any(r.case == c for r in mine)]
        keys += [(op, dtype, c) for c in dict.fromkeys((first, *named, largest))]
    return keys


def table(records: list[Record], copy_gbps: float) -> list[str]:
    lines = [f"{'op':18s} {'case':30s} {'dtype':8s} {'ours us (SOL vs copy)':34s} "
             f"{'eager':>7s} {'x':>5s} {'comp':>7s} {'x':>5s}"]
    for op, dtype, case in rows_of(records):
        by = {r.impl: r for r in records if (r.op, r.dtype, r.case) == (op, dtype, case)}
        ours = [(i, by[i]) for i in OURS if i in by]
        best = min((us(r) for _, r in ours if us(r)), default=None)
        cells = []
        for name, r in ours:
            t = us(r)
            label = name.removeprefix("cuda").lstrip("_") or "cuda"
            if t is None:
                cells.append(f"{label} {r.status}")
            else:
                sol = (r.bytes or 0) / (t * 1e-6) / (copy_gbps * 1e9)
                cells.append(f"{label} {t:.1f} ({sol:.2f})")
        line = f"{op[:18]:18s} {case[:30]:30s} {dtype[:8]:8s} {', '.join(cells)[:34]:34s}"
        for base in (by.get("eager") or by.get("torchvision"), by.get("compiled")):
            t = us(base)
            line += f" {t:7.1f} {t / best:5.2f}" if t and best else f" {'-':>7s} {'-':>5s}"
        lines.append(line)
    return lines


def noise_note(ours: Record, base: Record) -> str:
    """Whether base's lead over ours exceeds 2 sigma of the log ratio of their medians."""
    rse = [r.time_s.get("rse") for r in (ours, base)]
    if any(v is None for v in rse):
        return ""
    two_sigma = 2 * math.hypot(*rse)
    gap = math.log(us(ours) / us(base))
    verdict = "beyond" if gap > two_sigma else "within"
    return f", {verdict} one run's noise: 2 sigma {100 * two_sigma:.1f}%"


def slower_cases(records: list[Record]) -> list[str]:
    """Every (op, case, dtype) where a baseline's median is below our fastest implementation's."""
    lines = []
    for op, case, dtype in dict.fromkeys((r.op, r.case, r.dtype) for r in records):
        by = {r.impl: r for r in records if (r.op, r.case, r.dtype) == (op, case, dtype)}
        timed = [by[i] for i in OURS if us(by.get(i))]
        if not timed:
            continue
        fastest = min(timed, key=us)
        best = us(fastest)
        for r in by.values():
            t = us(r)
            if r.is_baseline and t and t < best:
                lines.append(f"  {op} {case} {dtype}: ours {best:.2f} us, {r.impl} {t:.2f} us ({t / best:.2f}x"
                             f"{noise_note(fastest, r)})")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("results", type=Path)
    p.add_argument("--copy-gbps", type=float, default=COPY_GBPS)
    a = p.parse_args(argv)
    run = load_run(a.results)
    records = [r for r in run.records if r.case != "*"]
    bad = [r for r in records if r.status != "ok"]
    out = table(records, a.copy_gbps)
    out.append("x = baseline time / fastest of ours (above 1: ours is faster); eager column: torchvision for nms")
    slower = slower_cases(records)
    out.append(f"{len(slower)} cases where a baseline is faster than ours" + "".join(f"\n{line}" for line in slower))
    out.append(f"{len(records)} records, {len(bad)} not ok"
               + "".join(f"\n  {r.op} {r.case} {r.dtype} {r.impl}: {r.status} {r.message[:110]}" for r in bad[:10]))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
