"""Run families_bench.py's own logic on a CPU, before the one GPU run counts.

The kernels are replaced by stand-ins built from the PyTorch references (with the kernels' output
conventions: fp32 losses, NaN rows for bad indices, IndexError when checked), cases are cut to at
most 2^22 elements, timing is the wall clock and torch.compile is left out. A stand-in that is
wrong on purpose (`--break rope`, ...) must make the driver report failures: the checks can fail.

    .venv/bin/python scripts/dev/families_dryrun.py [--break FAMILY]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import families_bench as fb  # noqa: E402

from solbench.torch_ops import histogram as Hs  # noqa: E402
from solbench.torch_ops import loss as L  # noqa: E402
from solbench.torch_ops import nms as Nm  # noqa: E402
from solbench.torch_ops import quant as Q  # noqa: E402
from solbench.torch_ops import rope as R  # noqa: E402


class StandIns:
    """The kernels' contracts, computed by the references."""

    def __init__(self, broken: str | None):
        self.broken = broken

    def _spoil(self, family: str, t: torch.Tensor) -> torch.Tensor:
        if self.broken != family or t.numel() == 0:
            return t
        t = t.clone()
        flat = t.view(-1)
        flat[flat.numel() // 2] = flat[flat.numel() // 2] + (1 if not t.is_floating_point() else 0.5)
        return t

    def rope(self, q, k, cs, neox=True):
        a, b = R.rope_reference(q.double(), k.double(), cs.double(), neox)
        return self._spoil("rope", a.to(q.dtype)), b.to(k.dtype)

    def rope_inplace(self, q, k, cs, neox=True):
        a, b = self.rope(q, k, cs, neox)
        q.copy_(a)
        k.copy_(b)
        return q, k

    def transpose(self, x):
        return self._spoil("transpose", x.transpose(-2, -1).contiguous())

    def cross_entropy(self, logits, target, ignore_index=-100, reduction="mean"):
        bad = ((target < 0) | (target >= logits.shape[1])) & (target != ignore_index)
        safe = torch.where(bad, torch.zeros_like(target), target)  # ignored rows keep ignore_index
        out = L.cross_entropy_reference(logits.double(), safe, ignore_index, "none")
        out = torch.where(bad, torch.full_like(out, math.nan), out)
        counted = target != ignore_index
        if reduction == "mean":
            out = out.sum() / counted.sum()
        elif reduction == "sum":
            out = out.sum()
        return self._spoil("cross_entropy", out.float().reshape(out.shape))

    def embedding(self, table, indices, check=True):
        bad = (indices < 0) | (indices >= table.shape[0])
        out = F.embedding(indices.clamp(0, table.shape[0] - 1), table)
        out[bad] = math.nan
        if check and bool(bad.any()):
            last = int(bad.reshape(-1).nonzero().max())
            raise IndexError(f"embedding: {int(bad.sum())} of {indices.numel()} indices out of range for a table "
                             f"of {table.shape[0]} rows, e.g. indices.flatten()[{last}] = "
                             f"{int(indices.reshape(-1)[last])}")
        return self._spoil("embedding", out)

    def histogram(self, x, bins):
        return self._spoil("histogram", Hs.histogram_reference(x, bins))

    def fp8_quant(self, x, scale):
        q = Q.fp8_quant(x, scale)
        return self._spoil_fp8(q)

    def fp8_quant_dynamic(self, x):
        q, s = Q.fp8_quant_dynamic(x)
        return self._spoil_fp8(q), s

    def fp8_quant_rows(self, x):
        q, s = Q.fp8_quant_rows(x)
        return self._spoil_fp8(q), s

    def fp8_dequant(self, q, scale):
        return self._spoil("quant", Q.fp8_dequant(q, scale))

    def _spoil_fp8(self, q):
        if self.broken != "quant":
            return q
        b = q.view(torch.uint8).clone()
        b.view(-1)[0] ^= 1
        return b.view(torch.float8_e4m3fn)

    def gemv(self, a, x, variant="simt"):
        return self._spoil("gemv", (x.double() @ a.double().t()).to(a.dtype))

    def nms(self, boxes, scores, thr):
        keep = Nm.nms_loop(boxes, scores, thr)
        return self._spoil("nms", keep)


class CpuCtx(fb.Ctx):
    def bench(self, fn):
        start = time.perf_counter()
        for _ in range(2):
            fn()
        return (time.perf_counter() - start) / 2 * 1e3

    def compile(self, key, fn):
        return fn  # torch.compile on two CPU cores would take most of the dry run


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--break", dest="broken", default=None, help="a family whose stand-in is wrong on purpose")
    p.add_argument("--families", default=",".join(fb.FAMILIES))
    p.add_argument("--max-elements", type=float, default=float(1 << 22), help="cases above this are left out")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        c = CpuCtx(StandIns(a.broken), out, time.time() + 3600, dev="cpu", max_elements=a.max_elements)
        for fam in a.families.split(","):
            c.emit({"event": "start", "family": fam})
            c.start_family()
            fb.RUNNERS[fam](c)
            c.emit({"event": "done", "family": fam})
        ev = fb.events(out)
    records = [{k: v for k, v in e.items() if k != "event"} for e in ev if e.get("event") == "record"]
    fb.print_report(records, [], [e["gbps"] for e in ev if e.get("event") == "copy_bw"])
    failed = [r for r in records if r.get("correct") is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
