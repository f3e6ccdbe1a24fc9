"""kernels_ext/ptxas.py: what ptxas -v says of each kernel, and the report compile_check writes from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels_ext import ptxas

# nvcc 13's ptxas -v output for one file, both architectures: a template kernel, a kernel with static
# shared memory and a stack, and a noinline device function (properties, no entry: not a kernel row).
LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z2k2ILi3EEvPf' for 'sm_80'
ptxas info    : Function properties for _Z2k2ILi3EEvPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 20.934 ms
ptxas info    : Compiling entry function '_Z2k1Pf' for 'sm_80'
ptxas info    : Function properties for _Z2k1Pf
    256 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem, 360 bytes cmem[0]
ptxas info    : Function properties for _Z1fPfi
    64 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function '_Z2k2ILi3EEvPf' for 'sm_90a'
ptxas info    : Function properties for _Z2k2ILi3EEvPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compiling entry function '_Z2k1Pf' for 'sm_90a'
ptxas info    : Function properties for _Z2k1Pf
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem
"""


def test_parse_reads_every_entry_kernel_per_arch():
    rows = ptxas.parse(LOG, "demo/k.cu")
    assert [(r.arch, r.kernel) for r in rows] == [("sm_80", "_Z2k2ILi3EEvPf"), ("sm_80", "_Z2k1Pf"),
                                                 ("sm_90a", "_Z2k2ILi3EEvPf"), ("sm_90a", "_Z2k1Pf")]
    k1_80, k1_90 = rows[1], rows[3]
    assert (k1_80.registers, k1_80.smem, k1_80.stack, k1_80.spill_stores, k1_80.spill_loads) == (40, 1024, 256, 12, 8)
    assert k1_80.spills and not k1_90.spills
    # a kernel's stack line is its own, never the one of the device function ptxas reported after it
    assert rows[2].stack == 0 and rows[0].smem == 0


def test_report_log_round_trips_and_keeps_only_ptxas_lines():
    log = ptxas.report_log([("a/x.cu", "nvcc warning: something\n" + LOG), ("b/y.cu", LOG)])
    assert "nvcc warning" not in log and "Compile time" not in log and "gmem" not in log
    rows = ptxas.parse_report(log)
    assert [r.source for r in rows] == ["a/x.cu"] * 4 + ["b/y.cu"] * 4
    assert rows[:4] == ptxas.parse(LOG, "a/x.cu")


def test_markdown_has_one_row_per_source_and_per_kernel_of_its_arch():
    rows = ptxas.parse_report(ptxas.report_log([("a/x.cu", LOG), ("b/y.cu", LOG)]))
    text = ptxas.markdown(rows, "sm_80", ["made by a test"])
    assert "# ptxas resources, sm_80" in text and "made by a test" in text
    assert "4 kernels in 2 sources; 2 spill." in text
    by_source = text.split("## By source")[1].split("## By kernel")[0]
    assert "| a/x.cu | 2 | 40 | 1024 | 256 | 1 |" in by_source
    kernel_rows = [ln for ln in text.split("## By kernel")[1].splitlines() if ln.startswith("| a/") or ln.startswith("| b/")]
    assert len(kernel_rows) == 4 and any("| 40 | 1024 | 256 | 12/8 |" in ln for ln in kernel_rows)
    assert "0 spill." in ptxas.markdown(rows, "sm_90a", [])


def test_short_name_drops_namespaces_and_parameters():
    assert ptxas.short_name("sk::gemm::kernel<float>(float*, int)") == "gemm::kernel<float>"
    assert len(ptxas.short_name("x" * 300)) == 140


def test_committed_issue_logs_still_give_their_committed_tables():
    root = Path(__file__).resolve().parents[1] / "results" / "h200"
    for issue in ("issue13", "issue14"):
        log = (root / issue / "ptxas_sm90a.txt").read_text()
        table = "\n".join(ptxas.kernel_table(ptxas.parse_report(log))) + "\n"
        if ptxas.demangle(["_Z2k1Pf"]) == ["_Z2k1Pf"]:
            pytest.skip("no c++filt here: kernel names stay mangled")
        assert table == (root / issue / "ptxas_sm90a.md").read_text()


def test_compile_check_writes_the_report(tmp_path, monkeypatch):
    from kernels_ext import compile_check

    if compile_check.find_nvcc() is None:
        pytest.skip("no nvcc: the compile check itself is skipped on such a machine")
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* a) { __shared__ float s[64]; s[threadIdx.x] = a[threadIdx.x];"
                   " __syncthreads(); a[threadIdx.x] = s[63 - threadIdx.x]; }\n")
    monkeypatch.setattr(compile_check, "kernel_files", lambda: [src])
    assert compile_check.main(["--ptxas-report", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "ptxas_sm90a.md").read_text()
    assert "1 kernels in 1 sources; 0 spill." in text and "| k.cu | `k` |" in text and "| 256 |" in text
    assert (tmp_path / "report" / "ptxas_sm80.md").exists()


# ---------------------------------------------------------------- the committed report, checked against the sources

ANON = ("ptxas info    : Compiling entry function '_ZN2sk10map_kernelINS_46_GLOBAL__N__{h}_13_activation_cu_49f698026"
        "SwiGluEEEvPf' for 'sm_90a'\nptxas info    : Function properties for _ZN2sk10map_kernelINS_46_GLOBAL__N__{h}"
        "_13_activation_cu_49f698026SwiGluEEEvPf\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used {r} registers, used 0 barriers\n")


def _needs_cxxfilt():
    if ptxas.demangle(["_Z2k1Pf"]) == ["_Z2k1Pf"]:
        pytest.skip("no c++filt here")


def test_a_clone_at_another_path_is_the_same_report():
    """An anonymous namespace's mangled name hashes the path nvcc compiled it at; the check must not care."""
    _needs_cxxfilt()
    here = ptxas.parse(ANON.format(h="5ff3d6bb", r=32), "activation/activation.cu")
    there = ptxas.parse(ANON.format(h="0badc0de", r=32), "activation/activation.cu")
    assert here[0].kernel != there[0].kernel
    assert ptxas.differences(here, there) == []
    changed = ptxas.differences(here, ptxas.parse(ANON.format(h="0badc0de", r=40), "activation/activation.cu"))
    assert len(changed) == 1 and changed[0].startswith("changed: activation/activation.cu sm_90a ")
    assert "32 registers" in changed[0] and "-> 40 registers" in changed[0]
    assert ptxas.differences(here, []) == [f"kernel gone: {changed[0].split(': ')[1]}"]


def _results(tmp_path, registers: int):
    from kernels_ext import compile_check
    from kernels_ext.optable import CSRC

    log = ANON.format(h="5ff3d6bb", r=registers)
    return [compile_check.CheckResult(CSRC / "activation" / "activation.cu", True, 0.1, registers, 0, "", log)]


@pytest.mark.parametrize("committed_regs,made_by,expect,needle", [
    (32, "nvcc A", True, "matches the sources"),
    (40, "nvcc A", False, "is out of date (1 differences)"),
    (40, "nvcc B", True, "was made by nvcc B, this is nvcc A"),
])
def test_check_ptxas_report(tmp_path, capsys, committed_regs, made_by, expect, needle):
    from kernels_ext import compile_check

    _needs_cxxfilt()
    committed = ptxas.report_log([("activation/activation.cu", ANON.format(h="0badc0de", r=committed_regs))], made_by)
    (tmp_path / "ptxas.log").write_text(committed)
    assert compile_check.check_ptxas_report(tmp_path, "nvcc A", _results(tmp_path, 32)) is expect
    assert needle in capsys.readouterr().out


def test_check_ptxas_report_without_a_committed_report_fails(tmp_path, capsys):
    from kernels_ext import compile_check

    assert compile_check.check_ptxas_report(tmp_path, "nvcc A", _results(tmp_path, 32)) is False
    assert "not found" in capsys.readouterr().out


def test_report_names_its_compiler_on_the_first_line():
    log = ptxas.report_log([("a/x.cu", LOG)], "Cuda compilation tools, release 13.0, V13.0.88")
    assert ptxas.report_compiler(log) == "Cuda compilation tools, release 13.0, V13.0.88"
    assert ptxas.report_compiler(ptxas.report_log([("a/x.cu", LOG)])) == ""
    assert len(ptxas.parse_report(log)) == 4
