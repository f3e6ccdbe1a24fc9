"""The environment probe behind `solbench doctor`: what this machine has, as one `EnvFacts` record.

Everything that touches the machine is here: torch's build and devices, nvcc, ninja, the
$TORCH_CUDA_ARCH_LIST, NVML (through solbench.nvml), and two probes that build code. Slow or
crash-prone probes (building a C++ extension, building the kernel library) run in a subprocess with
a time limit, so a hung compiler cannot hang the doctor. doctor.py judges the facts; tests fake them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

from solbench import nvml

CXX_BUILD_TIMEOUT_S = 300.0
KERNELS_BUILD_TIMEOUT_S = 900.0


@dataclass
class ProbeResult:
    """Outcome of a probe run in a subprocess."""

    ok: bool
    detail: str               # last meaningful line of output, or the error
    timed_out: bool = False
    skipped: str = ""         # non-empty: the probe did not run, and why


@dataclass
class NvmlFacts:
    error: str | None = None                  # set when NVML could not be read
    sm_mhz: int | None = None
    sm_max_mhz: int | None = None
    app_sm_mhz: int | None = None             # application clock (the target under load)
    default_app_sm_mhz: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)   # solbench.nvml's clock-event names
    persistence_mode: bool | None = None
    other_processes: list[str] = field(default_factory=list)   # "pid name (N MiB)"


@dataclass
class EnvFacts:
    torch_version: str = ""
    torch_cuda: str | None = None             # torch.version.cuda: None for a CPU-only build
    cuda_available: bool = False
    device_count: int = 0
    device_name: str | None = None
    capability: tuple[int, int] | None = None
    driver: str | None = None
    nvcc_path: str | None = None
    nvcc_version: str | None = None           # "13.0"
    arch_list: str | None = None              # $TORCH_CUDA_ARCH_LIST as set
    ninja_path: str | None = None
    cxx_abi: bool | None = None               # torch._C._GLIBCXX_USE_CXX11_ABI
    cxx_build: ProbeResult | None = None
    kernels: ProbeResult | None = None
    nvml: NvmlFacts | None = None


_CXX_PROBE = textwrap.dedent("""
    import sys, tempfile
    from torch.utils.cpp_extension import load_inline
    src = "int64_t solbench_twice(int64_t x) { return 2 * x; }"
    with tempfile.TemporaryDirectory() as d:
        m = load_inline(name="solbench_doctor_cxx", cpp_sources=src, functions=["solbench_twice"],
                        build_directory=d, verbose=False)
        got = m.solbench_twice(21)
    assert got == 42, f"extension returned {got}, expected 42"
    print("OK built and loaded")
""")

_KERNELS_PROBE = textwrap.dedent("""
    import torch, kernels_ext
    if not (hasattr(kernels_ext, "build") and hasattr(kernels_ext, "add")):
        print("SKIP kernels_ext exposes no build()/add()")
        raise SystemExit(0)
    kernels_ext.build()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(1 << 20, device="cuda", generator=g)
    y = torch.randn(1 << 20, device="cuda", generator=g)
    out = kernels_ext.add(x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)
    print("OK add of 2^20 float32 elements matches torch")
""")


def run_probe(code: str, timeout_s: float, env: dict[str, str] | None = None) -> ProbeResult:
    """Run `code` in a fresh Python; its last stdout line starting with OK/SKIP is the verdict."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                              env=env)
    except subprocess.TimeoutExpired:
        return ProbeResult(ok=False, detail=f"no result after {timeout_s:.0f} s", timed_out=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if proc.returncode == 0 and last.startswith("SKIP"):
        return ProbeResult(ok=False, detail="", skipped=last.removeprefix("SKIP").strip())
    if proc.returncode == 0 and last.startswith("OK"):
        return ProbeResult(ok=True, detail=last.removeprefix("OK").strip())
    return ProbeResult(ok=False, detail=_error_line(proc.stderr or proc.stdout))


def _error_line(text: str) -> str:
    """The most telling line of a failed build: the first 'error', else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"\berror\b", ln, flags=re.IGNORECASE) and not ln.startswith("Traceback"):
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


def _nvcc_facts() -> tuple[str | None, str | None]:
    path = shutil.which("nvcc")
    if path is None:
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        candidate = os.path.join(cuda_home, "bin", "nvcc") if cuda_home else ""
        path = candidate if candidate and os.path.isfile(candidate) else None
    if path is None:
        return None, None
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return path, None
    m = re.search(r"release (\d+\.\d+)", text)
    return path, m.group(1) if m else None


def _ninja_path() -> str | None:
    path = shutil.which("ninja")
    if path:
        return path
    try:
        import ninja  # type: ignore[import-not-found]

        return os.path.join(ninja.BIN_DIR, "ninja")
    except Exception:
        return None


def nvml_facts(index: int) -> NvmlFacts:
    """Clocks, power, clock-event reasons, persistence and the other processes of GPU `index`."""
    try:
        dev = nvml.NvmlDevice.open(index)
    except nvml.NvmlUnavailable as exc:
        return NvmlFacts(error=str(exc))
    with dev:
        try:
            facts = NvmlFacts(sm_mhz=dev.clock_mhz("sm"), sm_max_mhz=dev.max_clock_mhz("sm"))
        except Exception as exc:
            return NvmlFacts(error=f"{type(exc).__name__}: {exc}")
        facts.app_sm_mhz = dev.app_clock_mhz("sm")
        facts.default_app_sm_mhz = dev.default_app_clock_mhz("sm")
        facts.power_w, facts.power_limit_w = dev.power_w(), dev.power_limit_w()
        facts.throttle_reasons = dev.clock_events()
        facts.persistence_mode = dev.persistence_mode()
        me = os.getpid()
        facts.other_processes = [p.describe() for p in dev.processes() if p.pid != me]
    return facts


def gather_facts(build: bool = True, build_timeout_s: float = KERNELS_BUILD_TIMEOUT_S,
                 cxx_timeout_s: float = CXX_BUILD_TIMEOUT_S, device_index: int = 0) -> EnvFacts:
    """Probe this machine. Initialises CUDA in this process (doctor is a standalone command)."""
    import torch

    f = EnvFacts(torch_version=torch.__version__, torch_cuda=torch.version.cuda)
    f.cuda_available = bool(torch.cuda.is_available())
    f.device_count = torch.cuda.device_count() if f.cuda_available else 0
    if f.cuda_available and device_index < f.device_count:
        props = torch.cuda.get_device_properties(device_index)
        f.device_name, f.capability = props.name, (props.major, props.minor)
        f.nvml = nvml_facts(device_index)
        f.driver = nvml.driver_version()
    f.nvcc_path, f.nvcc_version = _nvcc_facts()
    f.arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST") or None
    f.ninja_path = _ninja_path()
    f.cxx_abi = nvml.optional(lambda: bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    if not build:
        f.cxx_build = ProbeResult(ok=False, detail="", skipped="skipped (--no-build)")
        f.kernels = ProbeResult(ok=False, detail="", skipped="skipped (--no-build)")
        return f
    f.cxx_build = (run_probe(_CXX_PROBE, cxx_timeout_s) if f.ninja_path
                   else ProbeResult(ok=False, detail="", skipped="needs ninja"))
    if f.cuda_available and f.nvcc_path and f.ninja_path:
        f.kernels = run_probe(_KERNELS_PROBE, build_timeout_s)
    elif f.cuda_available:
        f.kernels = ProbeResult(ok=False, detail="", skipped="needs nvcc and ninja")
    return f
