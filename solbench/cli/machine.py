"""Commands about this machine: calibrate its ceilings, diagnose it, build the kernel library."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solbench import peaks as peaks_mod
from solbench import pipeline
from solbench.cli.app import app, err, out, user_errors


@app.command("calibrate")
@user_errors
def calibrate_cmd(
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    out_dir: Path = typer.Option(pipeline.DEFAULT_RESULTS_DIR, "--out",
                                 help="Results folder; the calibration goes to <out>/calibration/<fingerprint>.json."),
    quick: bool = typer.Option(False, "--quick", help="Small sizes: a smoke test, not a ceiling."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the calibration here."),
) -> None:
    """Measure this device's ceilings (DRAM, L2, matmul per dtype) and compare them with the datasheet."""
    from solbench import calibrate as cal
    from solbench.cli.app import writable_file, writable_folder

    folder = writable_folder(Path(out_dir) / "calibration", "--out")
    cal.calibrate_command(device, folder, quick=quick, json_out=writable_file(json_path, "--json"), console=out,
                          datasheet_for=peaks_mod.datasheet_peaks)


@app.command("doctor")
@user_errors
def doctor_cmd(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    no_build: bool = typer.Option(False, "--no-build", help="Skip the C++ extension and kernel-library builds."),
    build_timeout: float = typer.Option(900.0, "--build-timeout", help="Seconds the kernel-library build may take."),
) -> None:
    """Is this machine ready? CUDA, driver, nvcc, arch list, compiler, kernel build, clocks. Exit 1 on any FAIL."""
    from solbench import doctor as doc

    raise typer.Exit(doc.doctor_command(as_json=as_json, build=not no_build, build_timeout_s=build_timeout,
                                        console=out))



@app.command("build")
@user_errors
def build_kernels(verbose: bool = typer.Option(False, "--verbose", help="Show the compiler's commands and output.")) -> None:
    """Build the CUDA kernel library ahead of time (otherwise it builds on first use)."""
    import kernels_ext

    with err.status("building kernels_ext...") as status:
        try:
            path = kernels_ext.build(verbose=verbose, progress=lambda msg: status.update(msg))
        except kernels_ext.KernelBuildError as exc:
            err.print(f"[bold red]build failed:[/] {exc}", highlight=False)
            raise typer.Exit(1) from None
    out.print(f"kernels_ext: {path}")
