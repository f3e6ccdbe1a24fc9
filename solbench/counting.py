"""Counting what calls did on the hardware: the separate Nsight Compute pass that `run --counters` and
`audit` share.

Never during a timed measurement. The calls run again in a process of their own, launched under
`ncu` (solbench.profile_target), each once after a warm-up inside its NVTX range; the report's kernels
are mapped back to their calls by that range and summed into `counters.Counters`. One ncu process
serves every call asked for (Python, torch and CUDA start once); a process that dies or poisons its
CUDA context costs the call it was running, and the calls after it run in a fresh process.

Two safety nets for a single unattended GPU session: metrics ncu refuses (a name this chip does not
have) are dropped and the pass retried; and if the NVTX filter selected nothing although calls ran,
the pass is retried with the cudaProfilerStart/Stop window instead, and the session says so.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from solbench import counters as cnt
from solbench import ncu as ncu_mod
from solbench.errors import UserError
from solbench.hardware import DeviceInfo
from solbench.job import SpecSource
from solbench.results import Record
from solbench.spec import OpSpec

MAX_ATTEMPTS = 6
WARMUP_CALLS = 1
BATCH_CALLS = 24
INTERRUPTED = "not counted: the audit was interrupted before this call"
NO_KERNEL = "launched no GPU kernel inside its range (host-side work or copies only): nothing to count"


@dataclass(frozen=True)
class CallSite:
    """One call to count: which spec, case, dtype and implementation."""

    index: int
    spec: SpecSource
    op: str
    params: dict[str, Any]
    dtype: str
    impl: str
    count_flops: bool = True      # False: the byte metrics alone (cnt.byte_metrics), a few replay passes

    @property
    def label(self) -> str:
        case = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in self.params.items())
        return f"{self.op} {case} {self.dtype} {self.impl}"


@dataclass(frozen=True)
class Counted:
    """One call's outcome: its counters, or why there are none."""

    index: int
    counters: cnt.Counters | None = None
    error: str | None = None
    note: str | None = None      # counted, and nothing to count: it launched no GPU kernel


@dataclass
class Session:
    """How the counts were taken (what the audit file and `counters.tool` record)."""

    ncu: str
    version: str
    metrics: list[str]
    device: str
    reader: str = ""                       # ncu_report | csv
    selection: str = "nvtx"                # nvtx | profiler-api (the fallback)
    reports: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    passes: int = 0                        # ncu processes run so far (each names its files passN)
    interrupted: bool = False              # Ctrl-C / SIGTERM: what was counted is kept, the rest is not run

    def to_json(self) -> dict[str, Any]:
        return {"ncu": self.ncu, "version": self.version, "metrics": list(self.metrics),
                "byte_metrics": cnt.byte_metrics(self.metrics), "passes": self.passes, "device": self.device,
                "reader": self.reader, "selection": self.selection, "nvtx_filter": ncu_mod.NVTX_FILTER,
                "clock_control": "none", "cache_control": "all", "replay_mode": "kernel",
                "reports": list(self.reports), "notes": list(self.notes), "interrupted": self.interrupted}


def count_calls(sites: list[CallSite], ncu: Path, device: str, seed: int = 0, timeout_s: float = 1800.0,
                work_dir: Path | None = None, on_note: Callable[[str], None] | None = None
                ) -> tuple[dict[int, Counted], Session]:
    """Counters for every site (by index), and the session that took them.

    timeout_s bounds all the passes together; work_dir keeps the reports, logs and requests (a temporary
    folder, removed after, when None).
    """
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="solbench-ncu-") as tmp:
            return count_calls(sites, ncu, device, seed, timeout_s, Path(tmp), on_note)
    work_dir.mkdir(parents=True, exist_ok=True)
    note = on_note or (lambda _m: None)
    session = Session(str(ncu), ncu_mod.version(ncu), cnt.metrics_to_collect(ncu_mod.query_metrics(ncu)), device)
    if not any(m.startswith("sm__ops_path_tensor") for m in session.metrics):
        session.notes.append("no tensor-op metrics listed by `ncu --query-metrics`: tensor-core FLOPs are not counted")
    results: dict[int, Counted] = {}
    deadline = time.monotonic() + timeout_s
    for batch in batches(sites):
        if session.interrupted:
            results.update({s.index: Counted(s.index, error=INTERRUPTED) for s in batch})
            continue
        results.update(_count_batch(batch, ncu, device, seed, deadline, work_dir, session, note))
    return results, session


def batches(sites: list[CallSite], size: int | None = None) -> list[list[CallSite]]:
    """The ncu processes to run: calls counted with the same metrics together, at most `size` to a
    process, so a process killed at the time limit (its report unwritten) costs one batch, not all. The
    cheap byte-only calls go first: when time runs short, what is lost is a few expensive calls."""
    size = size or BATCH_CALLS
    out: list[list[CallSite]] = []
    for flops in (False, True):
        group = [s for s in sites if s.count_flops == flops]
        out += [group[i:i + size] for i in range(0, len(group), size)]
    return out


def _count_batch(sites: list[CallSite], ncu: Path, device: str, seed: int, deadline: float, work_dir: Path,
                 session: Session, note: Callable[[str], None]) -> dict[int, Counted]:
    results: dict[int, Counted] = {}
    pending = list(sites)
    for _ in range(MAX_ATTEMPTS):
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        done, retry, changed = _one_pass(pending, ncu, device, seed, left, work_dir, session.passes, session, note)
        session.passes += 1
        results.update(done)
        stuck = retry == pending and not changed      # nothing moved on: give up on the rest rather than loop
        pending = retry
        if session.interrupted or stuck:
            break
    why = ("the audit was interrupted" if session.interrupted else "the time allowed (--timeout) ran out"
           if time.monotonic() >= deadline else "the profiling passes gave up")
    for s in pending:
        results.setdefault(s.index, Counted(s.index, error=f"not counted: {why} (see the ncu logs)"))
    return results


def _one_pass(sites: list[CallSite], ncu: Path, device: str, seed: int, timeout_s: float, work_dir: Path,
              attempt: int, session: Session, note: Callable[[str], None]
              ) -> tuple[dict[int, Counted], list[CallSite], bool]:
    """Profile `sites` in one ncu process: the calls counted (or failed), the calls to run again, and
    whether the session's settings changed (metrics dropped, the fallback selection) for that rerun."""
    stem = work_dir / f"pass{attempt}"
    progress = stem.with_suffix(".progress.jsonl")
    progress.unlink(missing_ok=True)
    request = stem.with_suffix(".request.json")
    request.write_text(json.dumps(build_request(sites, device, seed, progress)))
    report = stem.with_suffix(".ncu-rep")
    target = [sys.executable, "-m", "solbench.profile_target", str(request)]
    flops = any(s.count_flops for s in sites)
    metrics = session.metrics if flops else cnt.byte_metrics(session.metrics)
    command = ncu_mod.profile_command(ncu, metrics, report, target, session.selection == "nvtx")
    note(f"ncu pass {attempt + 1}: {len(sites)} calls ({'every metric' if flops else 'byte metrics only'})")
    profiled = ncu_mod.run_profile(command, stem.with_suffix(".log"), timeout_s, _env())
    if profiled.interrupted:
        session.interrupted = True
        session.notes.append("interrupted: the calls counted so far are kept, the rest were not run")
    refused = profiled.unknown_metrics(metrics)
    if refused and not set(refused) & set(cnt.CORE_METRICS):
        session.metrics = [m for m in session.metrics if m not in refused]
        session.notes.append(f"ncu refused {', '.join(refused)}: dropped and profiled again")
        return {}, sites, True
    outcomes = read_progress(progress)
    kernels: list[cnt.Kernel] = []
    if report.exists():
        kernels, session.reader = ncu_mod.read_report(report, ncu)
        session.reports.append(str(report))
    ran = [s for s in sites if outcomes.get(s.index, ("", ""))[0] == "ok"]
    if ran and not kernels and session.selection == "nvtx" and (profiled.profiled_nothing or profiled.returncode == 0):
        session.selection = "profiler-api"
        session.notes.append(f"the NVTX filter '{ncu_mod.NVTX_FILTER}' selected no kernel: profiled again between "
                             f"cudaProfilerStart/Stop instead (kernels still mapped to calls by their NVTX range)")
        return {}, sites, True
    return (*_settle(sites, outcomes, kernels, profiled), False)


def _settle(sites: list[CallSite], outcomes: dict[int, tuple[str, str]], kernels: list[cnt.Kernel],
            profiled: ncu_mod.Profiled) -> tuple[dict[int, Counted], list[CallSite]]:
    by_call: dict[int, list[cnt.Kernel]] = {}
    for k in kernels:
        if k.call is not None:
            by_call.setdefault(k.call, []).append(k)
    done: dict[int, Counted] = {}
    retry: list[CallSite] = []
    died = False
    for s in sites:
        status, message = outcomes.get(s.index, ("", ""))
        if died or not status:
            if not died:
                died = True   # the process ended during this call: it is the culprit, the rest run again
                why = ("was interrupted" if profiled.interrupted else "ran out of time"
                       if profiled.returncode is None else f"exited {profiled.returncode}")
                done[s.index] = Counted(s.index, error=f"the profiled process {why} during this call: "
                                                       f"{_last_error(profiled)}")
            else:
                retry.append(s)
        elif status == "poisoned":
            done[s.index] = Counted(s.index, error=f"{message}; later calls run in a fresh process")
            died = True
        elif status != "ok":
            done[s.index] = Counted(s.index, error=f"{status}: {message}")
        elif s.index not in by_call and by_call and profiled.returncode == 0:
            # The same process profiled other calls' kernels: this one launched none (host work, copies).
            done[s.index] = Counted(s.index, note=NO_KERNEL)
        elif s.index not in by_call:
            done[s.index] = Counted(s.index, error="ran, but no kernel was profiled inside its range (it launched "
                                                   "none, or ncu could not profile it: " + _last_error(profiled) + ")")
        else:
            done[s.index] = Counted(s.index, cnt.summarize(by_call[s.index]))
    return done, retry


def _last_error(profiled: ncu_mod.Profiled) -> str:
    return (profiled.errors[-1] if profiled.errors else profiled.tail(3).replace("\n", " | "))[:400]


def build_request(sites: list[CallSite], device: str, seed: int, progress: Path) -> dict[str, Any]:
    """The profile_target request: each spec's text once, then the calls in order."""
    specs: list[SpecSource] = []
    calls = []
    for s in sites:
        if s.spec not in specs:
            specs.append(s.spec)
        calls.append({"index": s.index, "spec": specs.index(s.spec), "params": s.params, "dtype": s.dtype,
                      "impl": s.impl, "label": s.label})
    from solbench.profile_target import REQUEST_SCHEMA

    return {"schema": REQUEST_SCHEMA, "device": device, "seed": seed, "warmup": WARMUP_CALLS,
            "progress": str(progress), "specs": [vars(s) for s in specs], "calls": calls}


def read_progress(path: Path) -> dict[int, tuple[str, str]]:
    """index -> (status, message) from the target's progress lines; the last line of an index wins."""
    out: dict[int, tuple[str, str]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue           # a line cut short by a dying process
        out[int(d["index"])] = (str(d["status"]), str(d.get("message", "")))
    return out


def _env() -> dict[str, str]:
    """The target imports this solbench, wherever the caller runs from."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# ---------------------------------------------------------------- run --counters

COUNTED_STATUSES = ("ok", "invalid")   # measured and correct: an invalid record is what counters explain


def require_ncu(wanted: bool, explicit: str | None = None, field: str = "--counters") -> Path | None:
    """The ncu to count with when counters are asked for (a UserError saying how to get it when missing)."""
    return ncu_mod.find_ncu(explicit, field=field) if wanted else None


def require_cuda(wanted: bool, info: DeviceInfo, field: str = "--counters") -> None:
    if wanted and info.kind != "cuda":
        raise UserError(f"needs a CUDA device, and this run is on '{info.name}' ({info.kind}): Nsight Compute "
                        f"counts GPU kernels only", field=field)


def sites_for(records: list[Record], specs: dict[str, OpSpec]) -> list[tuple[CallSite, Record]]:
    """The records `run --counters` counts (measured and correct), each with its call site."""
    out = []
    for r in records:
        if r.status in COUNTED_STATUSES and r.op in specs and r.time_s:
            out.append((CallSite(len(out), SpecSource.of(specs[r.op]), r.op, dict(r.params), r.dtype, r.impl), r))
    return out


def attach(records: list[Record], specs: dict[str, OpSpec], ncu: Path, device: str, seed: int,
           timeout_s: float, on_note: Callable[[str], None] | None = None) -> Session | None:
    """`run --counters`: a second pass after all timing, adding `counters` to each measured record."""
    pairs = sites_for(records, specs)
    if not pairs:
        return None
    counted, session = count_calls([s for s, _ in pairs], ncu, device, seed, timeout_s, on_note=on_note)
    tool = f"ncu {session.version} (clock control none, caches flushed, {session.selection} selection)"
    for site, rec in pairs:
        got = counted[site.index]
        if got.counters is None:
            rec.counters = {"error": got.error or got.note, "tool": tool}
            rec.warnings.append(f"--counters: {got.error or got.note}")
            continue
        rec.counters = {**got.counters.to_json(), "tool": tool,
                        "bytes_ratio": _ratio(got.counters.dram_bytes, rec.bytes),
                        "flops_ratio": _ratio(got.counters.flops, rec.flops)}
    return session


def _ratio(measured: float | None, spec: float | None) -> float | None:
    return measured / spec if spec and measured is not None else None
