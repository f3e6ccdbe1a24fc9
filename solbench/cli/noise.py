"""`solbench noise`: measure this device's run-to-run noise model (what `compare` needs a change to exceed)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solbench import pipeline
from solbench.cli.app import app, err, out, user_errors
from solbench.errors import UserError


@app.command("noise")
@user_errors
def noise_cmd(
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    runs: int = typer.Option(5, "--runs", help="Repetitions, each in a fresh process (at least 3)."),
    budget: float = typer.Option(0.25, "--budget", help="Seconds of sampling per probe kernel and repetition; "
                                 "use the --budget your CI runs use."),
    out_dir: Path = typer.Option(pipeline.DEFAULT_RESULTS_DIR, "--out",
                                 help="Results folder; the model goes to <out>/calibration/<fingerprint>-noise.json."),
    quick: bool = typer.Option(False, "--quick", help="Four probe kernels instead of the full range: a smoke test."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the noise model file here."),
) -> None:
    """Measure how far medians move between runs of unchanged code (A/A repetitions in fresh processes),
    fit spread(t) = sqrt(rel^2 + (abs/t)^2) and store it beside the calibration; later runs stamp it on
    every record (time_s.run_to_run) and `solbench compare` requires a change to exceed it."""
    from solbench import noise_calibrate

    if runs < 3:
        raise UserError(f"needs at least 3 repetitions to estimate a spread, got {runs}", field="--runs")
    if not budget > 0:
        raise UserError(f"must be positive, got {budget}", field="--budget")
    try:
        noise_calibrate.noise_command(device, Path(out_dir) / "calibration", runs, budget, quick, json_path,
                                      console=out)
    except noise_calibrate.NoiseRunFailed as exc:
        err.print(f"[bold red]noise measurement failed:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
