"""The typer app every command module registers on, and what they share: consoles, flag parsing, errors.

Exit codes: 0 all ran, 1 a case failed or errored (or a check failed), 2 bad input.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from solbench import console as ui
from solbench import results, spec
from solbench.errors import UserError
from solbench.measure import TIMERS

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="How close is this kernel to the hardware's speed of light, and is it faster than PyTorch?")
out = ui.make_console()
err = ui.make_console(stderr=True)
CUDA_TIMERS = tuple(name for name in TIMERS if name != "wall")   # `wall` is what a CPU run always uses


def _version(value: bool) -> None:
    if value:
        out.print(f"solbench {results.solbench_version()}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """How close is this kernel to the hardware's speed of light, and is it faster than PyTorch?"""


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a UserError into one red line and exit code 2: no tracebacks for user mistakes."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def csv_list(value: Optional[str]) -> Optional[tuple[str, ...]]:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    return items or None


def parse_shape(value: Optional[str]) -> Optional[dict[str, int]]:
    """'M=4096,N=8192' -> {'M': 4096, 'N': 8192}."""
    if not value:
        return None
    shape = {}
    for item in value.split(","):
        name, sep, number = item.partition("=")
        if not sep or not name.strip():
            raise UserError(f"expected NAME=VALUE, got '{item}'", field="--shape")
        try:
            shape[name.strip()] = int(number)
        except ValueError:
            raise UserError(f"'{number}' is not an integer (in '{item}')", field="--shape") from None
        if shape[name.strip()] < 0:
            raise UserError(f"'{item}' is negative", field="--shape")
    return shape


def load_specs(specs_dirs: Optional[List[Path]]) -> dict[str, spec.OpSpec]:
    return spec.load_all(specs_dirs or [])
