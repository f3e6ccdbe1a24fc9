"""--accelerators A,B: the same sweep on each GPU model of a Ray cluster, one results file per model.

Each model is a run of its own (probed on a node of that model, planned for what it can run, scored
against its own peaks) written to <out>/<model>.json after every record; the models run at the same
time, since they do not share GPUs. `solbench compare --metric sol` compares two of the files.
"""

from __future__ import annotations

import dataclasses
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from solbench import pipeline, results
from solbench.errors import UserError
from solbench.results import Record, Run
from solbench.spec import OpSpec


@dataclass(frozen=True)
class Member:
    """One GPU model of the fleet: its planned run and the file it goes to."""

    model: str
    prepared: pipeline.Prepared
    path: Path


def model_file(out_dir: Path, model: str) -> Path:
    """<out>/<model>.json, the model's name in lower case (H100 -> h100.json)."""
    return Path(out_dir) / f"{re.sub(r'[^a-z0-9_.-]+', '-', model.lower())}.json"


def prepare(config: pipeline.RunConfig, specs: dict[str, OpSpec], out_dir: Path) -> list[Member]:
    """One planned run per model. With --resume, the folder of an earlier fleet run: each model
    resumes from its own file there (a model without one starts afresh)."""
    if config.resume is not None and not Path(config.resume).is_dir():
        raise UserError(f"'{config.resume}' is not a folder: with --accelerators, --resume takes the folder holding "
                        f"the per-model files (the earlier run's --out)", field="--resume")
    members = []
    for model in config.placement.accelerators:
        path = model_file(out_dir, model)
        prior = model_file(config.resume, model) if config.resume is not None else None
        one = dataclasses.replace(config, placement=dataclasses.replace(config.placement, accelerators=(model,)),
                                  resume=prior if prior is not None and prior.is_file() else None)
        members.append(Member(model, pipeline.prepare(one, specs), path))
    return members


def execute(members: list[Member], on_record: Callable[[str, Record], None] | None = None,
            command: str = "") -> list[tuple[Member, Run]]:
    """Every model's run at once, each written to its file after every record."""

    def one(m: Member) -> Run:
        report = (lambda r: on_record(m.model, r)) if on_record else None
        run = pipeline.execute(m.prepared, report, command, checkpoint=lambda r: results.write_run(r, m.path))
        results.write_run(run, m.path)
        return run

    with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        futures = [pool.submit(one, m) for m in members]
        return [(m, f.result()) for m, f in zip(members, futures)]
