"""`solbench run --remote URL`: the run goes to a `solbench serve`; its results file comes back and is
printed and saved exactly as a local run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from solbench import console as ui
from solbench import results
from solbench.cli.app import err, out
from solbench.errors import UserError
from solbench.hardware import DeviceInfo
from solbench.peaks import Peaks
from solbench.runrequest import PEAK_MODES, RunRequest


def remote_request(ops: str, dtypes: Optional[str], shape: Optional[str], impls: Optional[str],
                   baseline: Optional[str], quick: bool, timer: str, peaks: Optional[str], rse: float, budget: float,
                   min_samples: int, timeout: float, fail_fast: bool, seed: int) -> RunRequest:
    """The flags of `solbench run` that travel to the server (already checked by the local run's checks)."""
    if peaks is not None and peaks not in PEAK_MODES:
        raise UserError(f"a peak-table file stays on this machine: with --remote use one of {', '.join(PEAK_MODES)}",
                        field="--peaks")
    return RunRequest(ops=ops, dtypes=dtypes, shape=shape, impls=impls, baseline=baseline, quick=quick, timer=timer,
                      peaks=peaks or "datasheet", rse=rse, budget=budget, min_samples=min_samples, timeout=timeout,
                      fail_fast=fail_fast, seed=seed)


def run_remote(url: str, request: RunRequest, out_dir: Path, json_path: Optional[Path], csv_path: Optional[Path],
               local_flags: dict[str, bool]) -> int:
    """Submit, follow, download, print; the exit code a local run would have."""
    for flag, given in local_flags.items():
        if given:
            raise UserError("is a local option: with --remote the server's setting applies", field=flag)
    try:
        from solbench.remote import Remote
    except ImportError as exc:
        raise UserError(f"--remote needs httpx: pip install httpx ({exc})", field="--remote") from None
    with Remote(url) as remote:
        job = remote.submit(request)
        with ui.make_progress(err) as progress:
            task = progress.add_task(f"on {url}", total=job.get("total") or None, last="queued")

            def on_status(s: dict[str, Any]) -> None:
                progress.update(task, completed=s.get("done", 0), total=s.get("total") or None,
                                last=s.get("last") or s.get("state", ""))

            remote.wait(job["id"], on_status)
        fetched = remote.fetch(job["id"], out_dir)
    run = fetched.run
    paths = [fetched.path]
    if json_path:
        paths.append(results.write_run(run, json_path))
    if csv_path:
        paths.append(results.write_csv(run.records, csv_path))
    _print_header(run, url)
    for table in ui.op_tables(run.records, out.width):
        out.print(table)
    for line in ui.summary_lines(run.records):
        out.print(line)
    if run.env.get("cuda_skipped"):
        out.print("[bold yellow]The server has no CUDA device: CUDA implementations were SKIPPED there.[/]")
    during = (run.env.get("serve") or {}).get("op_requests_during_run")
    if during:
        out.print(f"[yellow]the server answered {during} op requests while this run measured: timings may be "
                  f"noisier than on an idle device[/]")
    out.print("results: " + ", ".join(str(p) for p in paths))
    return 1 if any(r.status in ("failed", "error") for r in run.records) else 0


def _print_header(run: results.Run, url: str) -> None:
    from solbench.cli.run import _print_header as header

    env = run.env
    info = DeviceInfo(kind=str(env.get("device_kind", "?")), name=f"{env.get('device', '?')} at {url}")
    try:
        peaks = Peaks(**run.peaks)
    except TypeError:
        out.print(f"device {info.name} ({info.kind})", highlight=False)
        return
    header(info, peaks, [])
