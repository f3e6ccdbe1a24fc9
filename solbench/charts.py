"""What the charts share: record selection, colours and markers, titles, saving a figure.

Every chart is drawn from results files only (roofline.py, solchart.py), never from a re-run.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Sequence

from matplotlib.figure import Figure

from solbench import results
from solbench.errors import UserError
from solbench.results import Run

PLOTTED_STATUSES = ("ok", "invalid")
IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
MARKERS = ("o", "s", "^", "D", "v", "P", "*", "h", "<", ">", "p", "d")   # never "X": that marks errors
# The implementations every spec has get the same marker and colour in every chart; other names get
# one derived from the name (crc32), so adding an op or an impl to a chart never re-marks the others.
KNOWN_MARKERS = {"eager": "o", "compiled": "s", "cuda": "D", "default": "^", "math": "v", "flash": "P",
                 "efficient": "h", "cudnn": "*", "triton": "<", "cutlass": ">"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31")             # tab10 and more, without the error red
KNOWN_COLORS = {"eager": "#1f77b4", "compiled": "#ff7f0e", "cuda": "#2ca02c", "default": "#9467bd",
                "math": "#8c564b", "flash": "#e377c2", "efficient": "#7f7f7f", "cudnn": "#bcbd22"}
ERROR_COLOR = "#d62728"
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
               "float8_e4m3fn": "fp8", "float8_e5m2": "fp8e5", "int8": "i8"}


# ---------------------------------------------------------------- selection


# The records a chart draws (by default those with a SOL to place); an empty selection is a user error.
select_records = functools.partial(results.select_records, statuses=PLOTTED_STATUSES, what="plot")


def colors_for(names: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def markers_for(names: Sequence[str]) -> dict[str, str]:
    """A marker per implementation from its name (KNOWN_MARKERS, else crc32 of the name)."""
    return _by_name(names, KNOWN_MARKERS, MARKERS)


def impl_colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per implementation from its name, the same in every chart."""
    return _by_name(names, KNOWN_COLORS, PALETTE)


def _by_name(names: Sequence[str], known: dict[str, str], choices: Sequence[str]) -> dict[str, str]:
    """Known names first, then each other name at crc32(name) in `choices`, moving on to the next choice
    only when an earlier name of this chart holds it (so two impls of one chart never look alike)."""
    import zlib

    out: dict[str, str] = {}
    for n in sorted(set(names), key=lambda n: (n not in known, n)):
        if n in known and known[n] not in out.values():
            out[n] = known[n]
            continue
        start = zlib.crc32(n.encode()) % len(choices)
        taken = set(out.values())
        free = [choices[(start + k) % len(choices)] for k in range(len(choices))
                if choices[(start + k) % len(choices)] not in taken]
        out[n] = free[0] if free else choices[start]
    return out


def chart_title(runs: Sequence[Run], what: str) -> str:
    devices = sorted({r.device for r in runs})
    sources = sorted({str(r.peaks.get("source") or "unknown") for r in runs})
    return f"{what}: {', '.join(devices)} (peaks: {', '.join(sources)})"


# ---------------------------------------------------------------- files


SOURCE_KEY = "solbench-runs"     # PNG text chunk naming the runs a chart was drawn from


def save_figure(fig: Figure, output: str | Path, runs: Sequence[Run] = ()) -> Path:
    """Save a chart; a PNG says which runs it shows (`chart_sources` reads it back), so a picture in the
    docs can be checked against the run it claims to show."""
    output = Path(output)
    if output.suffix.lower() not in IMAGE_SUFFIXES:
        raise UserError(f"unsupported image type {output.suffix or '(none)'!r}; use one of "
                        f"{', '.join(IMAGE_SUFFIXES)}", file=output)
    output.parent.mkdir(parents=True, exist_ok=True)
    metadata = {SOURCE_KEY: " ".join(r.run_id for r in runs)} if output.suffix.lower() == ".png" and runs else None
    fig.savefig(output, dpi=130, metadata=metadata)
    return output


def chart_sources(png: str | Path) -> list[str]:
    """The run ids a PNG chart saved by save_figure was drawn from ([] when it does not say)."""
    from PIL import Image

    with Image.open(png) as im:
        return str(im.info.get(SOURCE_KEY, "")).split()


def split_list(values: Sequence[str] | str | None) -> list[str] | None:
    if values is None:
        return None
    items = [values] if isinstance(values, str) else list(values)
    out = [v.strip() for item in items for v in item.split(",") if v.strip()]
    return out or None
