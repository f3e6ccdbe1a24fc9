"""Writing JSON files so that a reader never sees half of one.

Results files, calibrations and the CPU-peaks cache are read by other processes (a report, a CI
gate, the next run) possibly while they are being written. The data goes to a temporary file in
the same folder (a rename is only atomic within one file system) and is renamed over the target.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

_CREATE_ATTEMPTS = 16


def _create_temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new file next to the target, created with mode 0666 so the umask decides its permissions.

    tempfile.mkstemp would create it 0600, and a results file shared through a group folder would
    then be unreadable to the group after the rename.
    """
    for _ in range(_CREATE_ATTEMPTS):
        tmp = folder / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file next to {folder / name}")


def write_json_atomic(path: Path | str, data: Any) -> Path:
    """Write `data` as indented JSON to `path` atomically; the folder is created; returns the path.

    On any failure (data not serialisable, disk full, interrupted) the target keeps its old content
    and the temporary file is removed.
    """
    path = Path(path)
    text = json.dumps(data, indent=1) + "\n"   # serialise first: a TypeError leaves no file behind
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())    # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_versioned(path: Path | str, schema: str, what: str, required: tuple[str, ...] = (),
                   unreadable: str | None = None) -> dict[str, Any]:
    """A JSON file of a given `schema` with its `required` top-level fields; anything else is a
    UserError naming the file and field (`what` names the kind of file in the messages,
    `unreadable` replaces the message for a file that is not JSON)."""
    from solbench.errors import UserError

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{what} not found", file=path) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{unreadable or 'cannot read the ' + what}: {exc}", file=path) from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UserError(f"expected schema '{schema}', got {got!r}", file=path, field="schema")
    for key in required:
        if key not in data:
            raise UserError("missing required field", file=path, field=key)
    return data
