"""Where a run's work goes, as a run request says it: --gpus, --executor, --ray-address, --accelerators, --retries.

`Placement.check` refuses combinations that cannot mean anything, naming the flag, before any worker
starts; exec/__init__.make_executor turns a checked placement into an executor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from solbench.errors import UserError

EXECUTORS = ("local", "ray")
DEFAULT_RETRIES = 2
_ACCELERATOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HOST_PORT = re.compile(r"^(ray://)?[A-Za-z0-9_.:\[\]-]+:\d{1,5}$")


@dataclass(frozen=True)
class Placement:
    executor: str = "local"                # local: this machine (a process per op, or per GPU with --gpus) | ray
    gpus: str | None = None                # --gpus: "all" or "0,2,3" (nvidia-smi indices); None: --device decides
    ray_address: str | None = None         # None: a private Ray instance on this machine; "auto"; HOST:PORT
    accelerators: tuple[str, ...] = ()     # Ray: one sweep per GPU model (Ray's accelerator_type names)
    retries: int = DEFAULT_RETRIES         # Ray: re-runs of a task whose worker or node was lost

    @property
    def is_default(self) -> bool:
        return self == Placement()

    def check(self, device: str, isolate: bool) -> None:
        """Every flag combination that means nothing is an error naming the flag and value."""
        if self.executor not in EXECUTORS:
            raise UserError(f"unknown executor '{self.executor}' (use {', '.join(EXECUTORS)})", field="--executor")
        if self.retries < 0:
            raise UserError(f"must be 0 or more, got {self.retries}", field="--retries")
        if self.gpus is not None:
            self._check_gpus(device, isolate)
        if self.executor == "ray":
            self._check_ray(device, isolate)
            return
        if self.ray_address is not None:
            raise UserError(f"'{self.ray_address}' given, but only --executor ray uses a Ray cluster",
                            field="--ray-address")
        if self.accelerators:
            raise UserError(f"'{','.join(self.accelerators)}' given, but only --executor ray schedules by GPU "
                            f"model", field="--accelerators")

    def _check_gpus(self, device: str, isolate: bool) -> None:
        from solbench.exec.gpus import parse_gpu_list

        parse_gpu_list(self.gpus or "")
        if self.executor == "ray":
            raise UserError(f"'{self.gpus}' places work on this machine's GPUs, but with --executor ray Ray "
                            f"places it (choose GPU models with --accelerators)", field="--gpus")
        if not isolate:
            raise UserError(f"'{self.gpus}' needs a worker process per GPU: drop --no-isolate", field="--gpus")
        if device not in ("auto", "cuda"):
            raise UserError(f"'{self.gpus}' names the GPUs, and --device {device} names one device: give one "
                            f"of the two", field="--gpus")

    def _check_ray(self, device: str, isolate: bool) -> None:
        if not isolate:
            raise UserError("Ray tasks always run their work unit in a worker process: drop --no-isolate",
                            field="--no-isolate")
        if device not in ("auto", "cpu", "cuda"):
            raise UserError(f"'{device}' names one GPU, but Ray chooses the GPU of each task (use auto, cpu or "
                            f"cuda)", field="--device")
        address = self.ray_address
        if address is not None and address != "auto" and not _HOST_PORT.match(address):
            raise UserError(f"'{address}' is neither 'auto' nor HOST:PORT (the head node's address, e.g. "
                            f"10.0.0.5:6379)", field="--ray-address")
        seen: set[str] = set()
        for name in self.accelerators:
            if not _ACCELERATOR.match(name):
                raise UserError(f"'{name}' is not an accelerator type (Ray names GPU models like H100, A100, L4)",
                                field="--accelerators")
            if name.lower() in seen:
                raise UserError(f"'{name}' is listed twice", field="--accelerators")
            seen.add(name.lower())
        if self.accelerators and device == "cpu":
            raise UserError(f"'{','.join(self.accelerators)}' chooses GPU models, and --device cpu runs on CPUs",
                            field="--accelerators")
