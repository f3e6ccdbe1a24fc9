"""A report document (Markdown or self-contained HTML) rendered from one results file.

The report is first built as a list of blocks (heading, paragraph, list, table, image); two small
renderers turn the same blocks into Markdown (images written next to the .md) or HTML (images
embedded as base64 PNG), so both formats always say the same thing.
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from matplotlib.figure import Figure

from solbench.compare import key_name, load_results
from solbench.console import fmt_rate, fmt_time
from solbench.charts import SOURCE_KEY
from solbench.errors import UserError
from solbench.results import Run
from solbench.stats import geomean
from solbench.roofline import plot_roofline
from solbench.solchart import plot_sol_bars

SOL_GOOD = 0.8  # "at or near speed of light" for the summary's fraction
FAILED_STATUSES = ("failed", "error")
REPORT_SUFFIXES = (".md", ".html", ".htm")


# ---------------------------------------------------------------- numbers


@dataclass
class ImplSummary:
    impl: str
    is_baseline: bool
    cases: int = 0  # attempted: everything but "skipped"
    ok: int = 0
    invalid: int = 0
    failed: int = 0
    skipped: int = 0
    sols: list[float] = field(default_factory=list)  # ok records only, each capped at 1
    speedups: dict[str, list[float]] = field(default_factory=dict)  # baseline -> per-case speedups

    @property
    def geomean_sol(self) -> float | None:
        return geomean(self.sols) if self.sols else None

    @property
    def at_sol(self) -> int:
        return sum(1 for s in self.sols if s >= SOL_GOOD)

    def geomean_speedup(self, baseline: str) -> float | None:
        values = self.speedups.get(baseline, [])
        return geomean(values) if values else None


def baselines(run: Run) -> list[str]:
    return sorted({r.impl for r in run.records if r.is_baseline})


def summarize(run: Run) -> list[ImplSummary]:
    """Per implementation: SOL geomean (capped at 1, ok only), cases at >= 0.8 SOL, speedups."""
    out: dict[str, ImplSummary] = {}
    for rec in run.records:
        s = out.setdefault(rec.impl, ImplSummary(rec.impl, rec.is_baseline))
        status = rec.status
        if status == "skipped":
            s.skipped += 1
            continue
        s.cases += 1
        if status == "ok":
            s.ok += 1
            if rec.sol is not None:
                # Capped: a rounding excess must not lift a mean. (The harness marks real excess invalid.)
                s.sols.append(min(float(rec.sol), 1.0))
        elif status == "invalid":
            s.invalid += 1
        else:
            s.failed += 1
    ok_medians = {r.key: r.median_s for r in run.records if r.median_s}
    for (op, case, dtype, impl), med in ok_medians.items():
        for b in baselines(run):
            base_med = ok_medians.get((op, case, dtype, b))
            if b != impl and base_med:
                out[impl].speedups.setdefault(b, []).append(base_med / med)
    return sorted(out.values(), key=lambda s: (not s.is_baseline, s.impl))


def summary_table(run: Run) -> pd.DataFrame:
    rows = []
    summaries = summarize(run)
    # Only baselines that share at least one ok case with something: others would be a column of "-".
    bases = [b for b in baselines(run) if any(s.speedups.get(b) for s in summaries)]
    for s in summaries:
        row: dict[str, Any] = {
            "impl": s.impl,
            "kind": "baseline" if s.is_baseline else "impl",
            "cases": s.cases,
            "ok": s.ok,
            "geomean SOL": _pct(s.geomean_sol),
            f">= {SOL_GOOD:.0%} SOL": f"{s.at_sol}/{s.cases}" if s.cases else "-",
        }
        for b in bases:
            g = s.geomean_speedup(b)
            row[f"speedup vs {b}"] = f"{g:.2f}x ({len(s.speedups[b])})" if g is not None else "-"
        row["invalid"] = s.invalid
        row["failed"] = s.failed
        row["skipped"] = s.skipped
        rows.append(row)
    return pd.DataFrame(rows)


def problems(run: Run) -> list[str]:
    """Every failed, invalid or errored record with its reason."""
    return [f"{key_name(r.key)}: {r.status}: {r.message or 'no message'}"
            for r in run.records if r.status in ("invalid", *FAILED_STATUSES)]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def op_table(run: Run, op: str) -> pd.DataFrame:
    rows = []
    for r in run.records:
        if r.op != op:
            continue
        rows.append({
            "shape": r.case, "dtype": r.dtype, "impl": r.impl,
            "median time": fmt_time((r.time_s or {}).get("median")),
            "TFLOP/s": fmt_rate(r.tflops), "GB/s": fmt_rate(r.gbps),
            "SOL %": _pct(r.sol), "MFU %": _pct(r.mfu),
            # An invalid record's speedup is diagnosis, not a win: keep it out of the table.
            "speedup": "-" if r.speedup is None or r.status != "ok"
            else f"{r.speedup:.2f}x vs {r.reference_baseline or '?'}",
            "status": r.status if r.status == "ok" else f"{r.status}: {r.message}",
        })
    return pd.DataFrame(rows)


def env_table(run: Run) -> pd.DataFrame:
    env, peaks = run.env, run.peaks
    clocks = env.get("clocks") or {}
    clock_text = (f"SM {clocks.get('sm_mhz')} MHz (max {clocks.get('sm_max_mhz')}), "
                  f"memory {clocks.get('mem_mhz')} MHz" if clocks else "not readable")
    items = [
        ("device", env.get("device")), ("compute capability", env.get("compute_capability")),
        ("SMs", env.get("sm_count")), ("clocks", clock_text), ("driver", env.get("driver")),
        ("CUDA", env.get("cuda")), ("torch", env.get("torch")), ("python", env.get("python")),
        ("solbench", env.get("solbench")), ("commit", env.get("git_sha")), ("host", env.get("host")),
        ("peaks", f"{peaks.get('name')} ({peaks.get('source')})"),
        ("timer", timers_used(run)), ("run", run.run_id), ("created", run.created), ("command", run.command),
    ]
    return pd.DataFrame([{"": k, "value": "-" if v is None else str(v)} for k, v in items])


def timers_used(run: Run) -> str | None:
    """The timers that measured the records ('wall' on a CPU whatever --timer said), with counts when mixed."""
    counts: dict[str, int] = {}
    for r in run.records:
        if r.timer:
            counts[r.timer] = counts.get(r.timer, 0) + 1
    if not counts:
        return run.timer
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{t} ({n} records)" for t, n in sorted(counts.items()))


# ---------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Block:
    kind: str  # h1 h2 h3 p list table image
    content: Any
    name: str = ""  # image file stem


def build_blocks(run: Run, *, charts: bool = True) -> list[Block]:
    blocks = [Block("h1", f"solbench report: {run.device}"),
              Block("p", f"Run `{run.run_id}`, {len(run.records)} records, peaks from "
                         f"{run.peaks.get('source')}. SOL = T_SOL / median time; geometric means "
                         f"use ok records only, each SOL capped at 1; invalid and failed records are counted, "
                         f"never scored.")]
    blocks += [Block("h2", "Summary"), Block("table", summary_table(run))]
    issues = problems(run)
    if issues:
        blocks += [Block("h3", f"Failed and invalid ({len(issues)})"), Block("list", issues)]
    blocks += [Block("h2", "Environment"), Block("table", env_table(run))]
    if charts:
        blocks += _chart_blocks(run, None, "all")
    for op in sorted({r.op for r in run.records}):
        blocks += [Block("h2", f"Op: {op}"), Block("table", op_table(run, op))]
        if charts:
            blocks += _chart_blocks(run, op, op)
    return blocks


def _chart_blocks(run: Run, op: str | None, stem: str) -> list[Block]:
    ops = [op] if op else None
    out = []
    for what, plot in (("roofline", plot_roofline), ("sol", plot_sol_bars)):
        try:
            fig, _ = plot([run], ops=ops)
        except UserError:
            continue  # nothing plottable for this op (e.g. every record failed): the table says why
        out.append(Block("image", fig, name=f"{stem}-{what}"))
    return out


# ---------------------------------------------------------------- renderers


def _png_bytes(fig: Figure, run_id: str) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={SOURCE_KEY: run_id})
    return buf.getvalue()


def _safe(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)


# A cell that reads as a number (12.3, 1,464, 45.1%, 1.02x vs eager, 7.98 ms, 3/8): right-aligned, with its header.
_NUMERIC = re.compile(r"^[-+]?\d[\d,.]*(e[-+]?\d+)?\s*(%|x|us|ms|s)?(\s|/|$)")


def numeric_columns(df: pd.DataFrame) -> list[bool]:
    """Per column: every cell but '-' starts like a number (and there is at least one)."""
    out = []
    for col in df.columns:
        cells = [str(v) for v in df[col] if str(v) != "-"]
        out.append(bool(cells) and all(_NUMERIC.match(c) for c in cells))
    return out


def markdown_table(df: pd.DataFrame) -> str:
    """A pipe table; numeric columns right-aligned (`---:`) so headers sit over their numbers."""
    header = [str(c) for c in df.columns]
    align = ["---:" if num else "---" for num in numeric_columns(df)]
    rows = [[str(v).replace("|", "\\|") for v in row] for row in df.astype(str).values.tolist()]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, align, *rows])


def html_table(df: pd.DataFrame) -> str:
    """A table whose numeric columns (header and cells) are right-aligned, everything escaped."""
    right = numeric_columns(df)

    def cell(tag: str, text: str, num: bool) -> str:
        return f"<{tag} class='num'>{html.escape(text)}</{tag}>" if num else f"<{tag}>{html.escape(text)}</{tag}>"

    head = "".join(cell("th", str(c), n) for c, n in zip(df.columns, right))
    body = "".join("<tr>" + "".join(cell("td", str(v), n) for v, n in zip(row, right)) + "</tr>"
                   for row in df.astype(str).values.tolist())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_text(text: str) -> str:
    """Escaped text with `code` spans (the blocks are written in Markdown's inline code) as <code>."""
    parts = text.split("`")
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts))


def chart_folder(output: Path) -> Path:
    """Where a Markdown report's charts go: one folder beside it, not loose files."""
    return output.with_name(f"{_safe(output.stem)}-charts")


def render_markdown(blocks: Sequence[Block], output: Path, run_id: str) -> str:
    """Markdown text; images are written to chart_folder(output) and linked relative to the report."""
    parts = []
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            parts.append("#" * int(b.kind[1]) + " " + b.content)
        elif b.kind == "p":
            parts.append(b.content)
        elif b.kind == "list":
            parts.append("\n".join(f"- {item}" for item in b.content))
        elif b.kind == "table":
            df: pd.DataFrame = b.content
            parts.append(markdown_table(df) if len(df) else "(none)")
        elif b.kind == "image":
            folder = chart_folder(output)
            folder.mkdir(parents=True, exist_ok=True)
            image = folder / f"{_safe(b.name)}.png"
            image.write_bytes(_png_bytes(b.content, run_id))
            parts.append(f"![{b.name}]({folder.name}/{image.name})")
    return "\n\n".join(parts) + f"\n\n<!-- {SOURCE_KEY}: {run_id} -->\n"


HTML_STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}.num{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%}
code{background:#f3f3f3;padding:0 3px;border-radius:3px}"""


def render_html(blocks: Sequence[Block], title: str, run_id: str) -> str:
    """One self-contained HTML file: styles inline, charts as base64 PNG."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<meta name='{SOURCE_KEY}' content='{html.escape(run_id)}'>"
             f"<style>{HTML_STYLE}</style></head><body>"]
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            parts.append(f"<{b.kind}>{html_text(b.content)}</{b.kind}>")
        elif b.kind == "p":
            parts.append(f"<p>{html_text(b.content)}</p>")
        elif b.kind == "list":
            parts.append("<ul>" + "".join(f"<li>{html_text(i)}</li>" for i in b.content) + "</ul>")
        elif b.kind == "table":
            parts.append(html_table(b.content) if len(b.content) else "<p>(none)</p>")
        elif b.kind == "image":
            data = base64.b64encode(_png_bytes(b.content, run_id)).decode()
            parts.append(f"<img alt='{html.escape(b.name)}' src='data:image/png;base64,{data}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run: Run, output: str | Path, *, charts: bool = True) -> Path:
    output = Path(output)
    suffix = output.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise UserError(f"unsupported report type {output.suffix or '(none)'!r}; use .md or .html", file=output)
    output.parent.mkdir(parents=True, exist_ok=True)
    blocks = build_blocks(run, charts=charts)
    if suffix == ".md":
        text = render_markdown(blocks, output, run.run_id)
    else:
        text = render_html(blocks, blocks[0].content, run.run_id)
    output.write_text(text)
    return output


def default_output(results_file: str | Path) -> Path:
    """`solbench report R` without -o: one self-contained HTML file beside the results file it describes."""
    results_file = Path(results_file)
    return results_file.with_name(f"{results_file.stem}-report.html")


def run_report(path: str | Path, output: str | Path | None = None, *, charts: bool = True) -> Path:
    """What `solbench report` does."""
    return write_report(load_results(path), output or default_output(path), charts=charts)
