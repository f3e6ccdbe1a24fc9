"""Build and load the solbench_kernels library (JIT, cached; or ahead of time).

The build compiles every .cu / .cpp under csrc/ plus one file it generates from the op
table (codegen.py: schemas, checked wrappers, registrations) into the build directory.
Nothing here runs at import: torch is imported inside the functions, so importing
kernels_ext stays cheap and never touches CUDA (CPU-only CI imports it).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernels_ext.optable import CSRC, NAMESPACE, op_names

LIBRARY_NAMESPACE = NAMESPACE
_SOURCE_SUFFIXES = (".cu", ".cpp")
_HASHED_SUFFIXES = (".cu", ".cpp", ".cuh", ".h", ".yaml")
_BUILD_OK = "BUILD_OK"  # written after a successful build; a half-built dir has none
_CACHE_ENV = "SOLBENCH_KERNELS_CACHE"
_PREBUILT_ENV = "SOLBENCH_KERNELS_LIB"
_ARCH_ENV = "TORCH_CUDA_ARCH_LIST"

# Host flags for the binding files; device flags for the kernels. No --use_fast_math:
# kernels pick fast intrinsics explicitly where the error is below an output ulp
# (see csrc/activation/activation.cu), and keep accurate expf/erff elsewhere.
CXX_FLAGS = ["-O3"]
CUDA_FLAGS = ["-O3", "-lineinfo", "--expt-relaxed-constexpr"]
# A launcher or custom impl the generated registrations call but no source defines (a
# misspelt SK_MAP_OP, a signature that differs from the table's) fails the link, naming
# the function, instead of failing to load on the GPU machine.
LD_FLAGS = ["-Wl,--no-undefined"]
GENERATED_DIR = "generated"

Progress = Callable[[str], None]


class KernelBuildError(RuntimeError):
    """The CUDA library failed to compile or link; the message names the file."""


@dataclass(frozen=True)
class BuildPlan:
    name: str            # library (and ninja target) name, unique per key
    directory: Path      # build directory, keyed by the hash of everything below
    sources: tuple[Path, ...]
    arch_flags: tuple[str, ...]
    cuda_flags: tuple[str, ...]
    cxx_flags: tuple[str, ...]
    generated_code: str = ""  # the C++ the op table generates (codegen.generate)

    @property
    def library(self) -> Path:
        return self.directory / f"{self.name}.so"

    @property
    def generated_source(self) -> Path:
        from kernels_ext.codegen import GENERATED_NAME

        return self.directory / GENERATED_DIR / GENERATED_NAME


def kernel_sources() -> list[Path]:
    """Every hand-written translation unit: kernel .cu files and binding .cpp files (the
    build adds the generated registrations)."""
    return sorted(p for p in CSRC.rglob("*") if p.suffix in _SOURCE_SUFFIXES)


def generated_code() -> str:
    """The C++ the op table generates (schemas, checked wrappers, registrations)."""
    from kernels_ext.codegen import generate
    from kernels_ext.optable import load_table

    return generate(load_table())


def object_clashes(sources: list[Path]) -> list[tuple[Path, Path]]:
    """Pairs of sources that torch.utils.cpp_extension would compile to the same object
    file (it names objects by file name: x.cu -> x.cuda.o, x.cpp -> x.o, whatever the
    folder), which would break the build."""
    seen: dict[tuple[str, str], Path] = {}
    clashes = []
    for src in sources:
        key = (src.stem, src.suffix)
        if key in seen:
            clashes.append((seen[key], src))
        seen.setdefault(key, src)
    return clashes


def _sources_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(p for p in CSRC.rglob("*") if p.suffix in _HASHED_SUFFIXES):
        h.update(str(p.relative_to(CSRC)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


_ARCH_ENTRY = re.compile(r"^(?:sm_)?(\d+)\.?(\d)([af]?)(\+PTX)?$", re.IGNORECASE)


def parse_arch_list(text: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST ('9.0a', '8.0;8.6+PTX', '9.0 8.0') -> nvcc -gencode flags.

    '9.0' on its own becomes sm_90a: the wgmma kernels of this library need it and
    sm_90a code runs on every compute-capability-9.0 part.
    """
    flags: list[str] = []
    for entry in re.split(r"[;,\s]+", text.strip()):
        if not entry:
            continue
        m = _ARCH_ENTRY.match(entry)
        if m is None:
            raise ValueError(
                f"{_ARCH_ENV}: cannot read {entry!r}; use entries like '9.0a', '8.0', '8.6+PTX'"
            )
        major, minor, suffix, ptx = m.group(1), m.group(2), m.group(3).lower(), m.group(4)
        if (major, minor) == ("9", "0") and not suffix:
            suffix = "a"
        cc = f"{major}{minor}{suffix}"
        flags.append(f"-gencode=arch=compute_{cc},code=sm_{cc}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{cc},code=compute_{cc}")
    if not flags:
        raise ValueError(f"{_ARCH_ENV} is set but empty")
    return flags


def capability_arch_flags(major: int, minor: int) -> list[str]:
    """nvcc flags for one device: Hopper gets sm_90a (wgmma), others their own sm_XY."""
    if (major, minor) == (9, 0):
        return ["-gencode=arch=compute_90a,code=sm_90a"]
    cc = f"{major}{minor}"
    return [f"-gencode=arch=compute_{cc},code=sm_{cc}"]


def arch_flags() -> list[str]:
    """TORCH_CUDA_ARCH_LIST if set, else the current CUDA device's capability."""
    env = os.environ.get(_ARCH_ENV, "").strip()
    if env:
        return parse_arch_list(env)
    import torch

    if not torch.cuda.is_available():
        raise KernelBuildError(
            "kernels_ext: no CUDA device to build for; set TORCH_CUDA_ARCH_LIST "
            "(e.g. '9.0a' for H100/H200) to build without one"
        )
    major, minor = torch.cuda.get_device_capability()
    return capability_arch_flags(major, minor)


def cache_root() -> Path:
    env = os.environ.get(_CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "solbench" / "kernels"


def make_plan(root: Path | None = None) -> BuildPlan:
    """The build for this machine: its directory name is a hash of the sources, flags,
    target architectures and the torch/CUDA versions, so any change rebuilds."""
    import torch

    from kernels_ext.codegen import GENERATED_NAME

    sources = [*kernel_sources(), CSRC / GENERATED_DIR / GENERATED_NAME]
    for first, second in object_clashes(sources):
        raise KernelBuildError(
            f"kernels_ext: {first.relative_to(CSRC.parent)} and {second.relative_to(CSRC.parent)} "
            "would build the same object file (the extension build names objects by file "
            "name): rename one")
    archs = tuple(arch_flags())
    generated = generated_code()
    key_text = "\n".join(
        [
            _sources_digest(),
            hashlib.sha256(generated.encode()).hexdigest(),
            " ".join(CXX_FLAGS),
            " ".join(CUDA_FLAGS),
            " ".join(archs),
            torch.__version__,
            str(torch.version.cuda),
            sys.platform,
        ]
    )
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    directory = (root or cache_root()) / key
    return BuildPlan(
        name=f"{LIBRARY_NAMESPACE}_{key}",
        directory=directory,
        sources=tuple(kernel_sources()),
        arch_flags=archs,
        cuda_flags=tuple(CUDA_FLAGS),
        cxx_flags=tuple(CXX_FLAGS),
        generated_code=generated,
    )


def _failed_file(log: str, plan: BuildPlan | None = None) -> str | None:
    """The source behind ninja's first 'FAILED: x.cuda.o' line, if any."""
    m = re.search(r"^FAILED: (\S+)", log, re.MULTILINE)
    if m is None:
        return None
    target = Path(m.group(1)).name
    generated = Path(plan.generated_source) if plan is not None else None
    if generated is not None and target.startswith(generated.stem + "."):
        return f"{generated} (generated from the op table)"
    for src in kernel_sources():
        if target.startswith(src.stem + ".") or target.startswith(src.stem + "_"):
            return str(src.relative_to(CSRC.parent))
    return target


def _compiler_errors(log: str, limit: int = 30) -> str:
    lines = [ln for ln in log.splitlines()
             if re.search(r"error|undefined reference|undefined symbol", ln, re.I)]
    return "\n".join(lines[:limit]) if lines else log[-4000:]


def _explain_build_failure(err: RuntimeError, plan: BuildPlan) -> KernelBuildError:
    log = str(err)
    where = _failed_file(log, plan)
    head = f"kernels_ext: building {plan.name} failed"
    if where:
        head += f" in {where}"
    return KernelBuildError(
        f"{head} (build dir {plan.directory}).\nCompiler says:\n{_compiler_errors(log)}"
    )


def _compile(plan: BuildPlan, verbose: bool) -> None:
    from torch.utils import cpp_extension

    plan.directory.mkdir(parents=True, exist_ok=True)
    plan.generated_source.parent.mkdir(parents=True, exist_ok=True)
    plan.generated_source.write_text(plan.generated_code)
    # cpp_extension reads MAX_JOBS for ninja's parallelism; set it only for this call.
    previous = os.environ.get("MAX_JOBS")
    if previous is None:
        os.environ["MAX_JOBS"] = str(os.cpu_count() or 2)
    try:
        cpp_extension.load(
            name=plan.name,
            sources=[str(s) for s in plan.sources] + [str(plan.generated_source)],
            extra_cflags=list(plan.cxx_flags),
            extra_cuda_cflags=list(plan.cuda_flags) + list(plan.arch_flags),
            extra_ldflags=list(LD_FLAGS),
            extra_include_paths=[str(CSRC)],
            build_directory=str(plan.directory),
            verbose=verbose,
            with_cuda=True,
            is_python_module=False,
        )
    except RuntimeError as err:
        raise _explain_build_failure(err, plan) from err
    finally:
        if previous is None:
            os.environ.pop("MAX_JOBS", None)


def _ops_registered() -> bool:
    """Some solbench_kernels library is loaded (ensure_loaded checks it has every op)."""
    import torch

    namespace = getattr(torch.ops, LIBRARY_NAMESPACE)
    return any(hasattr(namespace, name) for name in op_names())


def build(verbose: bool = False, progress: Progress | None = None) -> Path:
    """Compile (or reuse the cached build of) the library, load it, return the .so path."""
    import torch

    say = progress or (lambda _msg: None)
    plan = make_plan()
    if (plan.directory / _BUILD_OK).exists() and plan.library.exists():
        say(f"using cached kernels {plan.library}")
        if not _ops_registered():
            torch.ops.load_library(str(plan.library))
        return plan.library
    say(f"building {len(plan.sources)} kernel sources in {plan.directory} (first time: minutes)")
    start = time.perf_counter()
    _compile(plan, verbose)  # cpp_extension also loads the library into this process
    (plan.directory / _BUILD_OK).write_text(f"{time.time():.0f}\n")
    say(f"built {plan.library} in {time.perf_counter() - start:.0f} s")
    return plan.library


@functools.cache  # the dispatcher is process-wide: load the library once per process
def ensure_loaded() -> None:
    """Make torch.ops.solbench_kernels usable: already loaded (e.g. an AOT .so loaded by
    the caller), $SOLBENCH_KERNELS_LIB, or the JIT build."""
    import torch

    if not _ops_registered():
        prebuilt = os.environ.get(_PREBUILT_ENV)
        if prebuilt:
            if not Path(prebuilt).is_file():
                raise KernelBuildError(f"{_PREBUILT_ENV}={prebuilt}: no such file")
            torch.ops.load_library(prebuilt)
        else:
            build()
    missing = missing_ops()
    if missing:
        # A JIT build always matches the table (the table is in its cache key); a library
        # loaded by the caller or named by $SOLBENCH_KERNELS_LIB may not.
        raise KernelBuildError(
            f"kernels_ext: the loaded {LIBRARY_NAMESPACE} library has no {', '.join(missing)}: "
            "it was built from another op table. Rebuild it (kernels_ext.build() or "
            f"python -m kernels_ext.build) or point {_PREBUILT_ENV} at a current build.")
    # Fake impls for torch.compile; registering them needs the ops to exist.
    import kernels_ext._fake  # noqa: F401


def missing_ops() -> list[str]:
    """Table ops the loaded library does not define."""
    import torch

    namespace = getattr(torch.ops, LIBRARY_NAMESPACE)
    return [name for name in op_names() if not hasattr(namespace, name)]


def main(argv: list[str] | None = None) -> int:
    """python -m kernels_ext.build --out DIR: build ahead of time, print the .so path."""
    parser = argparse.ArgumentParser(
        prog="python -m kernels_ext.build",
        description="Build the solbench_kernels CUDA library ahead of time.",
    )
    parser.add_argument("--out", type=Path, required=True, help="directory for the .so")
    parser.add_argument("--verbose", action="store_true", help="show the compiler commands")
    args = parser.parse_args(argv)
    try:
        built = build(verbose=args.verbose, progress=lambda m: print(m, file=sys.stderr))
    except (KernelBuildError, ValueError) as err:
        print(err, file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{LIBRARY_NAMESPACE}.so"
    shutil.copy2(built, target)
    print(target.resolve())
    return 0
