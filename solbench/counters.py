"""Hardware counters of one measured call: which Nsight Compute metrics to ask for, and how a call's
kernels add up to DRAM bytes and executed floating-point operations.

- DRAM bytes: `dram__bytes_read.sum + dram__bytes_write.sum` over the call's kernels.
- CUDA-core FLOPs: SASS thread instructions executed with their predicate on
  (`smsp__sass_thread_inst_executed_op_{f,d,h}{add,mul,fma}_pred_on.sum`): an add or a multiply is 1,
  a fused multiply-add 2. Exponentials, divisions, max/min and compares are not add/mul/fma
  instructions (MUFU, FMNMX, ...), so a spec that counts them ("5 * M * N" for softmax) reads high
  here; that is why FLOPs are only judged for compute-bound cases.
- Tensor-core FLOPs: `sm__ops_path_tensor_src_<type>[_dst_<type>].sum`. Nsight Compute counts these
  in operations, a multiply-add being two (a B300 fp8 GEMM reads exactly 2*M*N*K); for Hopper's
  wgmma this is checked on the H200 by scripts/h200/audit.sh, which prints the ratio for a plain
  bf16 torch.mm. Which of these metrics exist depends on the chip and the Nsight Compute version,
  so they are picked from `ncu --query-metrics` (tensor_metrics), never assumed.

Pure: no ncu, no torch. The tool itself (finding, running, reading reports) is ncu.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DURATION = "gpu__time_duration.sum"                                   # nanoseconds
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"    # percent
DRAM_THROUGHPUT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
# Bytes the SMs wrote into the L2 (32-byte sectors): what a kernel wrote, whether or not the L2 had
# written it back to DRAM by the time the kernel ended.
L2_WRITE_SECTORS = "lts__t_sectors_srcunit_tex_op_write.sum"
TENSOR_INSTS = "sm__inst_executed_pipe_tensor.sum"
SECTOR_BYTES = 32

# FLOPs per executed thread instruction. Half precision: a paired HFMA2 is one instruction doing two
# lanes' work, so packed half code can read up to 2x low; solbench's kernels compute in fp32.
SIMT_FLOPS: dict[str, int] = {
    f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": (2 if op == "fma" else 1)
    for p in ("f", "d", "h") for op in ("add", "mul", "fma")
}
TENSOR_FLOPS_PER_OP = 1      # ncu's tensor "ops" are FLOPs already (a multiply-add counts 2)

# Always asked for: present in every Nsight Compute since the SASS counters were added (2019).
CORE_METRICS: tuple[str, ...] = (DURATION, DRAM_READ, DRAM_WRITE, SM_THROUGHPUT, *SIMT_FLOPS)
# Asked for only when `ncu --query-metrics` lists them (names vary by chip and version).
OPTIONAL_METRICS: tuple[str, ...] = (DRAM_THROUGHPUT, L2_WRITE_SECTORS, TENSOR_INSTS)
# The FLOP metrics are the expensive ones: the SASS instruction counters make ncu patch the kernel and
# together with the tensor-op counters take ~13 of a call's ~15 replay passes (each pass restoring the
# case's device memory: seconds per call at a 1 GiB case on the H200). A call whose FLOPs are not
# judged (a memory-bound case) is counted with the byte metrics alone.
FLOP_METRICS: tuple[str, ...] = (*SIMT_FLOPS, TENSOR_INSTS)

FLOAT_TENSOR_SOURCES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4")
_TENSOR = re.compile(r"^sm__ops_path_tensor_(?:op_(?P<op>[a-z0-9]+)_)?src_(?P<src>[a-z0-9]+)"
                     r"(?:_dst_(?P<dst>[a-z0-9]+))?(?:_sparsity_(?P<sparsity>on|off))?$")


def base_name(metric: str) -> str:
    """'dram__bytes_read.sum' -> 'dram__bytes_read' (what `ncu --query-metrics` lists)."""
    return metric.split(".", 1)[0]


def tensor_metrics(available: Iterable[str]) -> list[str]:
    """The tensor-op metrics to sum for floating-point tensor FLOPs, without counting any work twice.

    `available` holds base metric names. The family's names overlap: `src_bf16` is the sum of its
    `src_bf16_dst_*`, which split again by sparsity, and the per-instruction names (`op_hmma_...`)
    partition the unqualified ones. Per (instruction, source type) the coarsest names present are
    taken, and the unqualified family is preferred to the per-instruction one when both exist.
    """
    parsed = [(name, m) for name in sorted(set(available)) if (m := _TENSOR.match(name))
              and m["src"] in FLOAT_TENSOR_SOURCES]
    generic = [(n, m) for n, m in parsed if m["op"] is None]
    family = generic or [(n, m) for n, m in parsed if m["op"] is not None]
    groups: dict[tuple[str | None, str], list[tuple[int, str]]] = {}
    for name, m in family:
        level = (m["dst"] is not None) + 2 * (m["sparsity"] is not None)
        groups.setdefault((m["op"], m["src"]), []).append((level, name))
    chosen = []
    for entries in groups.values():
        coarsest = min(level for level, _ in entries)
        chosen += [name for level, name in entries if level == coarsest]
    return [f"{name}.sum" for name in sorted(chosen)]


def metrics_to_collect(available: set[str] | None) -> list[str]:
    """What to pass to `ncu --metrics`: the core set, plus the optional and tensor metrics the chip has.

    `available` is None when the metric list could not be read: then only the core set is asked for
    (an unknown name makes ncu refuse the whole run) and tensor FLOPs are not counted.
    """
    if available is None:
        return list(CORE_METRICS)
    extra = [m for m in OPTIONAL_METRICS if base_name(m) in available]
    return list(CORE_METRICS) + extra + tensor_metrics(available)


def is_flop_metric(metric: str) -> bool:
    return metric in FLOP_METRICS or metric.startswith("sm__ops_path_tensor")


def byte_metrics(metrics: list[str]) -> list[str]:
    """`metrics` without the FLOP counters: what a call whose FLOPs are not judged is counted with."""
    return [m for m in metrics if not is_flop_metric(m)]


@dataclass(frozen=True)
class Kernel:
    """One kernel launch as Nsight Compute reported it, values in base units (bytes, ns, %, counts)."""

    name: str
    call: int | None                 # the measured call it ran in (its NVTX range), None if outside any
    values: dict[str, float] = field(default_factory=dict)

    def get(self, metric: str) -> float:
        return float(self.values.get(metric, 0.0))

    @property
    def simt_flops(self) -> float:
        return sum(self.get(m) * per for m, per in SIMT_FLOPS.items())

    @property
    def tensor_flops(self) -> float:
        # The same non-overlapping pick as for collection: a report that holds both `src_bf16` and its
        # `src_bf16_dst_fp32` (a full-section export) still counts the work once.
        present = [base_name(m) for m in self.values if m.endswith(".sum")]
        return sum(self.get(m) for m in tensor_metrics(present)) * TENSOR_FLOPS_PER_OP


@dataclass(frozen=True)
class Counters:
    """One call's kernels, summed: what `run --counters` stores on a record and `audit` compares."""

    kernels: int
    kernel_names: tuple[str, ...]
    dram_read_bytes: float
    dram_write_bytes: float
    flops_simt: float | None         # None: not counted (the byte metrics alone were collected)
    flops_tensor: float | None       # None: not counted, or this chip's ncu has no tensor-op metric
    duration_s: float                # the kernels' own durations under ncu, summed (not the timed median)
    sm_throughput_pct: float | None  # duration-weighted over the kernels
    dram_throughput_pct: float | None
    l2_write_bytes: float | None     # None: the chip's ncu has no such metric
    tensor_insts: float | None

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def flops(self) -> float | None:
        parts = [f for f in (self.flops_simt, self.flops_tensor) if f is not None]
        return sum(parts) if parts else None

    @property
    def dram_gbps(self) -> float | None:
        """Achieved DRAM throughput: the bytes over the kernels' durations."""
        return self.dram_bytes / self.duration_s / 1e9 if self.duration_s > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"dram_bytes": self.dram_bytes, "dram_read_bytes": self.dram_read_bytes,
                "dram_write_bytes": self.dram_write_bytes, "flops": self.flops, "flops_simt": self.flops_simt,
                "flops_tensor": self.flops_tensor, "duration_s": self.duration_s, "dram_gbps": self.dram_gbps,
                "dram_throughput_pct": self.dram_throughput_pct, "sm_throughput_pct": self.sm_throughput_pct,
                "l2_write_bytes": self.l2_write_bytes, "tensor_insts": self.tensor_insts,
                "kernels": self.kernels, "kernel_names": list(self.kernel_names)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Counters":
        return cls(kernels=int(d["kernels"]), kernel_names=tuple(d.get("kernel_names") or ()),
                   dram_read_bytes=float(d["dram_read_bytes"]), dram_write_bytes=float(d["dram_write_bytes"]),
                   flops_simt=_maybe(d.get("flops_simt")), flops_tensor=_maybe(d.get("flops_tensor")),
                   duration_s=float(d["duration_s"]), sm_throughput_pct=d.get("sm_throughput_pct"),
                   dram_throughput_pct=d.get("dram_throughput_pct"), l2_write_bytes=d.get("l2_write_bytes"),
                   tensor_insts=d.get("tensor_insts"))


def summarize(kernels: list[Kernel]) -> Counters:
    """Add up one call's kernels (ValueError for none: a call that launched nothing has no counters)."""
    if not kernels:
        raise ValueError("no kernels")
    durations = [k.get(DURATION) * 1e-9 for k in kernels]
    total = sum(durations)
    names = tuple(dict.fromkeys(k.name for _, k in sorted(zip(durations, kernels), key=lambda p: -p[0])))
    return Counters(
        kernels=len(kernels), kernel_names=names[:5],
        dram_read_bytes=sum(k.get(DRAM_READ) for k in kernels),
        dram_write_bytes=sum(k.get(DRAM_WRITE) for k in kernels),
        flops_simt=sum(k.simt_flops for k in kernels) if _reported(kernels, lambda m: m in SIMT_FLOPS) else None,
        flops_tensor=(sum(k.tensor_flops for k in kernels)
                      if _reported(kernels, lambda m: m.startswith("sm__ops_path_tensor")) else None),
        duration_s=total, sm_throughput_pct=_weighted(kernels, durations, SM_THROUGHPUT),
        dram_throughput_pct=_weighted(kernels, durations, DRAM_THROUGHPUT),
        l2_write_bytes=_total(kernels, L2_WRITE_SECTORS, SECTOR_BYTES), tensor_insts=_total(kernels, TENSOR_INSTS),
    )


def _weighted(kernels: list[Kernel], durations: list[float], metric: str) -> float | None:
    """A percentage over several kernels, each weighted by how long it ran (None if none reported it)."""
    pairs = [(k.values[metric], d) for k, d in zip(kernels, durations) if metric in k.values]
    if not pairs:
        return None
    weight = sum(d for _, d in pairs)
    return sum(v * d for v, d in pairs) / weight if weight > 0 else sum(v for v, _ in pairs) / len(pairs)


def _total(kernels: list[Kernel], metric: str, scale: float = 1.0) -> float | None:
    if not any(metric in k.values for k in kernels):
        return None
    return sum(k.get(metric) for k in kernels) * scale


def _reported(kernels: list[Kernel], wanted: Any) -> bool:
    """Some kernel carries a metric of this kind (it was asked for), even if its value is 0."""
    return any(wanted(m) for k in kernels for m in k.values)


def _maybe(value: Any) -> float | None:
    return None if value is None else float(value)
