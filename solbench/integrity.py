"""The tamper guard: did an implementation replace a function that times or checks it?

An implementation runs inside the worker that times it, so it could patch `time.perf_counter`,
`torch.cuda.Event.elapsed_time` or the sampler and report any time it likes. `Guard.capture` takes
an identity snapshot, before any implementation is imported, of:
- everything bound in every module of the solbench.measure package (walked with pkgutil, so a new
  timer module is covered without being listed): functions, classes, modules, and the constants
  and tables too (`CROSS_CHECK_TOL = 1.0` or `TIMERS["events"] = fake` would defeat a check as
  surely as a patched clock), with the entries of its dicts; and the functions, properties, class-
  and static methods of every class defined there;
- the functions, classes and modules bound in this module and in each extra module the caller
  passes (the worker passes itself and its checker, inputs, anti-cheat probes, telemetry and
  statistics), with the members of their classes; not their other globals, which may be caches;
- the torch and time functions a measurement or a correctness check relies on.
`tampered()` names what changed since; `restore()` puts the originals back so the next
implementation is timed with the real functions. Identity is read with `inspect.getattr_static`,
so a descriptor (a classmethod, a property) is compared as stored, not as a new bound object.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterator

import solbench.measure

_MISSING = object()
# What a module attribute may be for the guard to track it: a rebinding of any of these is tampering.
_TRACKED = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)
_MEMBERS = (types.FunctionType, classmethod, staticmethod, property)

_TIME_FUNCTIONS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "sleep")
_TORCH_CUDA = ("synchronize", "Event", "Stream", "current_stream", "stream", "_sleep", "graph", "CUDAGraph")
_TORCH_EVENT = ("record", "elapsed_time", "synchronize", "query", "wait")
_TORCH_GRAPH = ("replay", "capture_begin", "capture_end")
_TORCH = ("equal", "isfinite", "zeros_like")
_TORCH_TENSOR = ("to", "abs", "max", "sum", "clone", "copy_", "__sub__", "__eq__")

Target = tuple[str, Any, Any]          # (label, owner, attribute name or dict key)


def measure_modules() -> list[types.ModuleType]:
    """The solbench.measure package and every module in it (imported here if it was not yet)."""
    pkg = solbench.measure
    names = sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."))
    return [pkg, *(importlib.import_module(n) for n in names)]


def module_targets(mod: types.ModuleType, constants: bool = False) -> Iterator[Target]:
    """Every function, class and module bound in `mod` (with `constants`: every name, and dict entries),
    and the members of the classes it defines."""
    for name, value in list(vars(mod).items()):
        if name.startswith("__") or not (constants or isinstance(value, _TRACKED)):
            continue
        yield f"{mod.__name__}.{name}", mod, name
        if constants and isinstance(value, dict):
            for key in list(value):
                yield f"{mod.__name__}.{name}[{key!r}]", value, key
        if isinstance(value, type) and value.__module__ == mod.__name__:
            for member, attr in vars(value).items():
                if isinstance(attr, _MEMBERS):
                    yield f"{mod.__name__}.{name}.{member}", value, member


def torch_targets() -> Iterator[Target]:
    """The clock, event, stream, graph and comparison functions of time and torch."""
    import time

    import torch

    for owner, label, names in ((time, "time", _TIME_FUNCTIONS), (torch.cuda, "torch.cuda", _TORCH_CUDA),
                                (torch.cuda.Event, "torch.cuda.Event", _TORCH_EVENT),
                                (torch.cuda.CUDAGraph, "torch.cuda.CUDAGraph", _TORCH_GRAPH),
                                (torch, "torch", _TORCH), (torch.Tensor, "torch.Tensor", _TORCH_TENSOR)):
        for name in names:
            yield f"{label}.{name}", owner, name
    yield "torch.profiler.profile", torch.profiler, "profile"
    yield "torch.linalg.vector_norm", torch.linalg, "vector_norm"


def _read(owner: Any, attr: Any) -> Any:
    if isinstance(owner, dict):
        return owner.get(attr, _MISSING)
    return inspect.getattr_static(owner, attr, _MISSING)


def _write(owner: Any, attr: Any, value: Any) -> None:
    """Put `value` back (or remove what was added where there was nothing)."""
    if isinstance(owner, dict):
        if value is _MISSING:
            owner.pop(attr, None)
        else:
            owner[attr] = value
    elif value is _MISSING:
        delattr(owner, attr)
    else:
        setattr(owner, attr, value)


@dataclass(frozen=True)
class Guard:
    """Identity snapshot of the timing and checking functions, taken before any implementation is imported."""

    entries: tuple[tuple[str, Any, Any, Any], ...]     # (label, owner, attribute or key, value)

    @classmethod
    def capture(cls, *extra_modules: types.ModuleType) -> "Guard":
        """Snapshot measure/, this module, `extra_modules` and torch's timing functions."""
        targets = [t for m in measure_modules() for t in module_targets(m, constants=True)]
        targets += [t for m in (sys.modules[__name__], *extra_modules) for t in module_targets(m)]
        seen: set[tuple[int, Any]] = set()
        entries = []
        for label, owner, attr in targets + list(torch_targets()):
            if (id(owner), attr) not in seen:
                seen.add((id(owner), attr))
                entries.append((label, owner, attr, _read(owner, attr)))
        return cls(tuple(entries))

    def tampered(self) -> list[str]:
        """Labels of everything replaced (or removed, or added where nothing was) since the snapshot."""
        return [label for label, owner, attr, value in self.entries if _read(owner, attr) is not value]

    def restore(self) -> None:
        """Put every original back (and remove what was added where nothing was)."""
        for _, owner, attr, value in self.entries:
            if _read(owner, attr) is not value:
                _write(owner, attr, value)
