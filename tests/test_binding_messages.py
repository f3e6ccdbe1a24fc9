"""kernels_ext/csrc/bindings/message.h on the CPU: sk::bind::text and the SK_CHECK macros, compiled
with the machine's C++ compiler against the installed torch's c10 headers and run.

Why a compiled test: on the H200 build a TORCH_CHECK message holding a number crashed the process
(results/h200/bad_input_probe.txt); every check of the bindings now builds its message with
sk::bind::text, so its formatting and the exception type it raises are what a caller sees."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX = shutil.which("g++") or shutil.which("c++")

PROGRAM = r"""
#include <cstdio>
#include <string>
#include "bindings/message.h"

int main() {
  const int64_t dims[] = {4, 8};
  const std::string got = sk::bind::text("n=", int64_t{7}, " sizes ", c10::IntArrayRef(dims, 2), " s=", -1.5,
                                         " on ", c10::Device("cuda:1"), " ", c10::ScalarType::BFloat16, " ",
                                         true, ' ', std::string("str"), " ", std::string_view("view"), " ", 3u);
  std::printf("TEXT|%s|\n", got.c_str());
  try {
    SK_CHECK_VALUE(1 + 1 == 3, "solbench_kernels::op: stride ", int64_t{2}, " of ", c10::IntArrayRef(dims, 2));
  } catch (const c10::ValueError& e) {
    std::printf("VALUE|%s|\n", e.what_without_backtrace());
  }
  try {
    SK_CHECK_TYPE(false, "solbench_kernels::op: x has dtype ", c10::ScalarType::Double);
  } catch (const c10::TypeError& e) {
    std::printf("TYPE|%s|\n", e.what_without_backtrace());
  }
  SK_CHECK(true, "never formatted ", 1);
  return 0;
}
"""


@pytest.fixture(scope="module")
def program_output(tmp_path_factory) -> str:
    if CXX is None:
        pytest.skip("no C++ compiler")
    torch = pytest.importorskip("torch")
    torch_dir = Path(torch.__file__).parent
    work = tmp_path_factory.mktemp("message_h")
    (work / "main.cpp").write_text(PROGRAM)
    exe = work / "main"
    cmd = [CXX, "-std=c++17", "-O1", f"-I{ROOT / 'kernels_ext' / 'csrc'}", f"-I{torch_dir / 'include'}",
           str(work / "main.cpp"), "-o", str(exe), f"-L{torch_dir / 'lib'}", "-lc10",
           f"-Wl,-rpath,{torch_dir / 'lib'}", "-D_GLIBCXX_USE_CXX11_ABI=1"]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout


def _line(out: str, tag: str) -> str:
    (line,) = [ln for ln in out.splitlines() if ln.startswith(tag + "|")]
    return line.split("|", 2)[1]


def test_text_formats_every_kind_of_piece(program_output):
    assert _line(program_output, "TEXT") == "n=7 sizes [4, 8] s=-1.5 on cuda:1 BFloat16 true str view 3"


def test_checks_raise_the_typed_error_with_the_whole_message(program_output):
    assert _line(program_output, "VALUE").startswith("solbench_kernels::op: stride 2 of [4, 8]")
    assert _line(program_output, "TYPE").startswith("solbench_kernels::op: x has dtype Double")
