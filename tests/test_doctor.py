"""Every doctor check, walked through faked facts: each FAIL/WARN says what is wrong and how to fix it;
and the environment probe that gathers the facts."""

from __future__ import annotations

import dataclasses
import io
import json
import sys

import pytest
from rich.console import Console

from solbench import doctor, envprobe
from solbench.doctor import FAIL, PASS, SKIP, WARN
from solbench.envprobe import EnvFacts, NvmlFacts, ProbeResult


def healthy(**changes) -> EnvFacts:
    """An H200 machine on which everything is right; tests break one fact at a time."""
    facts = EnvFacts(
        torch_version="2.11.0+cu130", torch_cuda="13.0", cuda_available=True, device_count=1,
        device_name="NVIDIA H200", capability=(9, 0), driver="580.159.04", nvcc_path="/usr/local/bin/nvcc",
        nvcc_version="13.0", arch_list=None, ninja_path="/usr/bin/ninja", cxx_abi=True,
        cxx_build=ProbeResult(ok=True, detail="built and loaded"),
        kernels=ProbeResult(ok=True, detail="add matches torch"),
        nvml=NvmlFacts(sm_mhz=1980, sm_max_mhz=1980, app_sm_mhz=1980, default_app_sm_mhz=1980, power_w=120,
                       power_limit_w=700, throttle_reasons=["gpu_idle"], persistence_mode=True),
    )
    return dataclasses.replace(facts, **changes)


def by_name(facts: EnvFacts) -> dict[str, doctor.Check]:
    return {c.name: c for c in doctor.run_checks(facts)}


def test_healthy_machine_passes_everything() -> None:
    checks = doctor.run_checks(healthy())
    assert [c.name for c in checks if c.status != PASS] == []
    assert doctor.exit_code(checks) == 0


def test_cpu_only_torch_fails_with_install_fix() -> None:
    c = by_name(healthy(torch_cuda=None, cuda_available=False, device_count=0))["cuda"]
    assert c.status == FAIL and "CPU-only build" in c.message
    assert "download.pytorch.org/whl/cu" in c.fix


def test_no_visible_device_fails_and_exits_1() -> None:
    facts = healthy(cuda_available=False, device_count=0, device_name=None, capability=None, nvml=None)
    checks = by_name(facts)
    assert checks["cuda"].status == FAIL and "sees no CUDA device" in checks["cuda"].message
    assert "nvidia-smi" in checks["cuda"].fix and "CUDA_VISIBLE_DEVICES" in checks["cuda"].fix
    assert checks["device"].status == SKIP
    assert checks["kernel library"].status == WARN
    assert doctor.exit_code(list(checks.values())) == 1


def test_nvcc_major_mismatch_fails_and_says_what_to_install() -> None:
    c = by_name(healthy(nvcc_version="12.4", nvcc_path="/usr/local/cuda-12.4/bin/nvcc"))["nvcc"]
    assert c.status == FAIL
    assert "nvcc 12.4" in c.message and "CUDA 13.0" in c.message
    assert "CUDA toolkit 13.x" in c.fix and "cu124" in c.fix


def test_nvcc_minor_difference_passes() -> None:
    assert by_name(healthy(nvcc_version="13.1"))["nvcc"].status == PASS


def test_missing_nvcc_fails() -> None:
    c = by_name(healthy(nvcc_path=None, nvcc_version=None))["nvcc"]
    assert c.status == FAIL and "not on PATH" in c.message and "CUDA_HOME" in c.fix


@pytest.mark.parametrize("value,status", [
    ("8.0;8.6", FAIL),        # no code for 9.0: "no kernel image is available"
    ("9.0", WARN),            # builds, but wgmma needs sm_90a
    ("9.0a", PASS),
    ("8.0 9.0a", PASS),
    ("8.0+PTX", WARN),        # JIT from PTX only
    ("10.0", FAIL),
])
def test_arch_list_against_hopper(value: str, status: str) -> None:
    c = by_name(healthy(arch_list=value))["arch-list"]
    assert c.status == status, c
    if status == FAIL:
        assert "no kernel image is available" in c.message
        assert c.fix.startswith("export TORCH_CUDA_ARCH_LIST=9.0a")
    if value == "9.0":
        assert "sm_90a" in c.message


def test_arch_list_parser() -> None:
    assert doctor.parse_arch_list("8.0;9.0a 10.0+PTX, Ampere") == [(8, 0, ""), (9, 0, "a"), (10, 0, "+PTX")]


def test_missing_ninja_fails() -> None:
    c = by_name(healthy(ninja_path=None))["ninja"]
    assert c.status == FAIL and "pip install ninja" in c.fix


def test_cxx_build_failure_names_the_error_and_the_abi() -> None:
    facts = healthy(cxx_build=ProbeResult(ok=False, detail="error: 'stoi' is not a member of 'std'"))
    c = by_name(facts)["c++ extension"]
    assert c.status == FAIL and "stoi" in c.message
    assert "ABI" in c.fix and "g++" in c.fix


def test_cxx_build_timeout_fails() -> None:
    c = by_name(healthy(cxx_build=ProbeResult(ok=False, detail="no result after 300 s", timed_out=True)))["c++ extension"]
    assert c.status == FAIL and "did not finish" in c.message and "--build-timeout" in c.fix


def test_kernel_library_failure_and_missing_entry_points() -> None:
    c = by_name(healthy(kernels=ProbeResult(ok=False, detail="nvcc error: identifier undefined")))["kernel library"]
    assert c.status == FAIL and "identifier undefined" in c.message and "kernels_ext.build()" in c.fix
    c = by_name(healthy(kernels=ProbeResult(ok=False, detail="", skipped="kernels_ext exposes no build()/add()")))
    assert c["kernel library"].status == WARN


def test_nvml_unreadable_warns() -> None:
    c = by_name(healthy(nvml=NvmlFacts(error="nvmlInit failed: Driver Not Loaded")))
    assert c["nvml"].status == WARN and "Driver Not Loaded" in c["nvml"].message
    assert "nvidia-ml-py" in c["nvml"].fix
    assert c["clocks"].status == SKIP and c["persistence"].status == SKIP


def test_thermal_throttling_warns() -> None:
    nvml = dataclasses.replace(healthy().nvml, throttle_reasons=["hw_thermal_slowdown", "sw_thermal_slowdown"])
    c = by_name(healthy(nvml=nvml))["clocks"]
    assert c.status == WARN and "hw_thermal_slowdown, sw_thermal_slowdown" in c.message and "cooling" in c.fix


def test_idle_and_sync_boost_are_not_slowdowns() -> None:
    nvml = dataclasses.replace(healthy().nvml, throttle_reasons=["gpu_idle", "sync_boost"])
    assert by_name(healthy(nvml=nvml))["clocks"].status == PASS


def test_locked_and_application_clocks_are_reported() -> None:
    locked = dataclasses.replace(healthy().nvml, throttle_reasons=["user_defined_clocks"])
    assert "locked" in by_name(healthy(nvml=locked))["clocks"].message
    low_app = dataclasses.replace(healthy().nvml, app_sm_mhz=1500)
    assert "application clock 1500 MHz" in by_name(healthy(nvml=low_app))["clocks"].message


def test_persistence_off_warns() -> None:
    c = by_name(healthy(nvml=dataclasses.replace(healthy().nvml, persistence_mode=False)))["persistence"]
    assert c.status == WARN and c.fix == "sudo nvidia-smi -pm 1"


def test_other_processes_warn() -> None:
    nvml = dataclasses.replace(healthy().nvml, other_processes=["4242 python (30000 MiB)"])
    c = by_name(healthy(nvml=nvml))["other processes"]
    assert c.status == WARN and "4242 python" in c.message and "--device cuda:N" in c.fix


def test_nvml_facts_come_from_the_one_wrapper(monkeypatch) -> None:
    """What the doctor reads, and in which words, is solbench.nvml's: a stand-in pynvml shows both."""
    from tests.fake_nvml import fake_pynvml

    proc = type("Proc", (), {"pid": 4242, "usedGpuMemory": 30000 * 2**20})()
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(reasons=0x42, processes=(proc,)))
    n = envprobe.nvml_facts(0)
    assert n.error is None and (n.sm_mhz, n.sm_max_mhz, n.app_sm_mhz) == (1980, 1980, 1980)
    assert n.throttle_reasons == ["user_defined_clocks", "hw_thermal_slowdown"]
    assert n.persistence_mode is True and n.power_limit_w == 700.0
    assert n.other_processes == ["4242 python3 (30000 MiB)"]
    checks = by_name(healthy(nvml=n))
    assert checks["clocks"].status == WARN and "hw_thermal_slowdown" in checks["clocks"].message
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert "pynvml not importable" in envprobe.nvml_facts(0).error


def test_probe_runner_reports_ok_failure_and_timeout() -> None:
    assert envprobe.run_probe("print('OK fine')", 30) == ProbeResult(ok=True, detail="fine")
    failed = envprobe.run_probe("import sys; print('x.cpp:1: error: boom', file=sys.stderr); sys.exit(1)", 30)
    assert not failed.ok and "error: boom" in failed.detail
    assert envprobe.run_probe("print('SKIP nothing to do')", 30).skipped == "nothing to do"
    slow = envprobe.run_probe("import time; time.sleep(30)", 0.5)
    assert slow.timed_out and not slow.ok


def test_command_prints_fix_and_json_round_trips() -> None:
    buf = io.StringIO()
    facts = healthy(ninja_path=None)
    code = doctor.doctor_command(console=Console(file=buf, width=200), facts=facts)
    text = buf.getvalue()
    assert code == 1 and "FAIL ninja" in text and "fix: pip install ninja" in text
    buf = io.StringIO()
    code = doctor.doctor_command(as_json=True, console=Console(file=buf, width=200), facts=healthy())
    data = json.loads(buf.getvalue())
    assert code == 0 and data["ok"] is True
    assert {c["name"] for c in data["checks"]} >= {"cuda", "nvcc", "arch-list", "ninja", "clocks"}


@pytest.mark.skipif(sys.platform != "linux", reason="probes this Linux machine")
def test_gather_facts_without_builds_runs_here() -> None:
    facts = envprobe.gather_facts(build=False)
    assert facts.torch_version
    checks = doctor.run_checks(facts)
    assert all(c.status in (PASS, WARN, FAIL, SKIP) for c in checks)
    if not facts.cuda_available:
        assert doctor.exit_code(checks) == 1   # no GPU: the doctor says so and exits 1


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_doctor_on_a_gpu_machine() -> None:
    facts = envprobe.gather_facts(build=True)
    checks = by_name(facts)
    assert checks["cuda"].status == PASS and checks["device"].status == PASS
    assert checks["c++ extension"].status == PASS, checks["c++ extension"]
