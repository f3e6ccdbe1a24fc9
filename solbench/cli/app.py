"""The typer app every command module registers on, and what they share: consoles, flag parsing, errors.

Exit codes: 0 all ran, 1 a case failed or errored (or a check failed), 2 bad input.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.markup import escape

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
            # escape: a message may quote brackets (`pip install solbench[ray]`) that rich would eat as markup
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
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
    """All specs; a user's spec that replaces one of the same op name is said on stderr (README)."""
    def replaced(op: str, old: Path, new: Path) -> None:
        err.print(f"[yellow]note:[/] op '{op}' from {new} replaces the one in {old}", highlight=False,
                  soft_wrap=True)

    return spec.load_all(specs_dirs or [], on_replace=replaced)


def writable_folder(path: Path, flag: str) -> Path:
    """`path` as a folder this process can write into (created if missing), or a UserError naming `flag`."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create folder '{path}': {exc.strerror or exc}", field=flag) from None
    if not path.is_dir():
        raise UserError(f"'{path}' is not a folder", field=flag)
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"cannot write into folder '{path}'", field=flag)
    return path


def writable_file(path: Optional[Path], flag: str) -> Optional[Path]:
    """A file path whose folder can be written into (checked before a run, not after it)."""
    if path is not None:
        if path.is_dir():
            raise UserError(f"'{path}' is a folder; give a file name", field=flag)
        writable_folder(path.parent if str(path.parent) else Path("."), flag)
    return path
