"""From a spec's `fn` string to a callable: `module:attr` or a dotted path, compiled when the spec asks.

Only the worker resolves callables (importing a user's module may initialise CUDA or crash); the
planner and the CLI only ever hold the strings.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from solbench.spec import CallSpec


class CallableNotFound(ImportError):
    """A spec names a callable that cannot be imported; the message says why and what to try."""


def resolve(c: CallSpec) -> Callable[..., Any]:
    """The callable a spec entry names, wrapped in torch.compile when `compile` is set."""
    fn = import_callable(c.fn)
    if c.compile:
        import torch

        fn = torch.compile(fn, **c.compile_options)
    return fn


def import_callable(path: str) -> Callable[..., Any]:
    """'pkg.mod:attr.sub' or 'pkg.mod.attr' -> the object, which must be callable."""
    module_name, attr_path = _split(path)
    obj: Any = _import_module(module_name, path)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CallableNotFound(f"'{path}': module '{module_name}' has no attribute '{attr_path}'") from None
    if not callable(obj):
        raise TypeError(f"'{path}' is not callable")
    return obj


def _split(path: str) -> tuple[str, str]:
    if ":" in path:
        module_name, attr_path = path.split(":", 1)
        if not module_name or not attr_path:
            raise CallableNotFound(f"'{path}': expected 'module:function'")
        return module_name, attr_path
    # torch.nn.functional.gelu -> module torch.nn.functional, attribute gelu: walk back until one imports
    module_name, _, attr_path = path.rpartition(".")
    while module_name:
        try:
            importlib.import_module(module_name)
            return module_name, attr_path
        except ImportError:
            module_name, _, head = module_name.rpartition(".")
            attr_path = f"{head}.{attr_path}"
    raise CallableNotFound(f"'{path}': no importable module in it (write it as 'module:function'; "
                           f"is the module's folder on PYTHONPATH?)")


def _import_module(name: str, path: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        hint = (f"module '{missing}' could not be imported: put the folder that contains it on PYTHONPATH"
                if missing == name.split(".")[0] or missing == name else
                f"importing '{name}' needs module '{missing}', which is not installed")
        raise CallableNotFound(f"'{path}': {hint}") from None
    except Exception as exc:  # the user's module raised while importing: show what it raised
        raise CallableNotFound(f"'{path}': importing module '{name}' raised {type(exc).__name__}: {exc}") from None
