"""Spec checks that need the device, made before anything is measured: a spec error is one line, exit 2.

Parsing (spec.py) cannot know whether `fn: torch.nosuch` imports, nor whether a tolerance is so loose
that an all-zero output would pass (that depends on the reference's values). Both were per-record
errors found half-way through a run; here they are checked once per selected op, in the probe's
worker (importing a user's module may initialise CUDA or crash, never in the CLI's process), and
raised as a UserError naming the file and the field (`baselines.eager.fn`, `tolerance.float32`).

Only the reference and the baselines are imported: an implementation under development that does not
import yet gets its own `error` record and the rest of the op still runs. The tolerance is checked
on the op's first (small) case for each dtype this device runs; a reference that raises there is left
to the records, which say what it raised.
"""

from __future__ import annotations

from typing import Iterable

from solbench.check import zeros_would_pass
from solbench.dtypes import matmul_precision, precision, supported_on
from solbench.errors import UserError
from solbench.hardware import DeviceInfo
from solbench.inputs import make_inputs, run_reference
from solbench.job import Case, SpecSource
from solbench.registry import import_callable
from solbench.spec import CallSpec, OpSpec, Tolerance


def check_specs(sources: Iterable[SpecSource], info: DeviceInfo, device: str, seed: int = 0,
                dtypes: tuple[str, ...] | None = None) -> None:
    """Raise a UserError for the first spec whose callables do not import or whose tolerance accepts zeros."""
    for source in sources:
        spec = source.load()
        check_imports(spec, info)
        check_tolerances(spec, info, device, seed, dtypes)


def check_imports(spec: OpSpec, info: DeviceInfo) -> None:
    calls: list[tuple[str, CallSpec]] = [("reference.fn", spec.reference)]
    calls += [(f"baselines.{c.name}.fn", c) for c in spec.baselines if not (c.device == "cuda" and info.kind == "cpu")]
    for field, c in calls:
        try:
            import_callable(c.fn)
        except Exception as exc:  # ImportError, AttributeError, TypeError (not callable), the module raising
            text = str(exc).removeprefix(f"'{c.fn}': ")   # registry's messages start with the path
            raise UserError(f"cannot import '{c.fn}': {text}", file=spec.path, field=field) from None


def check_tolerances(spec: OpSpec, info: DeviceInfo, device: str, seed: int = 0,
                     dtypes: tuple[str, ...] | None = None) -> None:
    params = (spec.cpu_cases if info.kind == "cpu" else spec.cases)[0]
    for dtype in spec.dtypes:
        if dtypes is not None and dtype not in dtypes:
            continue
        if supported_on(precision(dtype), info.kind, info.compute_capability):
            continue
        case = Case(spec.op, dict(params), dtype)
        try:
            inputs = make_inputs(spec, case, device, seed)
            with matmul_precision(dtype):
                ref = run_reference(spec, inputs, case.env())
        except Exception:  # the reference's own failure: every record of the case will say what it was
            continue
        tol = spec.tolerance[dtype]
        if zeros_would_pass(ref, tol):
            raise UserError(f"{tolerance_text(tol)} would accept an all-zero output (checked on {case.label}): "
                            f"tighten it", file=spec.path, field=f"tolerance.{dtype}")


def tolerance_text(tol: Tolerance) -> str:
    """'atol=100, rtol=0' rather than a dataclass repr."""
    parts = [f"{k}={v:g}" for k, v in (("atol", tol.atol), ("rtol", tol.rtol), ("norm", tol.norm)) if v is not None]
    return ", ".join(parts) or "no tolerance"
