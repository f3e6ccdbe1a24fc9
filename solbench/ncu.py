"""Nsight Compute (`ncu`), the tool: find it, list its metrics, build the profiling command, run it, and
read its report, through NVIDIA's `ncu_report` module when it imports, else through the raw-page CSV
(`ncu --import R --csv --page raw`). Both readers give the same `counters.Kernel` list.

A measured call runs inside an NVTX push/pop range named `solbench_measured_<i>` (profile_target.py),
and ncu is told to profile only kernels inside such ranges (`--nvtx --nvtx-include`), so the kernels of
input generation, warm-up and anything else in the process are never counted. The same name, read back
from each kernel's NVTX state, says which call a kernel belongs to. Clock control is left to the device
(`--clock-control none`, the clocks the timed run saw) and every cache is flushed before each kernel
(`--cache-control all`, as the timed run flushes the L2 before each call).
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from solbench.counters import Kernel
from solbench.errors import UserError

NCU_ENV = "SOLBENCH_NCU"
INSTALL_HINT = ("Nsight Compute ships with the CUDA toolkit (ncu in /usr/local/cuda/bin) and as a standalone "
                "package (https://developer.nvidia.com/nsight-compute; `apt install nsight-compute-<version>` from "
                "NVIDIA's CUDA repository); put ncu on PATH, set $SOLBENCH_NCU, or pass --ncu PATH")
MEASURED_RANGE = "solbench_measured_"
NVTX_FILTER = f"regex:{MEASURED_RANGE}[0-9]+/"      # a push/pop range (the trailing slash) of that name
_CALL = re.compile(rf"{MEASURED_RANGE}(\d+)")
_METRIC_NAME = re.compile(r"^[a-z][a-z0-9]*__[a-z0-9_]+$")
_NO_KERNELS = "No kernels were profiled"
SEARCH_DIRS = ("/usr/local/cuda/bin",)
SEARCH_GLOB = "/opt/nvidia/nsight-compute/*/ncu"
NO_MODULE_EXIT = 3          # the reader child's exit code when no ncu_report module can be imported


def range_name(index: int) -> str:
    """The NVTX range a measured call runs in: ncu's filter selects it, the reader maps kernels back by it."""
    return f"{MEASURED_RANGE}{index}"


def call_of(text: str) -> int | None:
    """The measured call an NVTX range (or a report's NVTX column) names, if any."""
    m = _CALL.search(text or "")
    return int(m.group(1)) if m else None


def find_ncu(explicit: str | None = None, field: str = "--ncu") -> Path:
    """The ncu executable: `explicit`, else $SOLBENCH_NCU, PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute.

    A UserError naming `field` and saying how to get Nsight Compute when there is none.
    """
    given = explicit or os.environ.get(NCU_ENV)
    if given:
        path = Path(given).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        where = "--ncu" if explicit else f"${NCU_ENV}"
        raise UserError(f"{where} names '{given}', which is not an executable file; {INSTALL_HINT}", field=field)
    found = shutil.which("ncu")
    candidates = [Path(found)] if found else []
    candidates += [Path(d) / "ncu" for d in SEARCH_DIRS]
    candidates += sorted((Path(p) for p in _glob(SEARCH_GLOB)), reverse=True)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise UserError(f"Nsight Compute (ncu) is not installed here: not on PATH, not in /usr/local/cuda/bin or "
                    f"/opt/nvidia/nsight-compute/. {INSTALL_HINT}", field=field)


def _glob(pattern: str) -> list[str]:
    import glob

    return glob.glob(pattern)


def version(ncu: Path, timeout_s: float = 60.0) -> str:
    """'2025.3.1.0' from `ncu --version` (the whole last line when it has no version number)."""
    text = _output([str(ncu), "--version"], timeout_s)
    m = re.search(r"Version\s+([0-9][0-9.]*)", text)
    return m.group(1) if m else (text.strip().splitlines() or ["unknown"])[-1]


def query_metrics(ncu: Path, timeout_s: float = 120.0) -> set[str] | None:
    """The base metric names this machine's GPU offers (`ncu --query-metrics`); None if the query failed."""
    try:
        names = parse_metric_list(_output([str(ncu), "--query-metrics"], timeout_s))
    except (OSError, subprocess.SubprocessError):
        return None
    return names or None


def parse_metric_list(text: str) -> set[str]:
    """Base metric names from `ncu --query-metrics` output: the first word of each table row."""
    names = set()
    for line in text.splitlines():
        word = line.strip().split(" ", 1)[0] if line.strip() else ""
        if _METRIC_NAME.match(word):
            names.add(word)
    return names


def _output(argv: list[str], timeout_s: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    return done.stdout + done.stderr


def profile_command(ncu: Path, metrics: list[str], report: Path, target: list[str], nvtx_filter: bool = True) -> list[str]:
    """The ncu command line that profiles `target`'s measured calls into `report` (.ncu-rep).

    nvtx_filter False is the fallback when the NVTX filter selected nothing: profile only between
    cudaProfilerStart/Stop, which profile_target also puts around each measured call; the NVTX state
    is still recorded, so kernels are mapped to calls the same way.
    """
    select = ["--nvtx-include", NVTX_FILTER] if nvtx_filter else ["--profile-from-start", "off"]
    return [str(ncu), "--clock-control", "none", "--cache-control", "all", "--replay-mode", "kernel",
            "--target-processes", "application-only", "--nvtx", *select, "--metrics", ",".join(metrics),
            "--export", str(report), "--force-overwrite", *target]


@dataclass(frozen=True)
class Profiled:
    """How one ncu process ended."""

    returncode: int | None        # None: killed at the timeout (or interrupted)
    log: str                      # ncu's and the target's stdout and stderr
    interrupted: bool = False     # the caller was interrupted (Ctrl-C, SIGTERM): ncu was stopped

    @property
    def errors(self) -> list[str]:
        return [line.strip() for line in self.log.splitlines() if "==ERROR==" in line]

    @property
    def profiled_nothing(self) -> bool:
        return _NO_KERNELS in self.log

    def unknown_metrics(self, metrics: list[str]) -> list[str]:
        """Metrics ncu refused (named in an error line): the chip or this version does not have them."""
        errors = "\n".join(self.errors)
        return [m for m in metrics if m in errors or m.split(".", 1)[0] in errors]

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.log.strip().splitlines()[-lines:])


INTERRUPT_GRACE_S = 30.0    # after an interrupt, ncu ends the target and writes what it profiled so far


def run_profile(command: list[str], log_path: Path, timeout_s: float, env: dict[str, str] | None = None) -> Profiled:
    """Run ncu (which runs the target); the log goes to `log_path` too, for the user to read.

    At the timeout ncu is interrupted (SIGINT, as Ctrl-C would), so the report keeps the kernels already
    profiled, and killed only if it has not ended INTERRUPT_GRACE_S later.
    """
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        code: int | None
        interrupted = False
        try:
            code = proc.wait(timeout=max(timeout_s, 1.0))
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
            # Either way ncu is asked to stop as Ctrl-C asks, so its report keeps what it profiled.
            code, interrupted = None, isinstance(exc, KeyboardInterrupt)
            _stop(proc)
    text = log_path.read_text(errors="replace")
    if code is None:
        text += "\n(interrupted)" if interrupted else f"\n(interrupted after {timeout_s:.0f} s)"
    return Profiled(code, text, interrupted)


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=INTERRUPT_GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- reading a report

def read_report(report: Path, ncu: Path, timeout_s: float = 300.0) -> tuple[list[Kernel], str]:
    """Every profiled kernel in `report`, and which reader read it ('ncu_report', or 'csv' with why).

    `ncu_report` is native code run in a child process: Nsight Compute 2025.3's module segfaulted
    reading a 24-call report on the H200 (results/h200/issue16/run2), and a crash there must cost the
    reader, not the audit. The CSV export is the fallback.
    """
    kernels, why = _kernels_in_child(report, ncu, timeout_s)
    # Kept only if it could tie kernels to calls: a module whose NVTX interface differs maps none.
    if kernels and any(k.call is not None for k in kernels):
        return kernels, "ncu_report"
    if kernels:
        why = "ncu_report mapped no kernel to a call"
    reader = f"csv ({why})" if why else "csv"
    return kernels_from_csv(export_csv(report, ncu, timeout_s)), reader


def _kernels_in_child(report: Path, ncu: Path, timeout_s: float) -> tuple[list[Kernel], str]:
    """The kernels as `ncu_report` reads them, in a child process; ([], why not) when it could not."""
    argv = [sys.executable, "-m", "solbench.ncu", str(report), str(ncu)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return [], f"ncu_report ran past {timeout_s:g} s"
    if done.returncode == NO_MODULE_EXIT:
        return [], ""
    if done.returncode != 0:
        how = f"died of signal {-done.returncode}" if done.returncode < 0 else f"exited {done.returncode}"
        return [], f"ncu_report {how}"
    try:
        rows = json.loads(done.stdout)
        return [Kernel(str(r["name"]), r["call"], {k: float(v) for k, v in r["values"].items()}) for r in rows], ""
    except (ValueError, KeyError, TypeError) as exc:
        return [], f"ncu_report's output unreadable ({type(exc).__name__})"


def _child_main(argv: list[str]) -> int:
    """`python -m solbench.ncu REPORT NCU`: the report's kernels through ncu_report, as JSON on stdout."""
    module = report_module(Path(argv[1]))
    if module is None:
        return NO_MODULE_EXIT
    kernels = kernels_from_module(module, Path(argv[0]))
    json.dump([{"name": k.name, "call": k.call, "values": k.values} for k in kernels], sys.stdout)
    return 0


def export_csv(report: Path, ncu: Path, timeout_s: float = 300.0) -> str:
    """The report's raw page as CSV, every value in its base unit (bytes, nanoseconds)."""
    argv = [str(ncu), "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited {done.returncode}: {(done.stderr or done.stdout).strip()[:500]}")
    return done.stdout


def report_module(ncu: Path) -> ModuleType | None:
    """NVIDIA's `ncu_report` from this ncu's own install (extras/python), else an importable one, else None."""
    dirs = [Path(os.path.realpath(ncu)).parent / "extras" / "python"]
    dirs += sorted((Path(p).parent / "extras" / "python" for p in _glob(SEARCH_GLOB)), reverse=True)
    for d in dirs:
        if (d / "ncu_report.py").is_file():
            with _on_path(d):
                try:
                    return importlib.import_module("ncu_report")
                except Exception:
                    continue
    try:
        return importlib.import_module("ncu_report")   # the `ncu-report` package
    except Exception:
        return None


@contextlib.contextmanager
def _on_path(folder: Path) -> Iterator[None]:
    """`folder` importable for the duration of one import (the module stays in sys.modules after)."""
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(folder))


def kernels_from_module(module: Any, report: Path) -> list[Kernel]:
    """Kernels through `ncu_report`: each action's metrics (converted to base units) and NVTX ranges."""
    ctx = module.load_report(str(report))
    kernels = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            values = {}
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                number = _number(metric.value()) if metric is not None else None
                if number is not None and "__" in name:
                    values[name] = to_base(number, str(metric.unit() or ""))
            kernels.append(Kernel(str(action.name()), _call_from_state(action.nvtx_state()), values))
    return kernels


def _call_from_state(state: Any) -> int | None:
    if state is None:
        return None
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        for name in list(domain.push_pop_ranges()) + list(domain.start_end_ranges()):
            if (call := call_of(str(name))) is not None:
                return call
    return None


def kernels_from_csv(text: str) -> list[Kernel]:
    """Kernels from `ncu --csv --page raw`: a header row (starting "ID"), a units row, one row per kernel."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if r and r[0].strip() == "ID"), None)
    if start is None:
        raise ValueError("not an ncu raw-page CSV: no header row starting with \"ID\"")
    header = [h.strip() for h in rows[start]]
    rest = rows[start + 1:]
    units = rest[0] if rest and not _is_kernel_row(rest[0]) else [""] * len(header)
    name_col = next((header.index(h) for h in ("Kernel Name", "Function Name", "Name") if h in header), None)
    if name_col is None:
        raise ValueError("ncu raw-page CSV without a 'Kernel Name' column")
    nvtx_cols = [i for i, h in enumerate(header) if any(w in h.lower() for w in ("push/pop", "start/stop", "nvtx"))]
    metric_cols = [i for i, h in enumerate(header) if "__" in h]
    kernels = []
    for row in rest:
        if not _is_kernel_row(row):
            continue
        values = {}
        for i in metric_cols:
            number = _number(row[i]) if i < len(row) else None
            if number is not None:
                values[header[i]] = to_base(number, units[i] if i < len(units) else "")
        # The NVTX column's header differs between versions; without a known one, any cell may hold it.
        cells = [row[i] for i in nvtx_cols if i < len(row)] if nvtx_cols else row
        call = next((c for cell in cells if (c := call_of(cell)) is not None), None)
        kernels.append(Kernel(row[name_col], call, values))
    return kernels


def _is_kernel_row(row: list[str]) -> bool:
    return bool(row) and row[0].strip().isdigit()


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None        # 'n/a', strings, empty cells


_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def to_base(value: float, unit: str) -> float:
    """A value in solbench's base units: bytes (ncu's prefixes are decimal), nanoseconds; others as given."""
    u = unit.strip().lower()
    if u in _TIME_NS:
        return value * _TIME_NS[u]
    if u.endswith("byte") and u[:-4] in _PREFIX:
        return value * _PREFIX[u[:-4]]
    return value


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
