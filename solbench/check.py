"""Is an output right? Compared with a higher-precision reference, per-dtype tolerances.

An output passes when every element satisfies |out - ref| <= atol + rtol * |ref| (elementwise
tolerance) and/or ||out - ref|| / ||ref|| <= norm (normwise, for long dot products where a few
elements near zero make elementwise relative errors meaningless). NaN or Inf always fails, and so
does a wrong shape. A tolerance so loose that an all-zero output would pass is a spec error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from solbench.spec import Tolerance


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    max_abs_err: float
    max_rel_err: float
    norm_rel_err: float
    message: str = ""

    @staticmethod
    def worst(results: Sequence["CheckResult"]) -> "CheckResult":
        bad = [r for r in results if not r.ok]
        pick = bad[0] if bad else max(results, key=lambda r: r.norm_rel_err)
        return CheckResult(
            ok=not bad,
            max_abs_err=max(r.max_abs_err for r in results),
            max_rel_err=max(r.max_rel_err for r in results),
            norm_rel_err=max(r.norm_rel_err for r in results),
            message=pick.message,
        )


def as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def compare(out: Any, ref: Any, tol: Tolerance, name: str = "output") -> CheckResult:
    import torch

    if not isinstance(out, torch.Tensor):
        return CheckResult(False, math.inf, math.inf, math.inf, f"{name}: expected a tensor, got {type(out).__name__}")
    if tuple(out.shape) != tuple(ref.shape):
        return CheckResult(False, math.inf, math.inf, math.inf,
                           f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64).to(o.device)
    if not torch.isfinite(o).all():
        bad = int((~torch.isfinite(o)).sum())
        return CheckResult(False, math.inf, math.inf, math.inf, f"{name}: {bad} NaN/Inf values")
    diff = (o - r).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / r.abs().clamp_min(1e-30)).max()) if diff.numel() else 0.0
    ref_norm = float(torch.linalg.vector_norm(r))
    norm_rel = float(torch.linalg.vector_norm(o - r)) / ref_norm if ref_norm > 0 else max_abs
    problems = []
    if tol.atol is not None:
        excess = diff - (tol.atol + tol.rtol * r.abs())
        n_bad = int((excess > 0).sum())
        if n_bad:
            where = int(excess.argmax())
            problems.append(f"{n_bad} of {diff.numel()} elements outside atol={tol.atol:g} rtol={tol.rtol:g} "
                            f"(worst at flat index {where}: got {float(o.flatten()[where]):.6g}, "
                            f"expected {float(r.flatten()[where]):.6g})")
    if tol.norm is not None and norm_rel > tol.norm:
        problems.append(f"normwise relative error {norm_rel:.3g} > {tol.norm:g}")
    message = f"{name}: " + "; ".join(problems) if problems else ""
    return CheckResult(not problems, max_abs, max_rel, norm_rel, message)


def compare_all(outs: Any, refs: Any, tol: Tolerance, names: Sequence[str]) -> CheckResult:
    outs, refs = as_tuple(outs), as_tuple(refs)
    if len(outs) != len(refs):
        return CheckResult(False, math.inf, math.inf, math.inf,
                           f"returned {len(outs)} outputs, expected {len(refs)} ({', '.join(names)})")
    return CheckResult.worst([compare(o, r, tol, n) for o, r, n in zip(outs, refs, names)])


def zeros_would_pass(refs: Any, tol: Tolerance) -> bool:
    """True when the tolerance is so loose that an all-zero output would be called correct."""
    import torch

    return all(compare(torch.zeros_like(r), r, tol).ok for r in as_tuple(refs))
