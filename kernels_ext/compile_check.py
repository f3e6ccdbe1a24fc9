"""`python -m kernels_ext.compile_check`: compile every kernel .cu file with the
machine's nvcc (no GPU, no PyTorch needed) for sm_80 and sm_90a, in parallel.

Prints one line per file (time, registers, spills) and exits non-zero if any file
fails or any kernel spills registers to local memory. Exits 0 with
"nvcc not found: compile check skipped" where there is no nvcc.
Binding files need PyTorch's CUDA headers; --bindings also syntax-checks them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
ARCHS = ("-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a")
# The defines torch.utils.cpp_extension gives nvcc: kernels must build under them.
TORCH_NVCC_DEFINES = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
NVCC_FLAGS = ("-std=c++17", "-O3", "-lineinfo", "-Xptxas", "-v", *TORCH_NVCC_DEFINES)
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


@dataclass(frozen=True)
class CheckResult:
    path: Path
    ok: bool
    seconds: float
    max_registers: int
    spilling_kernels: int
    message: str  # compiler output on failure


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = Path(cuda_home) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else None


def kernel_files() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*.cu") if "bindings" not in p.parts)


def summarize_ptxas(log: str) -> tuple[int, int]:
    """(max registers of any kernel, number of kernels that spill) from ptxas -v output."""
    regs = [int(m.group(1)) for m in _REGS.finditer(log)]
    spills = sum(1 for m in _SPILL.finditer(log) if int(m.group(1)) or int(m.group(2)))
    return (max(regs) if regs else 0, spills)


def compile_one(nvcc: str, src: Path, out_dir: Path) -> CheckResult:
    obj = out_dir / (src.stem + ".o")
    cmd = [nvcc, *NVCC_FLAGS, *ARCHS, "-c", str(src), "-o", str(obj)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    regs, spills = summarize_ptxas(log)
    if proc.returncode != 0:
        errors = "\n".join(ln for ln in log.splitlines() if "ptxas info" not in ln
                           and "bytes stack frame" not in ln)
        return CheckResult(src, False, seconds, regs, spills, errors.strip())
    return CheckResult(src, True, seconds, regs, spills, "")


def check_bindings(out_dir: Path) -> list[CheckResult]:
    """Syntax-check binding files against the installed torch headers (host compiler)."""
    try:
        from torch.utils.cpp_extension import include_paths
    except ImportError:
        return []
    cxx = shutil.which("c++") or shutil.which("g++")
    nvcc = find_nvcc()
    if cxx is None or nvcc is None:
        return []
    candidates = [Path(nvcc).resolve().parent.parent / "include", Path("/usr/local/cuda/include")]
    if os.environ.get("CUDA_HOME"):
        candidates.insert(0, Path(os.environ["CUDA_HOME"]) / "include")
    cuda_include = next((c for c in candidates if (c / "cuda_runtime_api.h").exists()), None)
    if cuda_include is None:
        return []
    # CPU builds of torch ship c10/cuda headers without this generated one.
    stub = out_dir / "stub" / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    results = []
    for src in sorted((CSRC / "bindings").glob("*.cpp")):
        cmd = [cxx, "-std=c++20", "-fsyntax-only", f"-I{out_dir / 'stub'}",
               *(f"-I{p}" for p in include_paths()), f"-I{cuda_include}", str(src)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines() if "error" in ln)
        results.append(CheckResult(src, proc.returncode == 0, time.perf_counter() - start, 0, 0,
                                   log))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels_ext.compile_check")
    parser.add_argument("--jobs", type=int, default=2, help="parallel nvcc processes")
    parser.add_argument("--bindings", action="store_true",
                        help="also syntax-check the binding .cpp files (needs torch headers)")
    args = parser.parse_args(argv)

    nvcc = find_nvcc()
    if nvcc is None:
        print("nvcc not found: compile check skipped")
        return 0
    files = kernel_files()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="solbench-compile-check-") as tmp:
        out_dir = Path(tmp)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda src: compile_one(nvcc, src, out_dir), files))
        if args.bindings:
            results += check_bindings(out_dir)
        for r in results:
            rel = r.path.relative_to(CSRC.parent)
            bad = (not r.ok) or r.spilling_kernels > 0
            failures += bad
            status = "FAIL" if bad else "ok  "
            detail = f"{r.seconds:5.1f} s"
            if r.max_registers:
                detail += f", max {r.max_registers} registers, {r.spilling_kernels} spilling"
            print(f"{status} {rel} ({detail})")
            if r.message:
                print("\n".join("     " + ln for ln in r.message.splitlines()[:40]))
    print(f"{len(results) - failures}/{len(results)} compiled cleanly "
          f"(sm_80, sm_90a; {Path(nvcc).resolve()})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
