"""`python -m kernels_ext.compile_check`: compile every kernel .cu file with the
machine's nvcc (no GPU, no PyTorch needed) for sm_80 and sm_90a, in parallel.

Prints one line per file (time, registers, spills) and exits non-zero if any file
fails or any kernel spills registers to local memory. Exits 0 with
"nvcc not found: compile check skipped" where there is no nvcc.
Binding files need PyTorch's headers: --bindings also compiles them and the
registrations generated from the op table, then checks with nm that every launcher and
custom impl the table names is defined by some source. --ptxas-report DIR writes what
ptxas said of every kernel (registers, shared memory, stack, spills) as Markdown, one
file per architecture (kernels_ext/ptxas.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernels_ext import ptxas
from kernels_ext.optable import CSRC

ARCH_NAMES = ("sm_80", "sm_90a")
ARCHS = tuple(f"-gencode=arch=compute_{a[3:]},code={a}" for a in ARCH_NAMES)
# The defines torch.utils.cpp_extension gives nvcc: kernels must build under them.
TORCH_NVCC_DEFINES = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
NVCC_FLAGS = ("-std=c++17", "-O3", "-lineinfo", "-Xptxas", "-v", *TORCH_NVCC_DEFINES)


@dataclass(frozen=True)
class CheckResult:
    path: Path
    ok: bool
    seconds: float
    max_registers: int
    spilling_kernels: int
    message: str  # compiler output on failure
    log: str = ""  # everything the compiler printed (ptxas -v)


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
    # every function ptxas reports counts here, not only kernels: a noinline helper that spills
    # slows its kernel all the same
    regs = [int(m.group(1)) for m in ptxas.USED.finditer(log)]
    spills = sum(1 for m in ptxas.STACK.finditer(log) if int(m.group(2)) or int(m.group(3)))
    return (max(regs) if regs else 0, spills)


def object_path(src: Path, out_dir: Path) -> Path:
    """A unique object name per source (two families may both have a params.cu)."""
    return out_dir / "obj" / (_source_name(src).replace("/", "__") + ".o")


def _source_name(path: Path) -> str:
    """A source's path relative to csrc/ (its file name where it lies elsewhere)."""
    try:
        return path.relative_to(CSRC).as_posix()
    except ValueError:
        return path.name


def compile_one(nvcc: str, src: Path, out_dir: Path) -> CheckResult:
    obj = object_path(src, out_dir)
    obj.parent.mkdir(parents=True, exist_ok=True)
    cmd = [nvcc, *NVCC_FLAGS, *ARCHS, "-c", str(src), "-o", str(obj)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    regs, spills = summarize_ptxas(log)
    if proc.returncode != 0:
        errors = "\n".join(ln for ln in log.splitlines() if "ptxas info" not in ln
                           and "bytes stack frame" not in ln)
        return CheckResult(src, False, seconds, regs, spills, errors.strip(), log)
    return CheckResult(src, True, seconds, regs, spills, "", log)


def cuda_include_dir() -> Path | None:
    """The CUDA headers next to nvcc (or under $CUDA_HOME, /usr/local/cuda)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    candidates = [Path(nvcc).resolve().parent.parent / "include", Path("/usr/local/cuda/include")]
    if os.environ.get("CUDA_HOME"):
        candidates.insert(0, Path(os.environ["CUDA_HOME"]) / "include")
    return next((c for c in candidates if (c / "cuda_runtime_api.h").exists()), None)


def host_command(out_dir: Path) -> list[str] | None:
    """The host compiler command for binding files against the installed torch headers,
    or None where torch, a C++ compiler or the CUDA headers are missing."""
    try:
        from torch.utils.cpp_extension import include_paths
    except ImportError:
        return None
    cxx = shutil.which("c++") or shutil.which("g++")
    cuda_include = cuda_include_dir()
    if cxx is None or cuda_include is None:
        return None
    # CPU builds of torch ship c10/cuda headers without this generated one.
    stub = out_dir / "stub" / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return [cxx, "-std=c++20", "-O0", "-fPIC", "-Wall", "-Wno-unused-function",
            f"-I{out_dir / 'stub'}", *(f"-I{p}" for p in include_paths()), f"-I{cuda_include}",
            f"-I{CSRC}"]


def binding_sources(out_dir: Path) -> list[Path]:
    """The binding .cpp files and the registrations generated from the op table (written
    into out_dir, as the build writes them into its build directory)."""
    from kernels_ext.codegen import GENERATED_NAME, generate
    from kernels_ext.optable import load_table

    generated = out_dir / "generated" / GENERATED_NAME
    generated.parent.mkdir(parents=True, exist_ok=True)
    generated.write_text(generate(load_table()))
    return [*sorted((CSRC / "bindings").glob("*.cpp")), generated]


def compile_binding(command: list[str], src: Path, out_dir: Path) -> CheckResult:
    obj = object_path(src, out_dir)
    obj.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    proc = subprocess.run([*command, "-c", str(src), "-o", str(obj)], capture_output=True,
                          text=True)
    log = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines()
                    if "error" in ln or "warning" in ln)
    return CheckResult(src, proc.returncode == 0, time.perf_counter() - start, 0, 0, log)


def _symbols(obj: Path, undefined: bool) -> set[str]:
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", flag, str(obj)], capture_output=True, text=True).stdout
    return {ln.split()[-1] for ln in out.splitlines() if ln.split()}


def _demangle(names: list[str]) -> list[str]:
    filt = shutil.which("c++filt")
    if filt is None:
        return names
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout
    return out.splitlines() or names


def missing_symbols(objects: list[Path]) -> list[str]:
    """Functions of namespace sk that an object calls and no object defines: a launcher
    or custom impl the op table names that no source implements (or implements with
    another signature): the library would fail to link."""
    defined: set[str] = set()
    wanted: dict[str, Path] = {}
    for obj in objects:
        defined |= _symbols(obj, undefined=False)
        for sym in _symbols(obj, undefined=True):
            wanted.setdefault(sym, obj)
    missing = sorted(sym for sym in wanted if sym not in defined and sym.startswith("_ZN2sk"))
    return [f"{name}  (needed by {wanted[sym].name.removesuffix('.o').replace('__', '/')})"
            for sym, name in zip(missing, _demangle(missing), strict=False)]


def check_bindings(out_dir: Path, jobs: int, kernels_ok: bool) -> list[CheckResult]:
    """Compile the binding files and the generated registrations against the torch
    headers, then check that every sk:: function they call is defined somewhere."""
    command = host_command(out_dir)
    if command is None or shutil.which("nm") is None:
        return []
    sources = binding_sources(out_dir)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda src: compile_binding(command, src, out_dir), sources))
    if not kernels_ok or not all(r.ok for r in results):
        return results
    start = time.perf_counter()
    missing = missing_symbols(sorted((out_dir / "obj").glob("*.o")))
    message = ("undefined (define them with SK_MAP_OP / in namespace sk::ops or sk::impl, "
               "with the signature in README.md):\n" + "\n".join(missing)) if missing else ""
    results.append(CheckResult(out_dir / "link", not missing, time.perf_counter() - start, 0, 0,
                               message))
    return results


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(CSRC.parent))
    except ValueError:
        return {"link": "link check (every called sk:: function is defined)"}.get(
            path.name, f"{path.name} (generated from the op table)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels_ext.compile_check")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiler processes")
    parser.add_argument("--bindings", action="store_true",
                        help="also compile the binding .cpp files and the registrations "
                             "generated from the op table (needs torch headers), and check "
                             "that every launcher they call is defined")
    parser.add_argument("--ptxas-report", type=Path, metavar="DIR",
                        help="write ptxas.log and ptxas_sm80.md, ptxas_sm90a.md (registers, shared memory, stack, "
                             "spills of every kernel) into DIR")
    parser.add_argument("--check-ptxas-report", type=Path, metavar="DIR",
                        help="fail if DIR's committed report no longer matches the sources (checked where this "
                             "nvcc is the one that made it)")
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
            results += check_bindings(out_dir, args.jobs, all(r.ok for r in results))
        for r in results:
            bad = (not r.ok) or r.spilling_kernels > 0
            failures += bad
            status = "FAIL" if bad else "ok  "
            detail = f"{r.seconds:5.1f} s"
            if r.max_registers:
                detail += f", max {r.max_registers} registers, {r.spilling_kernels} spilling"
            print(f"{status} {_display(r.path)} ({detail})")
            if r.message:
                print("\n".join("     " + ln for ln in r.message.splitlines()[:40]))
    print(f"{len(results) - failures}/{len(results)} compiled cleanly "
          f"(sm_80, sm_90a; {Path(nvcc).resolve()})")
    kernels = [r for r in results if r.path.suffix == ".cu"]
    if args.check_ptxas_report is None and args.ptxas_report is None:
        return 1 if failures else 0
    release = nvcc_release(nvcc)
    if args.check_ptxas_report is not None and all(r.ok for r in kernels):
        failures += not check_ptxas_report(args.check_ptxas_report, release, kernels)
    if args.ptxas_report is not None:
        for path in write_ptxas_report(args.ptxas_report, release, kernels):
            print(f"ptxas report: {path}")
    return 1 if failures else 0


def nvcc_release(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    return next((ln.strip() for ln in out.splitlines() if "release" in ln), "unknown nvcc")


def report_log(release: str, results: list[CheckResult]) -> str:
    """The report log of these compiles: the nvcc release, then each source's ptxas lines, in path order."""
    ordered = sorted(results, key=lambda r: _display(r.path))
    return ptxas.report_log(((_source_name(r.path), r.log) for r in ordered), release)


def check_ptxas_report(report_dir: Path, release: str, results: list[CheckResult]) -> bool:
    """Whether the committed report still says what ptxas says of the sources now. Another nvcc may
    allocate registers differently, so a report made by another release is not held against the code."""
    committed_path = report_dir / "ptxas.log"
    if not committed_path.exists():
        print(f"FAIL ptxas report: {committed_path} not found; make it with "
              f"`python -m kernels_ext.compile_check --ptxas-report {report_dir}`")
        return False
    committed = committed_path.read_text()
    fresh = report_log(release, results)
    made_by = ptxas.report_compiler(committed)
    if made_by != release:
        print(f"skip ptxas report check: {committed_path} was made by {made_by or 'an unnamed nvcc'}, "
              f"this is {release}")
        return True
    if shutil.which("c++filt") is None:
        print("skip ptxas report check: no c++filt here to match kernels by their demangled names")
        return True
    changes = ptxas.differences(ptxas.parse_report(committed), ptxas.parse_report(fresh))
    if not changes:
        print(f"ok   ptxas report {report_dir} matches the sources")
        return True
    print(f"FAIL ptxas report {report_dir} is out of date ({len(changes)} differences); remake it with "
          f"`python -m kernels_ext.compile_check --ptxas-report {report_dir}`")
    print("\n".join("     " + c for c in changes[:20]))
    return False


def write_ptxas_report(out_dir: Path, release: str, results: list[CheckResult]) -> list[Path]:
    """ptxas.log (each source's ptxas lines) and one Markdown table per architecture, sources in path order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = report_log(release, results)
    (out_dir / "ptxas.log").write_text(log)
    rows = ptxas.parse_report(log)
    header = [f"Made by `python -m kernels_ext.compile_check --ptxas-report DIR` with {release}, "
              f"flags `{' '.join(NVCC_FLAGS)}`. Static shared memory only: the wgmma and TMA kernels size their "
              f"shared-memory ring at launch (dynamic shared memory), which ptxas does not see."]
    written = [out_dir / "ptxas.log"]
    for arch in ARCH_NAMES:
        path = out_dir / f"ptxas_{arch.replace('_', '')}.md"
        notes = [*header, "", ARCH_NOTES[arch]] if arch in ARCH_NOTES else header
        path.write_text(ptxas.markdown(rows, arch, notes))
        written.append(path)
    return written


# The Hopper kernels are guarded (csrc/tile/arch.cuh): on older targets their bodies are left out, so
# ptxas reports an empty kernel there, and a reader of the sm_80 table must not take it for the kernel.
ARCH_NOTES = {"sm_80": "On sm_80 the Hopper-only kernels (wgmma and TMA: flash_wgmma, hgemm_wgmma, fp8_wgmma, "
                       "linear_residual_wgmma, decode_wgmma in gemm_decode.cu) compile to empty bodies, never "
                       "launched on such a device; their rows here describe those stubs, not the kernels."}


if __name__ == "__main__":
    sys.exit(main())
