"""User-facing errors: the CLI prints these as one line and exits 2, never with a traceback."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """A mistake in the user's input: a spec, a flag, a results file."""

    def __init__(self, message: str, *, file: str | Path | None = None, field: str | None = None):
        self.file = str(file) if file is not None else None
        self.field = field
        self.detail = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.field:
            where.append(f"field '{self.field}'")
        return f"{': '.join(where)}: {self.detail}" if where else self.detail
