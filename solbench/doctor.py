"""`solbench doctor`: is this machine ready to build and benchmark CUDA kernels?

Facts are gathered once into an `EnvFacts` record by the environment probe (envprobe.py); each check
here is a small pure function of those facts that returns PASS / WARN / FAIL with one line of
explanation and, when something is wrong, the fix. Tests fake the facts to walk every failure path
without a GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable

from solbench import nvml
from solbench.envprobe import KERNELS_BUILD_TIMEOUT_S, EnvFacts, gather_facts

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


@dataclass(frozen=True)
class Check:
    name: str
    status: str        # PASS | WARN | FAIL | SKIP
    message: str
    fix: str = ""


# ---------------------------------------------------------------- checks (pure functions of the facts)

def check_cuda(f: EnvFacts) -> Check:
    if f.torch_cuda is None:
        return Check("cuda", FAIL, f"torch {f.torch_version} is a CPU-only build: there is no CUDA device to benchmark",
                     "install a CUDA build of torch, e.g. pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu130 (pick the cuXYZ matching your driver)")
    if not f.cuda_available or f.device_count == 0:
        return Check("cuda", FAIL, f"torch {f.torch_version} (CUDA {f.torch_cuda}) sees no CUDA device",
                     "check `nvidia-smi` lists a GPU, that the driver supports CUDA "
                     f"{f.torch_cuda} (a driver older than the toolkit torch was built with fails here), "
                     "and that CUDA_VISIBLE_DEVICES does not hide it")
    return Check("cuda", PASS, f"torch {f.torch_version} with CUDA {f.torch_cuda}: {f.device_count} device(s)")


def check_device(f: EnvFacts) -> Check:
    if not f.cuda_available:
        return Check("device", SKIP, "no CUDA device")
    cc = ".".join(map(str, f.capability)) if f.capability else "?"
    return Check("device", PASS, f"{f.device_name}, compute capability {cc}, driver {f.driver or 'unknown'}")


def _major(version: str | None) -> int | None:
    m = re.match(r"(\d+)", version or "")
    return int(m.group(1)) if m else None


def check_nvcc(f: EnvFacts) -> Check:
    if f.nvcc_path is None:
        return Check("nvcc", FAIL, "nvcc is not on PATH: the kernel library cannot be compiled",
                     f"install the CUDA toolkit {f.torch_cuda or ''} (same major version as torch's CUDA) and put "
                     "its bin/ on PATH, or set CUDA_HOME to it")
    if f.torch_cuda is None:
        return Check("nvcc", WARN, f"nvcc {f.nvcc_version} found, but torch is a CPU-only build")
    if _major(f.nvcc_version) != _major(f.torch_cuda):
        return Check("nvcc", FAIL,
                     f"nvcc {f.nvcc_version} ({f.nvcc_path}) but torch was built with CUDA {f.torch_cuda}: "
                     "extensions fail to build or load when the major versions differ",
                     f"install CUDA toolkit {_major(f.torch_cuda)}.x and put it first on PATH (or set CUDA_HOME), "
                     f"or install torch built for CUDA {f.nvcc_version}: pip install torch --index-url "
                     f"https://download.pytorch.org/whl/cu{(f.nvcc_version or '').replace('.', '')}")
    return Check("nvcc", PASS, f"nvcc {f.nvcc_version} matches torch's CUDA {f.torch_cuda} ({f.nvcc_path})")


def parse_arch_list(value: str) -> list[tuple[int, int, str]]:
    """'8.0;9.0a 10.0+PTX' -> [(8, 0, ''), (9, 0, 'a'), (10, 0, '+PTX')]; named archs are ignored."""
    out = []
    for item in re.split(r"[;\s,]+", value.strip()):
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", item, flags=re.IGNORECASE)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), (m.group(3) or "") + (m.group(4) or "")))
    return out


def check_arch_list(f: EnvFacts) -> Check:
    cc = f.capability
    if not f.arch_list:
        return Check("arch-list", PASS, "TORCH_CUDA_ARCH_LIST not set: extensions are built for this device's capability")
    if cc is None:
        return Check("arch-list", SKIP, f"TORCH_CUDA_ARCH_LIST={f.arch_list}; no device to compare it with")
    entries = parse_arch_list(f.arch_list)
    want = f"{cc[0]}.{cc[1]}"
    # Specific ('a') suffixes unlock wgmma (sm_90a) and tcgen05 (sm_100a); without them those kernels cannot build.
    suffix_needed = "a" if cc in ((9, 0), (10, 0)) else ""
    exact = [e for e in entries if (e[0], e[1]) == cc]
    ptx_below = [e for e in entries if e[2].upper().endswith("+PTX") and (e[0], e[1]) <= cc]
    if not exact and not ptx_below:
        return Check("arch-list", FAIL,
                     f"TORCH_CUDA_ARCH_LIST={f.arch_list} has no code for this device ({want}): kernels will fail with "
                     "'no kernel image is available for execution on the device'",
                     f"export TORCH_CUDA_ARCH_LIST={want}{suffix_needed} (or unset it) and rebuild the kernels")
    if suffix_needed and not any("a" in e[2].lower() for e in exact):
        return Check("arch-list", WARN,
                     f"TORCH_CUDA_ARCH_LIST={f.arch_list} builds {want} without the '{suffix_needed}' suffix: "
                     f"{'wgmma' if cc == (9, 0) else 'tcgen05'} kernels need sm_{cc[0]}{cc[1]}{suffix_needed}",
                     f"export TORCH_CUDA_ARCH_LIST={want}{suffix_needed}")
    if not exact:
        return Check("arch-list", WARN, f"TORCH_CUDA_ARCH_LIST={f.arch_list}: only PTX for this device ({want}); "
                     "it is JIT-compiled at first use and may miss newer instructions",
                     f"export TORCH_CUDA_ARCH_LIST={want}{suffix_needed}")
    return Check("arch-list", PASS, f"TORCH_CUDA_ARCH_LIST={f.arch_list} covers this device ({want})")


def check_ninja(f: EnvFacts) -> Check:
    if f.ninja_path is None:
        return Check("ninja", FAIL, "ninja not found: torch.utils.cpp_extension cannot build extensions",
                     "pip install ninja (or apt-get install ninja-build)")
    return Check("ninja", PASS, f"ninja at {f.ninja_path}")


def check_cxx_build(f: EnvFacts) -> Check:
    r = f.cxx_build
    if r is None or r.skipped:
        return Check("c++ extension", SKIP, r.skipped if r else "not run")
    abi = f" (torch's C++11 ABI flag: {int(f.cxx_abi)})" if f.cxx_abi is not None else ""
    if r.timed_out:
        return Check("c++ extension", FAIL, f"building a one-function C++ extension did not finish: {r.detail}",
                     "check the compiler is not waiting on a lock in ~/.cache/torch_extensions; rerun with more "
                     "time (--build-timeout)")
    if not r.ok:
        return Check("c++ extension", FAIL, f"a one-function C++ extension failed to build or load: {r.detail}",
                     f"install a C++ compiler compatible with torch's ABI{abi}: g++ 9 or newer on Linux "
                     "(apt-get install g++), and make sure CXX, if set, points to it")
    return Check("c++ extension", PASS, f"a C++ extension builds and loads{abi}")


def check_kernels(f: EnvFacts) -> Check:
    r = f.kernels
    if not f.cuda_available:
        return Check("kernel library", WARN, "no CUDA device: the kernel library cannot run here")
    if r is None or r.skipped:
        return Check("kernel library", WARN if r and "exposes" in r.skipped else SKIP, r.skipped if r else "not run")
    if r.timed_out:
        return Check("kernel library", FAIL, f"kernels_ext.build() did not finish: {r.detail}",
                     "rerun with a longer --build-timeout; set TORCH_CUDA_ARCH_LIST to this device only to build less")
    if not r.ok:
        return Check("kernel library", FAIL, f"kernels_ext build/run failed: {r.detail}",
                     "fix the first compiler error above (run `python -c 'import kernels_ext; kernels_ext.build()'` "
                     "to see it in full); the nvcc and arch-list checks name the usual causes")
    return Check("kernel library", PASS, f"kernels_ext builds, loads and add() is correct ({r.detail})")


def check_nvml(f: EnvFacts) -> Check:
    n = f.nvml
    if not f.cuda_available:
        return Check("nvml", SKIP, "no CUDA device")
    if n is None or n.error:
        return Check("nvml", WARN, f"NVML not readable ({n.error if n else 'not probed'}): runs record no clocks "
                     "or power, and throttling goes unnoticed",
                     "pip install nvidia-ml-py, and check the driver's libnvidia-ml.so is visible in the container")
    power = f", power {n.power_w:.0f} W of {n.power_limit_w:.0f} W" if n.power_w is not None and n.power_limit_w else ""
    return Check("nvml", PASS, f"SM clock {n.sm_mhz} MHz (max {n.sm_max_mhz}){power}")


def check_clocks(f: EnvFacts) -> Check:
    n = f.nvml
    if not f.cuda_available:
        return Check("clocks", SKIP, "no CUDA device")
    if n is None or n.error:
        return Check("clocks", SKIP, "NVML not readable")
    # Idle, user-set clocks and sync boost are deliberate: only heat and power count as slowing down.
    bad = sorted(nvml.slowdowns(n.throttle_reasons))
    if bad:
        return Check("clocks", WARN, f"the GPU is being slowed down: {', '.join(bad)}; timings will read slow",
                     "check cooling and power (nvidia-smi -q -d PERFORMANCE), and that no other job loads the GPU")
    if "user_defined_clocks" in n.throttle_reasons:
        return Check("clocks", PASS, "SM clocks are locked (nvidia-smi -lgc): timings are repeatable")
    if n.app_sm_mhz and n.sm_max_mhz and n.app_sm_mhz < n.sm_max_mhz:
        return Check("clocks", PASS, f"application clock {n.app_sm_mhz} MHz below max {n.sm_max_mhz} MHz: "
                     "kernels run at most at the application clock")
    return Check("clocks", PASS, "clocks not locked: boost varies with load and temperature "
                 f"(for steadier numbers: sudo nvidia-smi -lgc {n.sm_max_mhz or 'MHZ'})")


def check_persistence(f: EnvFacts) -> Check:
    n = f.nvml
    if not f.cuda_available:
        return Check("persistence", SKIP, "no CUDA device")
    if n is None or n.error or n.persistence_mode is None:
        return Check("persistence", SKIP, "persistence mode not readable")
    if not n.persistence_mode:
        return Check("persistence", WARN, "persistence mode is off: the driver unloads between runs, so the "
                     "first CUDA call of every run is slow and clocks start cold",
                     "sudo nvidia-smi -pm 1")
    return Check("persistence", PASS, "persistence mode is on")


def check_other_processes(f: EnvFacts) -> Check:
    n = f.nvml
    if not f.cuda_available:
        return Check("other processes", SKIP, "no CUDA device")
    if n is None or n.error:
        return Check("other processes", SKIP, "NVML not readable")
    if n.other_processes:
        return Check("other processes", WARN, f"{len(n.other_processes)} other process(es) on this GPU: "
                     f"{'; '.join(n.other_processes[:3])}: they steal time and bandwidth from timed kernels",
                     "wait for them to finish, or pick an idle GPU with --device cuda:N")
    return Check("other processes", PASS, "no other compute process on this GPU")


CHECKS: tuple[Callable[[EnvFacts], Check], ...] = (
    check_cuda, check_device, check_nvcc, check_arch_list, check_ninja, check_cxx_build, check_kernels,
    check_nvml, check_clocks, check_persistence, check_other_processes,
)


def run_checks(facts: EnvFacts) -> list[Check]:
    return [check(facts) for check in CHECKS]


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0


# ---------------------------------------------------------------- gathering the facts

# ---------------------------------------------------------------- command

_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red", SKIP: "dim"}


def doctor_command(as_json: bool = False, build: bool = True, build_timeout_s: float = KERNELS_BUILD_TIMEOUT_S,
                   console: Any = None, facts: EnvFacts | None = None) -> int:
    """Print every check (or JSON) and return the exit code: 0 when nothing FAILed, else 1."""
    from solbench.console import make_console

    con = console or make_console()
    if facts is None:
        if as_json:
            facts = gather_facts(build, build_timeout_s)
        else:
            with con.status("checking (building a test extension can take a minute)..."):
                facts = gather_facts(build, build_timeout_s)
    checks = run_checks(facts)
    code = exit_code(checks)
    if as_json:
        con.print_json(json.dumps({"ok": code == 0, "checks": [asdict(c) for c in checks], "facts": asdict(facts)}))
        return code
    for c in checks:
        con.print(f"[{_STYLE[c.status]}]{c.status:<4}[/] {c.name:<16} {c.message}", highlight=False)
        if c.fix and c.status in (FAIL, WARN):
            con.print(f"{'':<4} {'':<16} [bold]fix:[/] {c.fix}", highlight=False)
    if not facts.cuda_available:
        con.print("[bold red]No CUDA device[/]: solbench can still run PyTorch baselines on the CPU, "
                  "but CUDA kernels cannot be built or timed here.", highlight=False)
    return code
