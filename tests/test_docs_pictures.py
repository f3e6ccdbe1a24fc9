"""The pictures and reports in docs/ are drawn from the committed H200 results files docs/pictures.json
names, and say so: each PNG carries the run id of its file (charts.save_figure), each report names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solbench.charts import chart_sources
from solbench.results import load_run

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MANIFEST = json.loads((DOCS / "pictures.json").read_text())


@pytest.mark.parametrize("picture,source", sorted(MANIFEST["pictures"].items()))
def test_picture_is_drawn_from_its_committed_run(picture, source):
    run = load_run(ROOT / source)
    assert run.device.startswith("NVIDIA H200"), (source, run.device)
    assert chart_sources(DOCS / picture) == [run.run_id], f"{picture} is not drawn from {source}"


@pytest.mark.parametrize("report,source", sorted(MANIFEST["reports"].items()))
def test_report_names_its_committed_run(report, source):
    assert load_run(ROOT / source).run_id in (DOCS / report).read_text()


def test_every_picture_in_docs_is_in_the_manifest():
    found = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.png")}
    assert found == set(MANIFEST["pictures"]), found ^ set(MANIFEST["pictures"])
