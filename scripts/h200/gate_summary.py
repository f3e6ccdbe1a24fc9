"""Check the outputs of scripts/h200/gate.sh and print a short table; exit 1 when a check fails.

    python scripts/h200/gate_summary.py WORK_DIR SUMMARY_JSON

Checks (issue 12): the runs were stamped with the measured noise model; pairs of unchanged code (every
pair of `compare --aa`, and every pair but the planted `gate_copy/*/candidate` of the comparisons with
the planted run) number at least MIN_AA_PAIRS with no SLOWER and no FASTER among them; against the
planted slowdown every `gate_copy/*/candidate` pair is SLOWER and every `gate_copy/*/eager` pair SAME,
in every comparison.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MIN_AA_PAIRS = 200
PLANTED_OP = "gate_copy"
PLANTED_IMPL = "candidate"
PLANTED_CASES = 6          # 3 shapes x 2 dtypes


@dataclass
class Check:
    name: str
    value: str
    ok: bool


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def noise_check(work: Path) -> tuple[Check, dict[str, Any] | None]:
    noise = _load(work / "noise.json")
    if noise is None:
        return Check("noise model measured", "no noise.json", False), None
    m, fit = noise["model"], noise["fit"]
    value = (f"{m['rel']:.3%} + {m['abs_s'] * 1e6:.3f} us (fit {fit['rel']:.3%} + {fit['abs_s'] * 1e6:.3f} us, "
             f"{len(noise['kernels'])} kernels x {noise['runs']} runs)")
    return Check("noise model measured", value, True), noise


def stamped_check(work: Path) -> Check:
    """Every timed record of the A/A runs carries the measured model, not a default."""
    sources: dict[str, int] = {}
    for path in sorted(work.glob("aa_*.json")):
        for rec in (_load(path) or {}).get("records", []):
            src = (rec.get("time_s") or {}).get("run_to_run_source")
            if src:
                sources[src] = sources.get(src, 0) + 1
    measured = sum(n for s, n in sources.items() if s.startswith("measured:"))
    total = sum(sources.values())
    return Check("records carry the measured model", f"{measured}/{total} records", total > 0 and measured == total)


def _is_planted(pair: dict[str, Any]) -> bool:
    return pair["key"][0] == PLANTED_OP and pair["key"][-1] == PLANTED_IMPL


def unchanged_pairs(work: Path) -> list[dict[str, Any]]:
    """Every pair of unchanged code: all of compare --aa, and the planted comparisons minus the planted impl."""
    aa = _load(work / "compare_aa.json") or {"comparisons": []}
    pairs = [p for c in aa["comparisons"] for p in c["pairs"]]
    for path in sorted(work.glob("compare_planted_*.json")):
        pairs += [p for p in (_load(path) or {"pairs": []})["pairs"] if not _is_planted(p)]
    return pairs


def aa_check(work: Path) -> tuple[list[Check], dict[str, Any]]:
    aa = _load(work / "compare_aa.json")
    if aa is None:
        return [Check("A/A compare", "no compare_aa.json", False)], {}
    pairs = unchanged_pairs(work)
    counts = {v: sum(p["verdict"] == v for p in pairs) for v in ("SLOWER", "FASTER", "SAME", "AMBIGUOUS")}
    spreads = aa["spreads"]
    checks = [
        Check("A/A pairs (unchanged code)", f"{len(pairs)}: {aa['pairs']} from compare --aa of {len(aa['runs'])} "
              f"runs + {len(pairs) - aa['pairs']} vs the planted run", len(pairs) >= MIN_AA_PAIRS),
        Check("A/A false alarms", f"{counts['SLOWER']} SLOWER, {counts['FASTER']} FASTER "
              f"({counts['SAME']} SAME, {counts['AMBIGUOUS']} AMBIGUOUS)",
              counts["SLOWER"] == 0 and counts["FASTER"] == 0),
    ]
    if spreads.get("n"):
        checks.append(Check("compare --aa: changes in run-to-run spreads", f"p95 {spreads['p95']:.2f}, max "
                            f"{spreads['max']:.2f}, {spreads['beyond_1.96']:.1%} beyond 1.96", True))
    worst = aa["worst"][0] if aa.get("worst") else None
    if worst:
        checks.append(Check("compare --aa: closest to a call", f"{worst['name']}: {worst['ratio'] - 1:+.2%} vs "
                            f"margin ±{_pct(worst['rr_margin'])} ({worst['verdict']})", True))
    return checks, {"pairs": len(pairs), "counts": counts, "compare_aa": {k: aa[k] for k in
                    ("pairs", "false_alarms", "counts", "spreads", "runs")}}


def _pct(log_margin: float | None) -> str:
    import math

    return "-" if log_margin is None else f"{math.expm1(log_margin):.1%}"


def planted_checks(work: Path) -> tuple[list[Check], list[dict[str, Any]]]:
    checks, details = [], []
    files = sorted(work.glob("compare_planted_*.json"))
    if not files:
        return [Check("planted slowdown", "no compare_planted_*.json", False)], []
    for path in files:
        data = _load(path) or {"pairs": []}
        pairs = [p for p in data["pairs"] if p["key"][0] == PLANTED_OP]
        cand = [p for p in pairs if _is_planted(p)]
        honest = [p for p in pairs if p["key"][-1] == "eager"]
        caught = sum(p["verdict"] == "SLOWER" for p in cand)
        same = sum(p["verdict"] == "SAME" for p in honest)
        ratios = [p["ratio"] - 1 for p in cand if p["ratio"] is not None]
        span = f"{min(ratios):+.1%}..{max(ratios):+.1%}" if ratios else "-"
        label = path.stem.replace("compare_", "")
        checks.append(Check(f"{label}: candidate SLOWER", f"{caught}/{len(cand)} (change {span})",
                            len(cand) == PLANTED_CASES and caught == len(cand)))
        checks.append(Check(f"{label}: honest eager SAME", f"{same}/{len(honest)}",
                            len(honest) == PLANTED_CASES and same == len(honest)))
        details.append({"file": path.name, "candidate": [_brief(p) for p in cand], "eager": [_brief(p) for p in honest]})
    return checks, details


def _brief(p: dict[str, Any]) -> dict[str, Any]:
    return {k: p.get(k) for k in ("name", "verdict", "ratio", "ci_low", "ci_high", "rr_margin", "decided_by", "reason")}


def main(work: Path, out: Path) -> int:
    noise, model = noise_check(work)
    aa, aa_detail = aa_check(work)
    planted, planted_detail = planted_checks(work)
    checks = [noise, stamped_check(work), *aa, *planted]
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.value}")
    ok = all(c.ok for c in checks)
    print("gate: " + ("every check passed" if ok else "a check FAILED"))
    out.write_text(json.dumps({"pass": ok, "checks": [asdict(c) for c in checks],
                               "noise_model": model and {k: model[k] for k in ("model", "fit", "fingerprint", "runs",
                                                                               "budget_s", "kernels")},
                               "aa": aa_detail, "planted": planted_detail}, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/h200/gate_summary.py WORK_DIR SUMMARY_JSON")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
