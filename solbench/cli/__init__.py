"""The `solbench` command line: parse flags, call the modules that do the work, print, exit.

One module per group of commands, all registering on the one typer app (cli/app.py):
run.py (run, list, show, env), charts.py (roofline, plot, report, compare), machine.py (calibrate,
doctor, build), noise.py (noise), serve.py (serve), audit.py (audit).
"""

from __future__ import annotations

from solbench.cli import audit, charts, machine, noise, run, serve  # noqa: F401  (importing them registers their commands)
from solbench.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
