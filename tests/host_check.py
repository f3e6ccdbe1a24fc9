"""Compile and run small C++ checks of the plain-C++ kernel headers (the automatic-choice rules,
the fast divisor) on the host: no GPU, only a C++ compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_host_check(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """Compile `source` (kernels_ext/csrc on the include path) and run it; skips without a compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "main.cpp").write_text(source)
    exe = tmp_path / "check"
    build = subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'kernels_ext' / 'csrc'}", str(tmp_path / "main.cpp"),
                            "-o", str(exe)], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr[-2000:]
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
