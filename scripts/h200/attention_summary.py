"""Short table of an attention results file (scripts/h200/attention_final.sh prints it last).

    python scripts/h200/attention_summary.py RESULTS.json

Prefill (attention): TFLOP/s per implementation, each kernel's ratio to cuDNN, and the targets
of issue 14 (flash_wgmma >= cuDNN at D 128, >= 0.95x at D 64; flash_mma >= 400 at D 128
non-causal). Decode (attention_decode): GB/s and SOL per implementation, and whether the best
kernel is >= 0.8 SOL and faster than every SDPA backend at SK >= 16k. A record that is not `ok`
shows its status.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solbench.results import Record, load_run  # noqa: E402

PREFILL_IMPLS = ("flash_wgmma", "flash_wgmma_persistent", "flash_mma", "auto", "cudnn", "flash", "efficient",
                 "flex", "default")
DECODE_IMPLS = ("decode", "flash_mma", "cudnn", "flash", "efficient", "flex", "default")
SDPA = ("cudnn", "flash", "efficient", "default")
HEADER = {"flash_wgmma_persistent": "wgmma_pers", "flash_wgmma": "wgmma", "flash_mma": "mma"}


def short_case(r: Record) -> str:
    p = r.params
    return (f"B{p['B']} H{p['H']}/{p['HKV']} {p['SQ']}x{p['SK']} D{p['D']}"
            f"{' c' if p.get('causal') else ''}{'' if r.dtype == 'bfloat16' else ' ' + r.dtype}")


def cell(r: Record | None, value: str) -> str:
    if r is None:
        return "-"
    return value if r.status == "ok" else r.status


def prefill_table(records: list[Record]) -> list[str]:
    cases = list(dict.fromkeys((r.case, r.dtype) for r in records))
    impls = [i for i in PREFILL_IMPLS if any(r.impl == i for r in records)]
    lines = ["attention (TFLOP/s; x = / cuDNN)", f"{'case':30s}" + "".join(f"{HEADER.get(i, i):>13s}" for i in impls)]
    for c in cases:
        by = {r.impl: r for r in records if (r.case, r.dtype) == c}
        cudnn = by.get("cudnn")
        row = f"{short_case(next(iter(by.values()))):30s}"
        for i in impls:
            r = by.get(i)
            text = f"{r.tflops:.0f}" if r is not None and r.tflops else ""
            if r is not None and r.status == "ok" and cudnn is not None and cudnn.status == "ok" and \
                    i not in SDPA and r.tflops and cudnn.tflops:
                text += f" {r.tflops / cudnn.tflops:.2f}x"
            row += f"{cell(r, text):>13s}"
        lines.append(row)
    return lines


def decode_table(records: list[Record]) -> list[str]:
    cases = list(dict.fromkeys((r.case, r.dtype) for r in records))
    impls = [i for i in DECODE_IMPLS if any(r.impl == i for r in records)]
    lines = ["attention_decode (GB/s, SOL)", f"{'case':30s}" + "".join(f"{HEADER.get(i, i):>13s}" for i in impls)
             + "  best SDPA"]
    for c in cases:
        by = {r.impl: r for r in records if (r.case, r.dtype) == c}
        row = f"{short_case(next(iter(by.values()))):30s}"
        for i in impls:
            r = by.get(i)
            text = f"{r.gbps:.0f} {r.sol:.2f}" if r is not None and r.gbps and r.sol is not None else ""
            row += f"{cell(r, text):>13s}"
        sdpa = [by[i] for i in SDPA if i in by and by[i].status == "ok" and by[i].time_s]
        ours = by.get("decode")
        if sdpa and ours is not None and ours.status == "ok" and ours.time_s:
            best = min(sdpa, key=lambda r: r.time_s["median"])
            row += f"  {best.impl}: decode {best.time_s['median'] / ours.time_s['median']:.2f}x as fast"
        lines.append(row)
    return lines


def main(path: str) -> int:
    run = load_run(Path(path))
    records = [r for r in run.records if r.case != "*"]
    failed = [r for r in records if r.status in ("failed", "error", "invalid")]
    out = prefill_table([r for r in records if r.op == "attention"])
    out += [""] + decode_table([r for r in records if r.op == "attention_decode"])
    out.append(f"\n{len(records)} records, {len(failed)} not ok"
               + "".join(f"\n  {r.op} {r.case} {r.dtype} {r.impl}: {r.status} {r.message[:100]}" for r in failed[:8]))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/h200/attention_summary.py RESULTS.json")
    raise SystemExit(main(sys.argv[1]))
