"""A benchmark run asked for over HTTP: the options of `solbench run` a client may set, as plain JSON.

`solbench run --remote URL` sends one of these and `solbench serve` receives it; the server turns it into
a RunConfig through the same checks the command line uses. What a client may not set is left out on
purpose: the device, spec folders and peak-table files are the server's (a client never names a path),
and runs on a server are always isolated in worker processes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

PEAK_MODES = ("datasheet", "measured", "at-clock")


class RequestError(ValueError):
    """A field of a run request that is missing its type or value: 422 naming the field."""

    def __init__(self, field_: str, message: str):
        self.field = field_
        self.message = message
        super().__init__(f"{field_}: {message}")


@dataclass(frozen=True)
class RunRequest:
    """Flag values, with `solbench run`'s defaults; lists are comma-separated as on the command line."""

    ops: str = "all"
    dtypes: str | None = None
    shape: str | None = None
    impls: str | None = None
    baseline: str | None = None
    quick: bool = False
    timer: str = "events"
    peaks: str = "datasheet"
    rse: float = 0.005
    budget: float = 1.0
    min_samples: int = 10
    timeout: float = 900.0
    fail_fast: bool = False
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> "RunRequest":
        if not isinstance(doc, dict):
            raise RequestError("body", f"expected a JSON object of run options, got {type(doc).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in doc.items():
            if key not in fields:
                raise RequestError(key, f"unknown run option (allowed: {', '.join(fields)})")
            if value is None and fields[key].default is None:
                continue
            values[key] = _typed(key, value, fields[key].type)
        if values.get("peaks", "datasheet") not in PEAK_MODES:
            raise RequestError("peaks", f"{values['peaks']!r} is not one of {', '.join(PEAK_MODES)} (a peak-table "
                                        f"file is the server's business, not a request's)")
        return cls(**values)


def _typed(key: str, value: Any, annotation: Any) -> Any:
    kind = str(annotation)
    if "bool" in kind:
        if not isinstance(value, bool):
            raise RequestError(key, f"expected true or false, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestError(key, f"expected an integer, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RequestError(key, f"expected a number, got {value!r}")
        return float(value)
    if isinstance(value, list) and key in ("ops", "dtypes", "impls"):
        if not all(isinstance(v, str) for v in value):
            raise RequestError(key, f"expected a list of names, got {value!r}")
        return ",".join(value)
    if isinstance(value, dict) and key == "shape":
        if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items()):
            raise RequestError(key, f"expected an object of parameter -> integer, got {value!r}")
        return ",".join(f"{k}={v}" for k, v in value.items())
    if not isinstance(value, str):
        raise RequestError(key, f"expected a string, got {value!r}")
    return value
