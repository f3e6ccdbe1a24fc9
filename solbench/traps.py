"""Calling an implementation under suspicion: the checks that catch the cheats PRIOR_ART lists.

An implementation is bound to one case (`BoundCall`); its outputs must be plain tensors of the
spec's dtypes and match the reference. Beyond the first calls:
- inputs must come back unchanged (unless the spec says the op is in-place);
- the outputs of the *timed* iterations are checked too (right-first-call-only cheats);
- inputs rewritten in place (same pointers, new data) and a few scattered elements changed must give
  fresh, right answers (caches keyed on pointer, identity or an input fingerprint).
Each check returns the problem as text, or None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from solbench import check
from solbench.dtypes import matmul_precision, precision
from solbench.inputs import PROBE_ELEMENTS, CaseData, make_inputs, perturb, run_reference
from solbench.job import Case
from solbench.spec import OpSpec

REWRITE_SEED = 900          # input-set seeds of the cache probes, far from the timing sets'
PERTURB_SEED = 901


@dataclass
class BoundCall:
    """An implementation bound to a case: run it, check its outputs, report problems as text."""

    spec: OpSpec
    case: Case
    device: str
    seed: int
    fn: Callable[..., Any]
    kwargs: dict[str, Any]

    @property
    def tol(self) -> Any:
        return self.spec.tolerance[self.case.dtype]

    def args(self, s: tuple) -> tuple:
        # An in-place op gets copies, so the shared input sets stay as their references assume.
        return tuple(t.clone() for t in s) if self.spec.inplace else s

    def run_checked(self, s: tuple, ref: Any) -> check.CheckResult:
        args = self.args(s)
        out = self.fn(*args, **self.kwargs)
        if out is None and self.spec.inplace:
            # PyTorch's convention for a mutating op: it returns nothing, its outputs are its first inputs
            out = args[:len(self.spec.outputs)] if len(self.spec.outputs) > 1 else args[0]
        sync(self.device)  # work on any stream is finished before the output is read
        return self.verdict(out, ref)

    def verdict(self, out: Any, ref: Any) -> check.CheckResult:
        problem = output_type_problem(out) or dtype_problem(self.spec, self.case, out)
        if problem:
            return bad(problem)
        return check.compare_all(out, ref, self.tol, [t.name for t in self.spec.outputs])


def sync(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def bad(message: str) -> check.CheckResult:
    return check.CheckResult(False, math.inf, math.inf, math.inf, message)


def output_type_problem(out: Any) -> str | None:
    """Outputs must be plain tensors: a subclass can compute its value lazily, after the timer stopped."""
    import torch

    for o in check.as_tuple(out):
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
            return (f"returned a {type(o).__name__} (a torch.Tensor subclass): outputs must be plain tensors, "
                    f"a subclass can defer its work past the timer")
    return None


def dtype_problem(spec: OpSpec, case: Case, out: Any) -> str | None:
    for t, o in zip(spec.outputs, check.as_tuple(out)):
        want = precision(t.dtype_for(case.dtype)).storage
        got = str(getattr(o, "dtype", "")).removeprefix("torch.")
        if got and got != want:
            return f"{t.name}: returned dtype {got}, the spec counts bytes for {want}"
    return None


def equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b)) if isinstance(a, torch.Tensor) else a == b


def first_call(call: BoundCall, s: tuple, pristine: tuple, ref: Any) -> check.CheckResult:
    """The first call on a fresh input set: right answer, inputs untouched."""
    result = call.run_checked(s, ref)
    if not call.spec.inplace and not all(equal(a, b) for a, b in zip(s, pristine)):
        return bad("modified its inputs (the spec does not say the op is in-place)")
    return result


def after_timing(call: BoundCall, data: CaseData, timed: dict[str, list[Any]]) -> str | None:
    """The timed iterations' outputs must be right and the inputs untouched, not only the first call's."""
    sync(call.device)
    if call.spec.inplace:
        return None  # the timed calls rewrote their own inputs: their outputs have no fixed reference
    # Inputs first: a call that scribbled on its inputs also makes later outputs wrong, and this says why.
    for s, p in zip(data.sets, data.pristine):
        if not all(equal(a, b) for a, b in zip(s, p)):
            return "modified its inputs during the timed iterations (the spec does not say the op is in-place)"
    for which in ("first", "last"):
        results = [call.verdict(o, ref) for o, ref in zip(timed[which], data.refs) if o is not None]
        worst = check.CheckResult.worst(results) if results else None
        if worst is not None and not worst.ok:
            return f"timed iterations gave wrong results ({which} timed call of a set): {worst.message}"
    return None


def stale_cache(call: BoundCall, data: CaseData) -> str | None:
    """Rewrite inputs in place and re-check against fresh references: results cached by pointer, by
    tensor identity or by a fingerprint of a few elements come back stale and fail."""
    spec, case = call.spec, call.case
    # 1. Every element rewritten in place: same pointers and objects, new data.
    s = data.sets[0]
    for t, f in zip(s, make_inputs(spec, case, call.device, call.seed * 1000 + REWRITE_SEED)):
        t.copy_(f)
    with matmul_precision(case.dtype):
        result = call.run_checked(s, run_reference(spec, s, data.env))
    if not result.ok:
        return ("wrong result after its inputs were rewritten in place with fresh random data (an output "
                f"cached by pointer or tensor identity?): {result.message}")
    # 2. A few scattered elements changed: a cache keyed on a fingerprint of some elements misses it.
    s = data.sets[1 % len(data.sets)]
    perturb(spec, case, call.device, s, call.seed * 1000 + PERTURB_SEED)
    with matmul_precision(case.dtype):
        result = call.run_checked(s, run_reference(spec, s, data.env))
    if not result.ok:
        return (f"wrong result after {PROBE_ELEMENTS} scattered input elements were changed in place (an output "
                f"cached by an input fingerprint?): {result.message}")
    return None
