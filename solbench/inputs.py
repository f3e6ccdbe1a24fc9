"""Inputs and references for one case: random, never degenerate, reproducible from a seed.

Zeros hide indexing bugs (0 * anything) and can even run faster than real data, so float inputs keep
every value away from zero and no input may come out constant. References run on inputs upcast to
float64 (or the spec's reference dtype).
"""

from __future__ import annotations

from typing import Any

from solbench.dtypes import precision
from solbench.job import Case
from solbench.registry import import_callable, resolve
from solbench.spec import OpSpec, TensorSpec

PROBE_ELEMENTS = 16   # scattered elements changed by the fingerprint-cache probe


def make_inputs(spec: OpSpec, case: Case, device: str, seed: int, boost: float = 1.0) -> tuple:
    """One set of inputs for `case`. `boost` widens randn inputs (the fingerprint probe wants its changed
    elements to show in the output)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    env = case.env()
    out = tuple(_make_tensor(t, env, case.dtype, device, gen, boost) for t in spec.inputs)
    for t, x in zip(spec.inputs, out):
        if x.numel() > 1 and x.dtype != torch.bool:
            f = x.float()
            if bool(f.max() == f.min()):
                raise ValueError(f"input '{t.name}' came out constant ({float(f.flatten()[0]):g} everywhere): "
                                 f"widen its init range in {spec.path.name}")
    return out


def _make_tensor(t: TensorSpec, env: dict[str, Any], case_dtype: str, device: str, gen: Any,
                 boost: float = 1.0) -> Any:
    import torch

    shape = t.shape_for(env)
    dtype = getattr(torch, precision(t.dtype_for(case_dtype)).storage)
    if t.generator:
        return _generated(t, shape, dtype, gen, device)
    low, high = t.low.evaluate(env), t.high.evaluate(env)
    if t.init == "randint":
        return torch.randint(int(low), int(high), shape, generator=gen, device=device).to(dtype)
    if t.init == "uniform":
        x = torch.rand(shape, generator=gen, device=device) * (high - low) + low
        eps = (high - low) * 2e-3 if low < 0 < high else 0.0
    else:
        x = torch.randn(shape, generator=gen, device=device) * (t.scale * boost)
        eps = abs(t.scale) * 1e-2
    if eps:
        # fp8 rounds tiny values to zero: keep every value at least eps away from zero, large enough to
        # survive the narrowest storage format.
        x = torch.where(x.abs() < eps, torch.where(x < 0, -eps, eps), x)
    return x.to(dtype)


def _generated(t: TensorSpec, shape: tuple[int, ...], dtype: Any, gen: Any, device: str) -> Any:
    """An input from the spec's own generator function, checked to be what the spec declares."""
    x = import_callable(str(t.generator))(shape, dtype, gen, device)
    if tuple(x.shape) != tuple(shape) or x.dtype != dtype:
        raise ValueError(f"generator '{t.generator}' of input '{t.name}' returned {tuple(x.shape)} {x.dtype}, "
                         f"the spec declares {tuple(shape)} {dtype}")
    return x.to(device)


def run_reference(spec: OpSpec, inputs: tuple, env: dict[str, Any]) -> Any:
    import torch

    fn = resolve(spec.reference)
    ref_dtype = getattr(torch, precision(spec.reference.dtype or "float64").storage)
    upcast = tuple(x.to(ref_dtype) if x.is_floating_point() else x for x in inputs)
    return fn(*upcast, **spec.reference.resolved_kwargs(env))


def perturb(spec: OpSpec, case: Case, device: str, inputs: tuple, seed: int) -> None:
    """Replace PROBE_ELEMENTS random elements of each input with fresh draws from its own distribution."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    fresh = make_inputs(spec, case, device, seed, boost=3.0)
    for t, f in zip(inputs, fresh):
        flat, src = t.view(-1), f.view(-1)
        idx = torch.randint(0, flat.numel(), (PROBE_ELEMENTS,), generator=gen).to(flat.device)
        flat[idx] = src[idx]


class CaseData:
    """One case's input sets, untouched copies of them, and their references."""

    def __init__(self, sets: list[tuple], refs: list[Any], env: dict[str, Any]):
        self.sets = sets
        self.pristine = [tuple(t.clone() for t in s) for s in sets]
        self.refs = refs
        self.env = env

    def restore(self) -> None:
        """Put every input set back as it was (an in-place op or a cheat may have written to it)."""
        for s, p in zip(self.sets, self.pristine):
            for t, orig in zip(s, p):
                t.copy_(orig)
