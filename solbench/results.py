"""Results files: the one place every number solbench shows comes from. Format: docs/RESULTS.md."""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from solbench import __version__
from solbench.errors import UserError
from solbench.jsonio import read_versioned, write_json_atomic

RESULTS_SCHEMA = "solbench.results/1"
STATUSES = ("ok", "failed", "invalid", "error", "skipped")


@dataclass
class Record:
    op: str
    case: str
    params: dict[str, Any]
    dtype: str
    impl: str
    kind: str                     # baseline | impl
    status: str                   # ok | failed | invalid | error | skipped
    message: str = ""
    reference_baseline: str | None = None
    compute_unit: str | None = None
    peak_key: str | None = None
    flops: float | None = None
    bytes: float | None = None
    intensity: float | None = None
    peak_flops: float | None = None
    peak_bandwidth: float | None = None
    t_sol_s: float | None = None
    bound: str | None = None
    timer: str | None = None
    time_s: dict[str, float] | None = None
    samples_s: list[float] | None = None
    tflops: float | None = None
    gbps: float | None = None
    sol: float | None = None
    mfu: float | None = None
    mbu: float | None = None
    speedup: float | None = None
    correct: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    norm_rel_err: float | None = None
    warnings: list[str] = field(default_factory=list)
    telemetry: dict[str, Any] | None = None
    counters: dict[str, Any] | None = None   # run --counters: Nsight Compute's DRAM bytes, FLOPs (counting.py)
    spec_sha256: str | None = None       # the spec text this record measured (resume, audit)
    # Where it was measured: a --gpus or Ray run spans several devices, so each record names its own.
    device: str | None = None
    device_index: int | None = None      # the GPU's index on its host (nvidia-smi's numbering)
    device_fingerprint: str | None = None   # name + SMs + memory (+ CPU threads): what --resume matches
    host: str | None = None

    @property
    def is_baseline(self) -> bool:
        return self.kind == "baseline"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.case, self.dtype, self.impl)

    @property
    def median_s(self) -> float | None:
        """The measured median, only when the record is a valid measurement."""
        return self.time_s.get("median") if self.status == "ok" and self.time_s else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["is_baseline"] = self.is_baseline
        return _finite(d)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Record":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class Run:
    env: dict[str, Any]
    peaks: dict[str, Any]
    config: dict[str, Any]
    records: list[Record]
    command: str = ""
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    run_id: str = ""

    def __post_init__(self) -> None:
        if not self.run_id:
            stamp = self.created.replace("-", "").replace(":", "")
            device = re.sub(r"[^a-z0-9]+", "-", str(self.env.get("device", "device")).lower()).strip("-")
            self.run_id = f"{stamp}-{device}"

    @property
    def timer(self) -> str | None:
        """The timer the run asked for (records say which one measured each of them)."""
        return self.config.get("timer")

    @property
    def device(self) -> str:
        return str(self.env.get("device") or "unknown")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Run":
        stamp = {"created": str(data["created"])} if data.get("created") else {}
        return cls(env=data.get("env") or {}, peaks=data.get("peaks") or {}, config=data.get("config") or {},
                   records=[Record.from_json(r) for r in data.get("records", [])],
                   command=str(data.get("command") or ""), run_id=str(data.get("run_id") or ""), **stamp)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RESULTS_SCHEMA,
            "run_id": self.run_id,
            "created": self.created,
            "command": self.command,
            "env": _finite(self.env),
            "peaks": _finite(self.peaks),
            "config": self.config,
            "records": [r.to_json() for r in self.records],
        }


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: write null (the record's status and message say why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def fill_speedups(records: Iterable[Record], baseline: str | None = None) -> None:
    """speedup = median of the reference baseline / median of this record, per (op, case, dtype)."""
    records = list(records)
    by_case: dict[tuple[str, str, str], list[Record]] = {}
    for r in records:
        by_case.setdefault((r.op, r.case, r.dtype), []).append(r)
    for group in by_case.values():
        baselines = [r for r in group if r.is_baseline]
        chosen = next((r for r in baselines if r.impl == baseline), None) if baseline else None
        chosen = chosen or (baselines[0] if baselines else None)
        if chosen is None:
            continue
        base_t = chosen.time_s["median"] if chosen.status == "ok" and chosen.time_s else None
        for r in group:
            r.reference_baseline = chosen.impl
            if r.status == "ok" and r.time_s and base_t:
                r.speedup = base_t / r.time_s["median"]


def write_run(run: Run, path: Path) -> Path:
    """Write atomically: a reader (a report, the CI gate) never sees half a file."""
    return write_json_atomic(path, run.to_json())


def load_run(path: Path) -> Run:
    """Read and check a results file; errors name the file."""
    return Run.from_json(load_run_json(path))


def load_run_json(path: Path) -> dict[str, Any]:
    """The checked JSON of a results file (what load_run builds its Run from)."""
    path = Path(path)
    data = read_versioned(path, RESULTS_SCHEMA, "results file", ("env", "peaks", "records"),
                          unreadable="not a readable JSON results file")
    for i, rec in enumerate(data["records"]):
        for key in ("op", "case", "dtype", "impl", "status"):
            if key not in rec:
                raise UserError("missing required field", file=path, field=f"records[{i}].{key}")
        if rec["status"] not in STATUSES:
            raise UserError(f"unknown status {rec['status']!r}", file=path, field=f"records[{i}].status")
    return data


def load_records(path: Path) -> list[Record]:
    return load_run(path).records


def select_records(
    runs: Sequence[Run],
    *,
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    impls: Sequence[str] | None = None,
    statuses: Iterable[str] | None = None,
    shape: dict[str, int] | None = None,
    what: str = "show",
) -> list[tuple[Run, Record]]:
    """(run, record) pairs passing the filters (None: no filter; `shape` keeps records whose case has every
    NAME=VALUE given); an empty selection is a user error that says what the files do hold."""
    wanted = set(statuses) if statuses is not None else None
    out = [(run, rec) for run in runs for rec in run.records
           if _matches(rec.op, ops) and _matches(rec.dtype, dtypes) and _matches(rec.impl, impls)
           and (wanted is None or rec.status in wanted) and _has_shape(rec, shape)]
    if not out:
        shape_text = f" shape={','.join(f'{k}={v}' for k, v in shape.items())}" if shape else ""
        asked = [("ops", "op", True), ("dtypes", "dtype", bool(dtypes)), ("impls", "impl", bool(impls))]
        have = "; ".join(f"{name} present: {_present(runs, attr)}" for name, attr, given in asked if given)
        raise UserError(f"no records to {what} after filters ops={list(ops or [])} dtypes={list(dtypes or [])} "
                        f"impls={list(impls or [])}{shape_text}; {have}")
    return out


def _present(runs: Sequence[Run], attr: str) -> str:
    return ", ".join(sorted({str(getattr(r, attr)) for run in runs for r in run.records})) or "none"


def _matches(value: Any, allowed: Sequence[str] | None) -> bool:
    return not allowed or str(value) in allowed


def _has_shape(rec: Record, shape: dict[str, int] | None) -> bool:
    # bool parameters (causal) compare as 0/1, the way a case label writes them; a value that is not a
    # number (a hand-edited file) matches nothing rather than stopping the selection
    return not shape or all(isinstance(rec.params.get(k), (int, bool)) and int(rec.params[k]) == v
                            for k, v in shape.items())


def write_csv(records: Iterable[Record], path: Path) -> Path:
    import pandas as pd

    rows = []
    for r in records:
        row = {k: v for k, v in r.to_json().items() if k not in ("samples_s", "time_s", "params", "telemetry", "warnings")}
        row.update({f"time_{k}": v for k, v in (r.time_s or {}).items()})
        row.update({f"param_{k}": v for k, v in r.params.items()})
        row["warnings"] = "; ".join(r.warnings)
        rows.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def git_sha(cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=cwd or Path(__file__).resolve().parent)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def solbench_version() -> str:
    return __version__
