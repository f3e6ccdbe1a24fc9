"""Where the built-in op specs and peak tables live: the repository's `specs/` in a checkout or an
editable install, `<prefix>/share/solbench/specs` in an installed wheel (pyproject's data-files)."""

from __future__ import annotations

import sys
from pathlib import Path

from solbench.errors import UserError

_CHECKOUT = Path(__file__).resolve().parent.parent / "specs"


def specs_root(checkout: Path = _CHECKOUT, prefix: Path = Path(sys.prefix)) -> Path:
    for candidate in (checkout, prefix / "share" / "solbench" / "specs"):
        if (candidate / "ops").is_dir():
            return candidate
    raise UserError(f"cannot find solbench's built-in specs (looked in {checkout} and "
                    f"{prefix / 'share' / 'solbench' / 'specs'}); reinstall solbench")
