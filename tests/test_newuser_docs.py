"""Issue 11 #17: docs/RESULTS.md names every field a real results file has."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from solbench.cli import app

pytest.importorskip("torch")
from tests import cheats  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "RESULTS.md"
# Mappings whose keys are data, not fields: parameter names, precisions, ceilings, clock names.
DATA_KEYED = {"params", "simt", "tensor", "peaks.noise", "clocks", "counters", "cross_check", "timer_correction"}


def field_names(value: Any, path: str = "") -> set[tuple[str, str]]:
    """(path, key) of every key in a results file, not descending into DATA_KEYED mappings."""
    out: set[tuple[str, str]] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{path}.{k}" if path else k
            out.add((here, k))
            if k not in DATA_KEYED and here not in DATA_KEYED and k != "samples_s":
                out |= field_names(v, here)
    elif isinstance(value, list):
        for v in value:
            out |= field_names(v, f"{path}[]")
    return out


def documented(doc: str, key: str) -> bool:
    return f'"{key}"' in doc or f"`{key}`" in doc or re.search(rf"\b{re.escape(key)}\b", doc) is not None


def test_every_key_of_a_real_cpu_run_is_documented(tmp_path):
    out = tmp_path / "out"
    cheats.seed_cpu_peaks(out)
    path = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["run", "--ops", "add,gemm", "--quick", "--out", str(out), "--json", str(path),
                                   "--no-isolate", "--budget", "0.05", "--min-samples", "3", "--rse", "0.5"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    data = json.loads(path.read_text())
    assert any(r["case"] == "*" for r in data["records"])          # a skipped dtype is in the file
    doc = DOC.read_text()
    missing = sorted(p for p, key in field_names(data) if not documented(doc, key))
    assert not missing, f"docs/RESULTS.md does not name: {', '.join(missing)}"
    for must in ('"*"', "warnings", "telemetry", "norm_rel_err", "cpu_threads", "spec_sha256", "`wall`"):
        assert must in doc
