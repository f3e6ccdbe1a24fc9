"""`solbench audit`: the spec's FLOP and byte formulas checked against the hardware's own counters.

Every SOL figure rests on a FLOP count and a byte count written by hand in a spec. The audit runs each
selected case's implementations once under Nsight Compute (counting.py: a separate process, NVTX-
selected kernels, clocks left to the device, caches flushed before each kernel) and compares, per call:

- DRAM bytes read + written against the spec's `bytes` (judged for every op);
- executed floating-point operations (SASS add/mul/fma, fma counted twice, plus tensor-core ops)
  against `flops`, judged for compute-bound cases only: a memory-bound op's FLOP formula is a rough
  count of operations (exp, max, compares) the add/mul/fma counters do not see, and nothing is scored
  on it.

A ratio more than 10% from 1 is flagged with its likely reason (judge_bytes, judge_flops): a case whose
working set fits in the L2, or outputs still dirty in the L2 when the kernel ended (cache); an
implementation that moves or computes more than another implementation of the same case does (impl:
the formula is right, that implementation is not minimal); neither (formula: the spec is probably
wrong). An op's formula passes when its best implementation is within 10%, or off for a cache reason.

By default each op is audited at its large case (the one whose formula moves the most bytes; `--quick`:
the small first case), in one dtype (bfloat16 where the op has it), every implementation and baseline
but the torch.compile ones (`--compiled` adds them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from solbench import counting, pipeline, plan, results, sol
from solbench.counters import Counters
from solbench.dtypes import precision
from solbench.jsonio import write_json_atomic
from solbench.job import Case, SpecSource
from solbench.spec import OpSpec

AUDIT_SCHEMA = "solbench.audit/1"
TOLERANCE = 0.10
PREFERRED_DTYPE = "bfloat16"
MIB = 2**20


@dataclass(frozen=True)
class AuditConfig:
    ops: tuple[str, ...] = ("all",)
    dtypes: tuple[str, ...] | None = None     # None: one per op (bfloat16 where it has it); ("all",): every one
    quick: bool = False                       # the small first case instead of the large one
    shape: dict[str, int] | None = None
    impls: tuple[str, ...] | None = None
    compiled: bool = False                    # also the torch.compile baselines (slow to build under ncu)
    device: str = "auto"
    seed: int = 0
    timeout_s: float = 1800.0                 # per ncu process
    ncu: str | None = None
    reports_dir: Path | None = None           # keep the ncu reports, logs and requests here
    cache_dir: Path = pipeline.DEFAULT_RESULTS_DIR / "cache"


@dataclass(frozen=True)
class Verdict:
    verdict: str             # ok | cache | explained | impl | formula | counter | not-judged | n/a
    reason: str = ""

    @property
    def flagged(self) -> bool:
        """Off by more than the tolerance (whatever the reason)."""
        return self.verdict in ("cache", "explained", "impl", "formula", "counter")


@dataclass
class Finding:
    """One call: the spec's numbers, what the counters said, and the verdicts."""

    index: int
    op: str
    case: str
    params: dict[str, Any]
    dtype: str
    impl: str
    kind: str
    spec_bytes: float
    spec_flops: float
    bound: str
    compute_unit: str
    counters: Counters | None = None
    error: str | None = None
    note: str | None = None          # why there are no counters, when that is not an error
    bytes: Verdict = Verdict("n/a")
    flops: Verdict = Verdict("n/a")

    @property
    def bytes_ratio(self) -> float | None:
        return _ratio(self.counters.dram_bytes, self.spec_bytes) if self.counters else None

    @property
    def flops_ratio(self) -> float | None:
        return _ratio(self.counters.flops, self.spec_flops) if self.counters else None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "op": self.op, "case": self.case, "params": self.params, "dtype": self.dtype, "impl": self.impl,
                "kind": self.kind, "spec_bytes": self.spec_bytes, "spec_flops": self.spec_flops, "bound": self.bound,
                "compute_unit": self.compute_unit, "counters": self.counters.to_json() if self.counters else None,
                "error": self.error, "note": self.note, "bytes_ratio": self.bytes_ratio, "flops_ratio": self.flops_ratio,
                "bytes": dataclasses.asdict(self.bytes), "flops": dataclasses.asdict(self.flops)}


@dataclass
class OpVerdict:
    """An op's formulas, judged by its best implementation."""

    op: str
    spec_file: str
    case: str
    dtype: str
    bytes: Verdict
    flops: Verdict
    best_bytes: str | None = None       # the implementation that came closest
    best_flops: str | None = None

    @property
    def passed(self) -> bool:
        return self.bytes.verdict in ("ok", "cache", "explained") and \
            self.flops.verdict in ("ok", "explained", "not-judged", "n/a")


@dataclass
class Audit:
    findings: list[Finding]
    ops: list[OpVerdict]
    session: dict[str, Any]
    env: dict[str, Any]
    config: dict[str, Any]
    command: str = ""
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))

    @property
    def failed(self) -> bool:
        return any(not o.passed for o in self.ops) or any(f.error for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"schema": AUDIT_SCHEMA, "created": self.created, "command": self.command,
                "solbench": results.solbench_version(), "git_sha": results.git_sha(), "tolerance": TOLERANCE,
                "env": self.env, "config": self.config, "session": self.session,
                "ops": [{**dataclasses.asdict(o), "passed": o.passed} for o in self.ops],
                "calls": [f.to_json() for f in self.findings],
                "summary": {"ops": len(self.ops), "passed": sum(o.passed for o in self.ops),
                            "bytes_ok": sum(o.bytes.verdict in ("ok", "cache") for o in self.ops),
                            "bytes_explained": sum(o.bytes.verdict == "explained" for o in self.ops),
                            "flops_explained": sum(o.flops.verdict == "explained" for o in self.ops),
                            "flops_judged": sum(o.flops.verdict not in ("not-judged", "n/a") for o in self.ops),
                            "flops_ok": sum(o.flops.verdict == "ok" for o in self.ops),
                            "errors": sum(1 for f in self.findings if f.error),
                            "flagged_formulas": [o.op for o in self.ops if not o.passed]}}


def write(audit: Audit, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, audit.to_json())
    return path


# ---------------------------------------------------------------- the verdicts (pure)

def judge_bytes(f: Finding, l2_bytes: int | None, others: list[Finding]) -> Verdict:
    """DRAM bytes against the spec's bytes; `others` are the other calls of the same case and dtype."""
    if f.counters is None or f.spec_bytes <= 0:
        return Verdict("n/a", (f.note or "no counters") if f.counters is None else "the spec counts no bytes")
    r = f.counters.dram_bytes / f.spec_bytes
    if abs(r - 1) <= TOLERANCE:
        return Verdict("ok")
    l2 = l2_bytes or 0
    if r < 1 - TOLERANCE:
        short = f.spec_bytes - f.counters.dram_bytes
        if l2 and f.spec_bytes <= l2:
            return Verdict("cache", f"cache-resident: the case moves {_mib(f.spec_bytes)}, which fits in the "
                                    f"{_mib(l2)} L2, so writes need not reach DRAM before the kernel ends")
        if l2 and short <= 1.1 * l2 and _writes_held_in_l2(f.counters, f.spec_bytes):
            return Verdict("cache", f"outputs still in the L2 when the kernel ended: DRAM saw {_mib(short)} less "
                                    f"than the spec, within one L2 ({_mib(l2)}) of dirty lines written back later")
        return Verdict("formula", f"over-counted? DRAM moved {r:.2f}x the spec's bytes on a case of "
                                  f"{_mib(f.spec_bytes)} (L2 {_mib(l2)}): the formula counts bytes the op need not "
                                  f"move (a tensor read only in part, masked or skipped work, rows not gathered)")
    best = min(((o.bytes_ratio, o.impl) for o in others if o.bytes_ratio is not None), default=None)
    if best is not None and best[0] <= 1 + TOLERANCE:
        return Verdict("impl", f"moves {r:.2f}x the spec's bytes where '{best[1]}' moves {best[0]:.2f}x: "
                               f"{_extra_traffic(r)}")
    return Verdict("formula", f"under-counted? every implementation moved at least "
                              f"{min(r, best[0]) if best else r:.2f}x the spec's bytes: a tensor the formula "
                              f"leaves out (a second read, a scratch buffer, an output), or no implementation "
                              f"reaches the minimum")


def _writes_held_in_l2(c: Counters, spec_bytes: float) -> bool:
    """The SMs wrote more than DRAM received, enough to close the gap: the rest sat in the L2. Without
    the L2-write metric the shortfall alone (at most one L2) is the evidence."""
    if c.l2_write_bytes is None:
        return True
    return c.l2_write_bytes > c.dram_write_bytes and \
        abs(c.dram_read_bytes + c.l2_write_bytes - spec_bytes) <= TOLERANCE * spec_bytes


def _extra_traffic(r: float) -> str:
    k = round(r)
    if k >= 2 and abs(r - k) <= 0.15:
        return f"it reads its input (or writes an intermediate) about {k} times: not fused"
    return "extra traffic (an unfused intermediate, re-reads that miss the L2, padding)"


def judge_flops(f: Finding, others: list[Finding]) -> Verdict:
    """Executed FLOPs against the spec's flops: judged for compute-bound cases only."""
    if f.counters is None:
        return Verdict("n/a", f.note or "no counters")
    if f.bound != "compute":
        return Verdict("not-judged", "memory-bound: the FLOP formula is not scored (add/mul/fma counters miss "
                                     "exp, max, compares), so only the byte metrics are collected")
    if f.spec_flops <= 0:
        return Verdict("n/a", "the spec counts no FLOPs")
    if f.counters.flops is None:
        return Verdict("n/a", "the FLOP metrics were not collected for this call")
    r = f.counters.flops / f.spec_flops
    if abs(r - 1) <= TOLERANCE:
        return Verdict("ok")
    best = min(((abs(o.flops_ratio - 1), o.impl, o.flops_ratio) for o in others if o.flops_ratio is not None),
               default=None)
    if best is not None and best[0] <= TOLERANCE:
        return Verdict("impl", f"executes {r:.2f}x the spec's FLOPs where '{best[1]}' executes {best[2]:.2f}x "
                               f"(recomputation, masked blocks computed anyway, padding)")
    if f.compute_unit == "tensor" and not f.counters.flops_tensor:
        return Verdict("counter", "no tensor-core FLOPs counted: the implementation ran on CUDA cores, or this "
                                  "chip's ncu has no tensor-op metric for its path (see the session's metrics)")
    hint = {2: "the formula counts half the work: multiply-adds counted once (MACs, not FLOPs), or the "
               "implementation computes the masked half",
            0.5: "the formula counts twice the work: multiply-adds counted as 4, or causal masking not halved"}
    near = next((text for k, text in hint.items() if abs(r / k - 1) <= TOLERANCE), None)
    return Verdict("formula", near or f"the hardware executed {r:.2f}x the spec's FLOPs")


def judge(findings: list[Finding], l2_bytes: int | None) -> None:
    """Fill in every finding's verdicts (each against the other calls of its case and dtype)."""
    for f in findings:
        others = [o for o in findings if o is not f and (o.op, o.case, o.dtype) == (f.op, f.case, f.dtype)]
        f.bytes = judge_bytes(f, l2_bytes, others)
        f.flops = judge_flops(f, others)


def op_verdicts(findings: list[Finding], spec_files: dict[str, str], l2_bytes: int | None,
                explained: dict[str, dict[str, str]] | None = None) -> list[OpVerdict]:
    """Per op (and case, dtype): its formulas' verdicts. A formula is right when some implementation
    matches it (ok), or misses it only for a cache reason; otherwise the verdict and reason of the
    implementation that came closest (a formula the best implementation misses is the formula's fault),
    unless the spec's `audit` field says why its formula differs by design (`explained`, op -> formula ->
    reason): then 'explained', with the measured ratio beside the spec's reason."""
    explained = explained or {}
    out = []
    for key in dict.fromkeys((f.op, f.case, f.dtype) for f in findings):
        group = [f for f in findings if (f.op, f.case, f.dtype) == key]
        counted = [f for f in group if f.counters is not None]
        if not counted:
            none = Verdict("n/a", "no implementation was counted: " + (group[0].error or ""))
            out.append(OpVerdict(key[0], spec_files.get(key[0], ""), key[1], key[2], none, none))
            continue
        b = _closest(counted, lambda f: f.bytes, lambda f: f.bytes_ratio)
        fl = _closest(counted, lambda f: f.flops, lambda f: f.flops_ratio)
        # 'impl' on the closest call: the one it was compared with missed the other way; alone, it says why.
        bytes_v = judge_bytes(b, l2_bytes, []) if b.bytes.verdict == "impl" else b.bytes
        flops_v = judge_flops(fl, []) if fl.flops.verdict == "impl" else fl.flops
        why = explained.get(key[0], {})
        bytes_v = _explain(bytes_v, why.get("bytes"), b.bytes_ratio)
        flops_v = _explain(flops_v, why.get("flops"), fl.flops_ratio)
        out.append(OpVerdict(key[0], spec_files.get(key[0], ""), key[1], key[2], bytes_v, flops_v, b.impl, fl.impl))
    return out


def _explain(v: Verdict, reason: str | None, ratio: float | None) -> Verdict:
    """A formula verdict the spec explains: 'explained', its ratio and the spec's reason (never 'ok')."""
    if v.verdict != "formula" or not reason:
        return v
    return Verdict("explained", f"{ratio:.2f}x the spec's count, as its audit note says: {reason}"
                   if ratio is not None else f"as the spec's audit note says: {reason}")


def _closest(group: list[Finding], verdict: Callable[[Finding], Verdict],
             ratio: Callable[[Finding], float | None]) -> Finding:
    order = {"ok": 0, "cache": 1, "counter": 2, "not-judged": 3, "n/a": 4}
    return min(group, key=lambda f: (order.get(verdict(f).verdict, 5), abs((ratio(f) or 0.0) - 1)))



# ---------------------------------------------------------------- choosing what to audit

def choose_units(spec: OpSpec, units: list[tuple[Case, tuple[str, ...]]], config: AuditConfig
                 ) -> list[tuple[Case, tuple[str, ...]]]:
    """The (case, calls) pairs to audit of one op's planned units: one dtype (unless asked for more), the
    large case (unless --quick or --shape chose it already), no torch.compile calls (unless --compiled), no
    call its spec marks `audit: false` (unless --impls names it)."""
    dtypes = list(dict.fromkeys(c.dtype for c, _ in units))
    if config.dtypes is None and dtypes:
        dtypes = [PREFERRED_DTYPE if PREFERRED_DTYPE in dtypes else dtypes[0]]
    compiled = {c.name for c, _ in spec.calls if c.compile}
    # `audit: false` in the spec (SDPA's math backend, flex_attention): left out unless asked for by name.
    unaudited = {c.name for c, _ in spec.calls if not c.audit} - set(config.impls or ())
    chosen = []
    for dtype in dtypes:
        cands = [(c, calls) for c, calls in units if c.dtype == dtype]
        if not (config.quick or config.shape):
            cands = [max(cands, key=lambda u: _size(spec, u[0]))]
        for case, calls in cands:
            keep = tuple(n for n in calls if (config.compiled or n not in compiled) and n not in unaudited)
            if keep:
                chosen.append((case, keep))
    return chosen


def _size(spec: OpSpec, case: Case) -> tuple[float, float]:
    """What 'the large case' means: the most bytes by the formula, then the most FLOPs (first on a tie)."""
    env = case.env()
    try:
        return spec.bytes_for(case.dtype, env), float(spec.flops.evaluate(env))
    except Exception:
        return 0.0, 0.0


def finding_for(index: int, spec: OpSpec, case: Case, impl: str, peaks: Any) -> Finding:
    """The spec's numbers for one call, and whether its case is compute- or memory-bound."""
    env = case.env()
    kind = next(k for c, k in spec.calls if c.name == impl)
    unit = spec.compute_unit(case.dtype)
    p = precision(case.dtype)
    flops = float(spec.flops.evaluate(env))
    nbytes = spec.bytes_for(case.dtype, env)
    _, bound = sol.t_sol(flops, nbytes, peaks.compute_peak(unit, sol.peak_key(unit, p.tensor_key, p.size)),
                         peaks.memory_bandwidth)
    return Finding(index, spec.op, case.label, dict(case.params), case.dtype, impl, kind, nbytes, flops, bound, unit)


# ---------------------------------------------------------------- the audit

def run(config: AuditConfig, specs: dict[str, OpSpec], command: str = "",
        on_note: Callable[[str], None] | None = None) -> Audit:
    """Plan, count (one ncu pass), judge. UserError for bad flags, a missing ncu or a device without CUDA."""
    ncu = counting.require_ncu(True, config.ncu, field="--ncu")
    run_config = pipeline.RunConfig(
        selection=plan.Selection(ops=config.ops, dtypes=None if config.dtypes in (None, ("all",)) else config.dtypes,
                                 shape=config.shape, impls=config.impls, quick=config.quick),
        device=config.device, seed=config.seed, cache_dir=config.cache_dir)
    prepared = pipeline.prepare(run_config, specs)
    counting.require_cuda(True, prepared.info, field="--device")
    findings, sites = [], []
    for p in prepared.plans:
        for case, calls in choose_units(p.spec, [(u.case, u.calls) for u in p.units], config):
            for impl in calls:
                f = finding_for(len(findings), p.spec, case, impl, prepared.peaks)
                findings.append(f)
                # FLOPs are judged for compute-bound cases only: the others skip ncu's costly FLOP passes.
                sites.append(counting.CallSite(f.index, SpecSource.of(p.spec), p.spec.op, dict(case.params),
                                               case.dtype, impl, count_flops=f.bound == "compute"))
    counted, session = counting.count_calls(sites, ncu, prepared.probe.device, config.seed, config.timeout_s,
                                            config.reports_dir, on_note)
    for f in findings:
        got = counted[f.index]
        f.counters, f.error, f.note = got.counters, got.error, got.note
    judge(findings, prepared.info.l2_bytes)
    spec_files = {p.spec.op: str(p.spec.path) for p in prepared.plans}
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(config).items()}
    explained = {p.spec.op: p.spec.audit for p in prepared.plans if p.spec.audit}
    return Audit(findings, op_verdicts(findings, spec_files, prepared.info.l2_bytes, explained), session.to_json(),
                 pipeline.environment(prepared.info), cfg, command)


def _ratio(measured: float | None, spec: float) -> float | None:
    return measured / spec if spec and measured is not None else None


def _mib(n: float) -> str:
    return f"{n / MIB:,.1f} MiB"
