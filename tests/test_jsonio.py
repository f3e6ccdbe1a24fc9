"""Atomic JSON writes: the target is whole or untouched, nothing is left behind, the umask decides the mode."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from solbench.jsonio import write_json_atomic


def test_writes_indented_json_and_creates_the_folder(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "run.json"
    assert write_json_atomic(target, {"a": [1, 2]}) == target
    assert json.loads(target.read_text()) == {"a": [1, 2]} and target.read_text().endswith("\n")
    assert sorted(p.name for p in target.parent.iterdir()) == ["run.json"]


def test_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    write_json_atomic(target, {"v": 1})
    write_json_atomic(str(target), {"v": 2})
    assert json.loads(target.read_text()) == {"v": 2}


def test_unserialisable_data_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    write_json_atomic(target, {"v": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1} and os.listdir(tmp_path) == ["x.json"]


def test_a_failed_rename_removes_the_temp_file(tmp_path: Path, monkeypatch) -> None:
    def no_rename(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError, match="disk full"):
        write_json_atomic(tmp_path / "x.json", {"v": 1})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_the_umask_decides_the_mode(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        path = write_json_atomic(tmp_path / "x.json", {})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
