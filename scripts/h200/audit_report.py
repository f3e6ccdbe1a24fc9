"""Short printouts for scripts/h200/audit.sh (the device returns only the last 12,000 characters).

    python3 scripts/h200/audit_report.py summary AUDIT.json    # one line per op, the checks that matter
    python3 scripts/h200/audit_report.py nvtx RAW.csv           # which kernels ran in which NVTX ranges
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections import Counter
from pathlib import Path


def summary(path: Path) -> int:
    a = json.loads(path.read_text())
    s = a["session"]
    print(f"ncu {s['version']}  reader {s['reader']}  selection {s['selection']} ({s['nvtx_filter']})  "
          f"metrics {len(s['metrics'])}: tensor {[m for m in s['metrics'] if 'tensor' in m]}")
    for note in s.get("notes", []):
        print("note:", note)
    print(f"{'op':<20} {'case':<34} {'bytes':<8} {'ratio':>6} {'best':<10} {'flops':<10} {'ratio':>6}")
    calls = a["calls"]
    for o in a["ops"]:
        def best(kind: str, impl: str | None) -> str:
            c = next((c for c in calls if c["op"] == o["op"] and c["impl"] == impl and c["case"] == o["case"]), None)
            r = c and c[f"{kind}_ratio"]
            return f"{r:6.2f}" if r is not None else "     -"
        print(f"{o['op']:<20} {o['case'][:34]:<34} {o['bytes']['verdict']:<8} {best('bytes', o['best_bytes'])} "
              f"{str(o['best_bytes'])[:10]:<10} {o['flops']['verdict']:<10} {best('flops', o['best_flops'])}")
    flagged = [(o["op"], w, o[w]["reason"]) for o in a["ops"] for w in ("bytes", "flops")
               if o[w]["verdict"] not in ("ok", "not-judged", "n/a")]
    for op, what, reason in flagged:
        print(f"  {op} {what}: {reason[:300]}")
    for c in calls:
        if c["error"]:
            print(f"  not counted: {c['op']} {c['impl']}: {c['error'][:200]}")
    gemm = [c for c in calls if c["op"] == "gemm" and c["impl"] == "eager" and c["counters"]]
    for c in gemm:   # the tensor-op unit check: cuBLAS executes exactly 2*M*N*K
        k = c["counters"]
        print(f"tensor-op unit check: gemm eager {c['dtype']} {c['case']}: counted tensor {k['flops_tensor']:.4g} "
              f"+ simt {k['flops_simt']:.4g} vs 2MNK {c['spec_flops']:.4g} -> ratio {c['flops_ratio']:.3f}")
    extra = Counter(n for c in calls if c["counters"] for n in c["counters"]["kernel_names"]
                    if any(w in n for w in ("distribution", "normal", "uniform", "randperm")))
    print("input-generation kernels among the counted ones (should be none):", dict(extra) or "none")
    print(f"summary: {a['summary']}")
    return 0


def nvtx(path: Path) -> int:
    """Kernels of a `run --nvtx` profiled between cudaProfilerStart/Stop, with their NVTX stacks."""
    rows = list(csv.reader(io.StringIO(path.read_text(errors="replace"))))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if start is None:
        print("no kernels in the report (no header row):", path.read_text()[:500])
        return 1
    header = rows[start]
    name = header.index("Kernel Name")
    cols = [i for i, h in enumerate(header) if "push/pop" in h.lower() or "nvtx" in h.lower()]
    kernels = [r for r in rows[start + 1:] if r and r[0].isdigit()]
    print(f"{len(kernels)} kernels profiled inside the timed windows (cudaProfilerStart/Stop); NVTX columns: "
          f"{[header[i] for i in cols]}")
    seen = Counter((r[name][:70], " | ".join(r[i][:160] for i in cols)) for r in kernels)
    for (k, stack), n in seen.most_common(12):
        print(f"  {n:3d} x {k}\n        {stack}")
    return 0


if __name__ == "__main__":
    what, arg = sys.argv[1], Path(sys.argv[2])
    sys.exit(summary(arg) if what == "summary" else nvtx(arg))
