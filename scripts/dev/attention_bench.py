"""Dev bench of the attention kernels (kernels_ext/csrc/attention) on a GPU, without the torch
extension build: the launchers are compiled with a C shim (attention_shim.cu) into a shared
library and called through ctypes.

    python scripts/dev/attention_bench.py --out DIR [--debug] [--no-flex] [--max-seconds 220]

Phases, each in its own subprocess so that a variant that faults or hangs (a wrong mbarrier
parity deadlocks) costs only its own results:
  build    nvcc, every .cu in parallel; ptxas registers/smem/spills -> DIR/attention_ptxas.txt
  check    per variant: three one-tile diagnostics first (uniform weights isolate P V and the
           output layout, V = identity isolates the scores and P, then random data), then random
           inputs for every combination (D 64/128, causal, sequence lengths 1/17/1000/4097,
           SQ != SK, GQA 1/4/8, bf16 and fp16) against an fp32 reference; outputs are poisoned
           with NaN first so unwritten elements fail; the LSE is checked too
  bench    every variant and every SDPA backend (cudnn, flash, efficient; flex where torch has
           it) in one process, triton do_bench (L2 flushed), medians; large outputs are checked
           against SDPA instead of the (slow) fp32 reference
Prints a short table last and writes DIR/attention.json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kernels_ext" / "csrc" / "attention"
SOURCES = [CSRC / "params.cu", CSRC / "flash_mma.cu", CSRC / "decode.cu", CSRC / "flash_wgmma.cu",
           ROOT / "scripts" / "dev" / "attention_shim.cu"]
NVCC_FLAGS = ["-std=c++17", "-O3", "-lineinfo", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC",
              "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
              "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
              "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v"]
# decode: the library's choice (the wgmma split kernel on sm_90 for >= 64 rows per K/V head);
# decode_mma: the same with the mma.sync main loop everywhere; wgmma_persistent: flash_wgmma as
# one persistent block per SM.
VARIANTS = {"mma": 0, "wgmma": 1, "decode": 2, "decode_mma": 3, "wgmma_persistent": 4}
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3}   # normwise, as specs/ops/attention.yaml
LSE_TOLERANCE = 2e-3                             # absolute, natural log units (fp32 statistics)
DATASHEET_BW = 4.8e12
# --dry-run (no GPU): the orchestration, checks and tables run on the CPU with small shapes and
# a stand-in "kernel" that computes the reference, so the driver itself is tested before GPU time.
DRY_RUN = os.environ.get("ATTN_DRY_RUN") == "1"
DEVICE = "cpu" if DRY_RUN else "cuda"


def sync() -> None:
    import torch

    if not DRY_RUN:
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------------- build
def build_dir() -> Path:
    path = Path(os.environ.get("ATTN_BUILD", "/tmp/attention_build"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def build(out: Path) -> Path:
    build_dir_ = build_dir()
    nvcc = os.environ.get("NVCC", "nvcc")

    def compile_one(src: Path) -> tuple[Path, str]:
        obj = build_dir_ / (src.stem + ".o")
        proc = subprocess.run([nvcc, *NVCC_FLAGS, "-c", str(src), "-o", str(obj)], capture_output=True,
                              text=True)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise SystemExit(f"BUILD FAILED: {src.relative_to(ROOT)}\n{log[-6000:]}")
        return obj, log

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(SOURCES)) as pool:
        results = list(pool.map(compile_one, SOURCES))
    lib = build_dir_ / "libsk_attention.so"
    proc = subprocess.run([nvcc, "-shared", "-o", str(lib), *(str(o) for o, _ in results)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"LINK FAILED\n{proc.stdout}{proc.stderr}")
    lines = []
    for (obj, log), src in zip(results, SOURCES):
        lines.append(f"== {src.relative_to(ROOT)}")
        lines += [ln for ln in log.splitlines() if re.search(r"entry function|Used \d+ registers|spill|C75\d\d", ln)]
    (out / "attention_ptxas.txt").write_text("\n".join(lines) + "\n")
    spills = [ln for ln in lines if re.search(r"[1-9]\d* bytes spill", ln)]
    serial = [ln for ln in lines if "C751" in ln]
    print(f"build: {time.perf_counter() - start:.1f} s, {len(spills)} spilling kernels, "
          f"{len(serial)} wgmma serialisation warnings", flush=True)
    return lib


# ------------------------------------------------------------------------------------- library
class Lib:
    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        L = self.lib
        i64, f32, vp = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
        L.sk_attention_run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, vp, vp, vp, vp, vp, i64, i64, i64,
                                       i64, i64, i64, f32, ctypes.c_int, vp, ctypes.c_size_t, vp,
                                       ctypes.POINTER(ctypes.c_int)]
        L.sk_attention_run.restype = ctypes.c_int
        L.sk_attention_decode_workspace.argtypes = [ctypes.c_int, ctypes.c_int, i64, i64, i64, i64, i64, i64, f32,
                                                    ctypes.c_int]
        L.sk_attention_decode_workspace.restype = ctypes.c_size_t
        L.sk_attention_status_message.argtypes = [ctypes.c_int]
        L.sk_attention_status_message.restype = ctypes.c_char_p
        L.sk_cuda_error_message.argtypes = [ctypes.c_int]
        L.sk_cuda_error_message.restype = ctypes.c_char_p
        L.sk_flash_mma_config_count.argtypes = [ctypes.c_int]
        L.sk_flash_mma_config_name.argtypes = [ctypes.c_int, ctypes.c_int]
        L.sk_flash_mma_config_name.restype = ctypes.c_char_p

    def mma_configs(self, d: int) -> list[tuple[int, str]]:
        return [(i, self.lib.sk_flash_mma_config_name(d, i).decode()) for i in
                range(self.lib.sk_flash_mma_config_count(d))]

    def prepare(self, variant: str, q, k, v, causal: bool, config: int = -1, scale: float | None = None):
        """A no-argument launcher writing into preallocated (o, lse) (allocation outside timing)."""
        import torch

        b, hq, sq, d = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        dtype = 0 if q.dtype == torch.bfloat16 else 1
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        o = torch.full_like(q, float("nan"))
        lse = torch.full((b, hq, sq), float("nan"), device=q.device, dtype=torch.float32)
        ws, ws_bytes = None, 0
        if variant.startswith("decode"):
            ws_bytes = self.lib.sk_attention_decode_workspace(VARIANTS[variant], dtype, b, hq, hkv, sq, sk, d,
                                                              scale, int(causal))
            ws = torch.empty(max(ws_bytes, 16), device=q.device, dtype=torch.uint8)
        err = ctypes.c_int(0)
        if DRY_RUN and variant.startswith("decode") and not 1 <= sq <= 16:
            raise RuntimeError("decode: decode needs a query length between 1 and 16")
        args = (VARIANTS[variant], config, dtype, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                lse.data_ptr(), b, hq, hkv, sq, sk, d, scale, int(causal), ws.data_ptr() if ws is not None else None,
                ws_bytes)

        def launch():
            if DRY_RUN:  # the stand-in: what a correct kernel writes
                from solbench.torch_ops.attention import attention_reference_lse

                ro, rl = attention_reference_lse(q.float(), k.float(), v.float(), is_causal=causal, scale=scale)
                o.copy_(ro)
                lse.copy_(rl)
                return o
            status = self.lib.sk_attention_run(*args, torch.cuda.current_stream().cuda_stream, ctypes.byref(err))
            if status != 0:
                msg = self.lib.sk_attention_status_message(status).decode()
                if err.value:
                    msg += ": " + self.lib.sk_cuda_error_message(err.value).decode()
                raise RuntimeError(f"{variant}: {msg}")
            return o

        launch.outputs = (o, lse, ws)  # keep them alive with the launcher
        return launch


# ------------------------------------------------------------------------------------- records
@dataclass
class Record:
    phase: str
    variant: str
    case: str
    dtype: str
    ok: bool | None = None
    err: float | None = None
    lse_err: float | None = None
    time_ms: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def case_name(b, h, hkv, sq, sk, d, causal) -> str:
    return f"B{b} H{h} KV{hkv} SQ{sq} SK{sk} D{d} c{int(causal)}"


def pairs(sq: int, sk: int, causal: bool) -> int:
    if not causal:
        return sq * sk
    m = min(sq, sk)
    return m * (sk - m) + m * (m + 1) // 2


def make_inputs(b, h, hkv, sq, sk, d, dtype, seed=0):
    import torch

    g = torch.Generator(device=DEVICE).manual_seed(seed)
    mk = lambda *s: torch.randn(*s, device=DEVICE, generator=g, dtype=torch.float32).to(dtype)  # noqa: E731
    return mk(b, h, sq, d), mk(b, hkv, sk, d), mk(b, hkv, sk, d)


def compare(o, lse, ref_o, ref_lse) -> tuple[float, float, str]:
    """(normwise error of o, max |lse - ref| over rows that see keys, problems)."""
    import torch

    problems = []
    if torch.isnan(o).any():
        problems.append(f"{int(torch.isnan(o).sum())} NaN outputs (unwritten or NaN)")
    of = o.float()
    denom = ref_o.norm().item()
    err = (of - ref_o).norm().item() / denom if denom > 0 else (of - ref_o).abs().max().item()
    finite = torch.isfinite(ref_lse)
    lse_err = (lse[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    if not torch.equal(torch.isneginf(lse), ~finite):
        problems.append("lse -inf pattern differs from the reference")
    if not math.isfinite(err):
        err = float("inf")
    return err, lse_err, "; ".join(problems)


# ------------------------------------------------------------------------------------- check
def check_cases(variant: str) -> list[tuple]:
    """(B, H, HKV, SQ, SK, D, causal, dtype) to check for one variant."""
    cases = []
    if variant.startswith("decode"):
        for d in (64, 128):
            for causal in (False, True):
                for sq, sk, h, hkv in ((1, 1, 8, 8), (1, 17, 8, 2), (4, 1000, 8, 1), (16, 4097, 8, 2),
                                       (16, 20000, 64, 8), (3, 333, 32, 8), (16, 513, 64, 4), (2, 70000, 8, 1)):
                    cases.append((1, h, hkv, sq, sk, d, causal, "bfloat16"))
        cases += [(2, 16, 4, 16, 1000, 128, True, "float16"), (3, 8, 8, 1, 5000, 64, False, "float16"),
                  (1, 4, 4, 8, 3, 128, True, "bfloat16")]   # causal SQ > SK: rows that see nothing
        return shrink(cases)
    for d in (64, 128):
        for causal in (False, True):
            for b, h, hkv, sq, sk in ((1, 2, 2, 1, 1), (1, 2, 2, 17, 17), (2, 4, 4, 1000, 1000),
                                      (1, 2, 2, 4097, 4097), (1, 4, 4, 100, 1000), (1, 4, 4, 1000, 100),
                                      (1, 2, 2, 17, 4097), (1, 8, 2, 300, 300), (1, 8, 1, 257, 513),
                                      (2, 8, 8, 128, 128), (1, 2, 2, 1, 4097)):
                cases.append((b, h, hkv, sq, sk, d, causal, "bfloat16"))
    cases += [(1, 4, 4, 1000, 1000, 128, True, "float16"), (2, 8, 2, 4097, 4097, 64, False, "float16"),
              (1, 8, 4, 333, 2000, 128, True, "float16")]
    return shrink(cases)


def shrink(cases: list[tuple]) -> list[tuple]:
    """The dry run's CPU cannot afford the long sequences: cap them, keep every other feature."""
    if not DRY_RUN:
        return cases
    return [(b, h, hkv, min(sq, 300), min(sk, 300), d, causal, dt) for b, h, hkv, sq, sk, d, causal, dt in cases]


def debug_tiles(lib: Lib, variant: str, config: int, label: str) -> list[Record]:
    """One tile, three inputs that separate the two products; prints a diagnosis line each."""
    import torch

    from solbench.torch_ops.attention import attention_reference_lse

    records = []
    for d in (64, 128):
        sq = 1 if variant.startswith("decode") else 64
        sk = d  # V = identity needs SK == D
        q, k, v = make_inputs(1, 1, 1, sq, sk, d, torch.bfloat16, seed=1)
        tests = {"uniform(q=0): checks P V and the o layout": (torch.zeros_like(q), k, v),
                 "V=identity: checks S = QK^T and P": (q, k, torch.eye(d, device=DEVICE, dtype=q.dtype)[None, None]),
                 "random": (q, k, v)}
        for what, (qq, kk, vv) in tests.items():
            rec = Record("debug", label, f"one tile SQ{sq} SK{sk} D{d}: {what}", "bfloat16")
            try:
                run = lib.prepare(variant, qq, kk, vv, False, config)
                o = run()
                sync()
                o, lse = run.outputs[0], run.outputs[1]
                ref_o, ref_lse = attention_reference_lse(qq.float(), kk.float(), vv.float())
                rec.err, rec.lse_err, rec.note = compare(o, lse, ref_o, ref_lse)
                rec.ok = rec.err <= TOLERANCE["bfloat16"] and rec.lse_err <= LSE_TOLERANCE and not rec.note
                if not rec.ok:
                    diff = (o.float() - ref_o)[0, 0].abs()
                    bad_rows = (diff.amax(1) > 0.05).nonzero().flatten().tolist()
                    bad_cols = (diff.amax(0) > 0.05).nonzero().flatten().tolist()
                    rnd = lambda xs: [round(x, 3) for x in xs]  # noqa: E731
                    rec.extra = {"bad_rows": bad_rows[:12], "n_bad_rows": len(bad_rows), "bad_cols": bad_cols[:12],
                                 "n_bad_cols": len(bad_cols), "o_row0": rnd(o[0, 0, 0, :6].float().tolist()),
                                 "ref_row0": rnd(ref_o[0, 0, 0, :6].tolist()), "lse": rnd(lse[0, 0, :3].tolist()),
                                 "ref_lse": rnd(ref_lse[0, 0, :3].tolist())}
            except Exception as exc:  # noqa: BLE001 - a failing variant is reported, the others go on
                rec.ok, rec.note = False, f"{type(exc).__name__}: {exc}"
            print(f"DEBUG {label:24s} D{d} {what:42s} {'ok ' if rec.ok else 'BAD'} err={rec.err} "
                  f"lse_err={rec.lse_err} {rec.note} {json.dumps(rec.extra) if rec.extra else ''}", flush=True)
            records.append(rec)
    return records


def run_checks(lib: Lib, variant: str, only_debug: bool) -> list[Record]:
    import torch

    from solbench.torch_ops.attention import attention_reference_lse

    configs = [(-1, variant)]
    if variant == "mma":  # config i is a tile shape per head dim (names in the bench table)
        configs = [(i, f"mma:cfg{i}") for i, _ in lib.mma_configs(128)]
        for d in (64, 128):
            print(f"mma configs D{d}: " + ", ".join(f"cfg{i}={n}" for i, n in lib.mma_configs(d)), flush=True)
    records = []
    for config, label in configs:
        records += debug_tiles(lib, variant, config, label)
        if only_debug:
            continue
        for b, h, hkv, sq, sk, d, causal, dt in check_cases(variant):
            dtype = getattr(torch, dt)
            rec = Record("check", label, case_name(b, h, hkv, sq, sk, d, causal), dt)
            try:
                q, k, v = make_inputs(b, h, hkv, sq, sk, d, dtype, seed=hash((b, h, sq, sk, d)) % 1000)
                run = lib.prepare(variant, q, k, v, causal, config)
                run()
                sync()
                o, lse = run.outputs[0], run.outputs[1]
                ref_o, ref_lse = attention_reference_lse(q.float(), k.float(), v.float(), is_causal=causal)
                rec.err, rec.lse_err, rec.note = compare(o, lse, ref_o, ref_lse)
                rec.ok = rec.err <= TOLERANCE[dt] and rec.lse_err <= LSE_TOLERANCE and not rec.note
            except Exception as exc:  # noqa: BLE001
                rec.ok, rec.note = False, f"{type(exc).__name__}: {exc}"
            if not rec.ok:
                print(f"CHECK FAIL {label} {rec.case} {dt}: err={rec.err} lse_err={rec.lse_err} {rec.note}", flush=True)
            records.append(rec)
        # No keys at all: every row is 0 with lse -inf (flash_wgmma hands SK = 0 to flash_mma).
        rec = Record("check", label, "SK0 (no keys)", "bfloat16")
        try:
            q = torch.randn(1, 2, 5, 64, device=DEVICE, dtype=torch.bfloat16)
            kv = torch.empty(1, 2, 0, 64, device=DEVICE, dtype=torch.bfloat16)
            run = lib.prepare(variant, q, kv, kv, False, config)
            run()
            sync()
            o, lse = run.outputs[0], run.outputs[1]
            rec.ok = bool((o == 0).all() and torch.isneginf(lse).all())
            rec.note = "" if rec.ok else "expected o = 0 and lse = -inf"
        except Exception as exc:  # noqa: BLE001
            rec.ok, rec.note = False, f"{type(exc).__name__}: {exc}"
        records.append(rec)
    return records


# ------------------------------------------------------------------------------------- bench
PREFILL = [(4, 32, 32, 4096, 4096, 128, False), (4, 32, 32, 4096, 4096, 128, True),
           (4, 32, 32, 4096, 4096, 64, False), (4, 32, 32, 4096, 4096, 64, True),
           (1, 32, 32, 16384, 16384, 128, False), (1, 32, 32, 16384, 16384, 128, True)]
DECODE = [(1, 64, 8, sq, sk, 128, False) for sq in (1, 16) for sk in (4096, 16384, 65536, 131072)]
if DRY_RUN:
    PREFILL = [(1, 2, 2, 256, 256, 128, False), (1, 2, 2, 256, 256, 64, True)]
    DECODE = [(1, 8, 2, 1, 512, 128, False), (1, 8, 2, 16, 700, 128, False)]


def timer():
    if DRY_RUN:
        def wall(fn, n=3):
            times = []
            for _ in range(n):
                t = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t) * 1e3)
            return sorted(times)[n // 2]

        return wall, "wall clock (dry run)"
    try:
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median"), "triton.do_bench median"
    except ImportError:
        import torch

        flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")

        def events(fn, n=30):
            times = []
            for _ in range(n):
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            return sorted(times)[len(times) // 2]

        return events, "CUDA events median (triton missing)"


def run_bench(lib: Lib, variants: list[str], deadline: float, with_flex: bool) -> list[Record]:
    import torch

    from solbench.torch_ops.attention import flex, sdpa

    bench, how = timer()
    print(f"bench timer: {how}; " + "; ".join(f"D{d} " + ", ".join(f"mma:cfg{i}={n}" for i, n in lib.mma_configs(d))
                                               for d in (64, 128)), flush=True)
    records = []
    # Every variant and SDPA backend first; flex (whose first call compiles) last, in what time is left.
    flex_cases = {("prefill", (4, 32, 32, 4096, 4096, 128, False)), ("decode", (1, 64, 8, 1, 16384, 128, False))}
    jobs = [(kind, c, False) for kind, cases in (("prefill", PREFILL), ("decode", DECODE)) for c in cases]
    if with_flex:
        jobs += [(kind, c, True) for kind, c in sorted(flex_cases) if c in PREFILL + DECODE]
    for kind, (b, h, hkv, sq, sk, d, causal), flex_pass in jobs:
        if time.time() > deadline:
            print(f"bench: time budget reached, skipping {kind} {case_name(b, h, hkv, sq, sk, d, causal)}",
                  flush=True)
            continue
        name = case_name(b, h, hkv, sq, sk, d, causal)
        q, k, v = make_inputs(b, h, hkv, sq, sk, d, torch.bfloat16, seed=7)
        flops = 4 * b * h * d * pairs(sq, sk, causal)
        nbytes = 2 * (2 * b * h * sq * d + 2 * b * hkv * sk * d)
        impls: dict[str, object] = {}
        if kind == "prefill":
            if "mma" in variants:
                for i, _ in lib.mma_configs(d):
                    impls[f"mma:cfg{i}"] = ("ours", "mma", i)
            if "wgmma" in variants:
                impls["wgmma"] = ("ours", "wgmma", -1)
            if "wgmma_persistent" in variants:
                impls["wgmma:pers"] = ("ours", "wgmma_persistent", -1)
        else:
            if "decode" in variants:
                impls["decode"] = ("ours", "decode", -1)
            if "decode_mma" in variants and sq * h // hkv >= 64:   # where decode takes the wgmma path
                impls["decode:mma"] = ("ours", "decode_mma", -1)
            if "mma" in variants:
                impls["mma"] = ("ours", "mma", -1)
        for backend in ("cudnn", "flash", "efficient"):
            impls[f"sdpa:{backend}"] = ("sdpa", backend)
        if flex_pass:
            impls = {"flex": ("flex",)}
        reference = None  # SDPA's output: full fp32 references are too slow at these sizes
        for backend in ("cudnn", "flash", "efficient"):
            try:
                reference = sdpa(q, k, v, is_causal=causal, backend=backend).float()
                break
            except Exception:  # noqa: BLE001 - try the next backend
                continue
        for label, spec in impls.items():
            rec = Record("bench", label, name, "bfloat16", extra={"kind": kind})
            try:
                if spec[0] == "ours":
                    fn = lib.prepare(spec[1], q, k, v, causal, spec[2])
                elif spec[0] == "sdpa":
                    fn = lambda backend=spec[1]: sdpa(q, k, v, is_causal=causal, backend=backend)  # noqa: E731
                else:
                    fn = lambda: flex(q, k, v, is_causal=causal)  # noqa: E731
                out = fn()
                sync()
                if reference is not None:
                    rec.err = ((out.float() - reference).norm() / reference.norm()).item()
                    rec.ok = rec.err <= TOLERANCE["bfloat16"]
                ms = bench(fn)
                rec.time_ms = ms
                rec.tflops = flops / (ms * 1e-3) / 1e12
                rec.gbps = nbytes / (ms * 1e-3) / 1e9
            except Exception as exc:  # noqa: BLE001
                rec.note = f"{type(exc).__name__}: {str(exc)[:200]}"
            records.append(rec)
            print(f"BENCH {kind} {name:36s} {label:26s} "
                  + (f"{rec.time_ms:9.3f} ms {rec.tflops:7.1f} TF/s {rec.gbps:7.0f} GB/s err={rec.err}"
                     if rec.time_ms else rec.note), flush=True)
        del q, k, v, reference
        if not DRY_RUN:
            torch.cuda.empty_cache()
    return records


# ------------------------------------------------------------------------------------- report
def table(records: list[Record]) -> str:
    lines = []
    checks = [r for r in records if r.phase in ("debug", "check")]
    by_variant: dict[str, list[Record]] = {}
    for r in checks:
        by_variant.setdefault(r.variant, []).append(r)
    lines.append("correctness (debug tiles + random cases vs fp32 reference; normwise err, lse abs err):")
    for variant, recs in by_variant.items():
        good = sum(bool(r.ok) for r in recs)
        worst = max((r.err for r in recs if r.err is not None and r.ok), default=float("nan"))
        lines.append(f"  {variant:26s} {good:3d}/{len(recs):3d} ok   worst passing err {worst:.2e}")
        for r in [r for r in recs if not r.ok][:6]:
            lines.append(f"    FAIL {r.case} {r.dtype}: err={r.err} lse={r.lse_err} {r.note[:90]}")
    bench = [r for r in records if r.phase == "bench"]
    for kind, unit in (("prefill", "TFLOP/s"), ("decode", "GB/s (SOL vs 4.8 TB/s)")):
        cases = list(dict.fromkeys(r.case for r in bench if r.extra.get("kind") == kind))
        if not cases:
            continue
        labels = list(dict.fromkeys(r.variant for r in bench if r.case in cases))
        lines.append(f"{kind} bf16, {unit}; '!' = output differs from SDPA beyond tolerance:")
        lines.append("  " + f"{'case':34s}" + "".join(f"{lab[-14:]:>15s}" for lab in labels))
        for c in cases:
            row = f"  {c:34s}"
            for lab in labels:
                r = next((r for r in bench if r.case == c and r.variant == lab), None)
                if r is None or r.time_ms is None:
                    row += f"{'-':>15s}"
                    continue
                val = f"{r.tflops:.0f}" if kind == "prefill" else f"{r.gbps:.0f}({r.gbps * 1e9 / DATASHEET_BW:.2f})"
                row += f"{val + ('!' if r.ok is False else ''):>15s}"
            lines.append(row)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- main
def worker(args) -> None:
    lib = Lib(Path(args.lib))
    if args.worker == "check":
        records = run_checks(lib, args.variant, args.debug)
    else:
        records = run_bench(lib, args.variant.split(","), args.deadline, not args.no_flex)
    Path(args.json).write_text(json.dumps([asdict(r) for r in records]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/attention_out"))
    p.add_argument("--debug", action="store_true", help="only the one-tile diagnostics")
    p.add_argument("--no-flex", action="store_true")
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--max-seconds", type=float, default=225.0)
    p.add_argument("--worker", choices=["check", "bench"])
    p.add_argument("--variant", default="")
    p.add_argument("--lib", default="")
    p.add_argument("--json", default="")
    p.add_argument("--deadline", type=float, default=0.0)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.worker:
        worker(args)
        return

    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prebuilt = build_dir() / "libsk_attention.so"
    if os.environ.get("ATTN_PREBUILT") == "1" and prebuilt.is_file():
        lib = prebuilt   # built by an earlier --build-only call (the lead's combined GPU script)
    else:
        lib = build(out)  # the dry run builds too: the same compile errors, and ctypes must load it
    if args.build_only:
        return
    parts = build_dir() / "parts"
    parts.mkdir(exist_ok=True)
    log = open(out / "attention_log.txt", "w")
    records: list[Record] = []
    ok_variants = []

    def sub(kind: str, variant: str, timeout: float, extra: list[str]) -> None:
        """One worker; its full output goes to the log, diagnostics and failures to stdout too."""
        path = parts / f"{kind}_{variant.replace(',', '_') or 'none'}.json"
        path.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--worker", kind, "--variant", variant, "--lib", str(lib),
               "--json", str(path), *extra]
        text, status = "", ""
        try:
            proc = subprocess.run(cmd, timeout=max(timeout, 5), capture_output=True, text=True)
            text = proc.stdout
            if proc.returncode != 0:
                status = f"{kind} {variant}: worker exited {proc.returncode}\n{proc.stderr[-2500:]}"
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            status = f"{kind} {variant}: TIMED OUT after {timeout:.0f} s (a hang: mbarrier or barrier deadlock?)"
        log.write(text + status + "\n")
        log.flush()
        shown = [ln for ln in text.splitlines() if ln.startswith(("DEBUG", "mma configs", "bench timer"))]
        fails = [ln for ln in text.splitlines() if ln.startswith("CHECK FAIL")]
        print("\n".join(shown + fails[:12] + ([f"... {len(fails) - 12} more failures in the log"]
                                               if len(fails) > 12 else [])), flush=True)
        if status:
            print(status, flush=True)
        if path.exists():
            records.extend(Record(**r) for r in json.loads(path.read_text()))

    for variant in ("mma", "decode_mma", "decode", "wgmma", "wgmma_persistent"):
        before = len(records)
        sub("check", variant, 90, ["--debug"] if args.debug else [])
        if any(r.ok for r in records[before:]):
            ok_variants.append(variant)
    if not args.debug:
        deadline = t0 + args.max_seconds
        sub("bench", ",".join(ok_variants), deadline - time.time() + 30,
            ["--deadline", str(deadline)] + (["--no-flex"] if args.no_flex else []))
    log.close()
    (out / "attention.json").write_text(json.dumps({"elapsed_s": time.time() - t0,
                                                    "records": [asdict(r) for r in records]}, indent=1))
    print(f"\n=== attention dev bench ({time.time() - t0:.0f} s; every record in {out}/attention.json, "
          f"worker output in attention_log.txt) ===")
    print(table(records))


if __name__ == "__main__":
    main()
