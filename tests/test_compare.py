"""The CI regression gate: verdicts from raw samples and the run-to-run noise, pairing, exit codes, exports,
the A/A check."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from solbench.cli import app
from solbench.compare import (ALL_THREE, AMBIGUOUS, FASTER, RUN_TO_RUN, SAME, SLOWER, THRESHOLD, WITHIN,
                              compare_runs, decide, exit_code, parse_fail_on)
from solbench.compare_aa import compare_aa
from solbench.compare_render import to_bencher, to_github_benchmark, to_json, to_markdown
from solbench.errors import UserError
from solbench.noise_model import KernelRepeats, assemble, default_model, write_noise
from synthetic import as_run, H200_PEAKS, ab_runs, make_record, make_run, noisy_samples, write_run

MEDIAN = 100e-6


def with_rr(run: dict, spread: float, source: str = "measured:test-gpu") -> dict:
    """Stamp every timed record with a run-to-run spread, as a run with a measured noise model does."""
    for rec in run["records"]:
        if rec.get("time_s"):
            rec["time_s"].update(run_to_run=spread, run_to_run_source=source)
    return run


def _decide(change: float, noise: float, n: int, seed: int) -> str:
    base = noisy_samples(MEDIAN, noise, n, seed)
    new = noisy_samples(MEDIAN * (1 + change), noise, n, seed + 7919)
    return decide(base, new, seed=seed).verdict


# ---------------------------------------------------------------- the statistics


def test_five_percent_slowdown_in_one_percent_noise_is_slower():
    for seed in range(10):
        assert _decide(0.05, 0.01, 50, seed) == SLOWER, seed


def test_five_percent_speedup_in_one_percent_noise_is_faster():
    for seed in range(5):
        assert _decide(-0.05, 0.01, 50, seed) == FASTER, seed


def test_a_a_with_two_percent_noise_never_gives_slower_over_200_cases():
    rng = np.random.default_rng(20261129)
    verdicts = []
    for i in range(200):
        median = float(10 ** rng.uniform(-6, -2))  # 1 us .. 10 ms
        n = int(rng.integers(10, 120))
        base = noisy_samples(median, 0.02, n, seed=2 * i)
        new = noisy_samples(median, 0.02, n, seed=2 * i + 1)
        verdicts.append(decide(base, new, seed=i).verdict)
    assert SLOWER not in verdicts
    assert FASTER not in verdicts
    # The gate must also be able to say "no change", not just stay silent.
    assert verdicts.count(SAME) > 150


def test_two_percent_change_in_five_percent_noise_is_same_or_ambiguous():
    verdicts = {_decide(0.02, 0.05, 50, seed) for seed in range(30)}
    assert verdicts <= {SAME, AMBIGUOUS}


def test_slower_needs_the_rank_test_to_agree_with_the_interval(monkeypatch):
    import scipy.stats

    class NotSignificant:
        pvalue = 0.5

    base, new = noisy_samples(MEDIAN, 0.01, 50, 1), noisy_samples(MEDIAN * 1.1, 0.01, 50, 2)
    assert decide(base, new).verdict == SLOWER
    monkeypatch.setattr(scipy.stats, "mannwhitneyu", lambda *a, **k: NotSignificant())
    assert decide(base, new).verdict == AMBIGUOUS


def test_too_few_samples_is_ambiguous_even_for_a_huge_change():
    v = decide([1.0, 1.0, 1.0, 1.0], [3.0, 3.0, 3.0, 3.0])
    assert v.verdict == AMBIGUOUS and "too few" in v.reason
    assert v.ratio == pytest.approx(3.0)


def test_identical_constant_samples_are_same():
    v = decide([2e-3] * 20, [2e-3] * 20)
    assert v.verdict == SAME and v.p_value == 1.0 and v.ratio == 1.0


def test_verdict_is_reproducible_and_ci_brackets_the_ratio():
    base, new = noisy_samples(1e-3, 0.03, 40, 1), noisy_samples(1.1e-3, 0.03, 40, 2)
    a, b = decide(base, new), decide(base, new)
    assert a == b
    assert a.ci_low < a.ratio < a.ci_high
    assert a.ratio == pytest.approx(np.median(new) / np.median(base))


def test_nonpositive_samples_are_rejected():
    with pytest.raises(ValueError):
        decide([1.0] * 10, [1.0] * 9 + [0.0])


# ---------------------------------------------------------------- pairing


def test_compare_runs_pairs_by_key_and_flags_the_slowdown():
    base, new = ab_runs(MEDIAN, 0.05, 0.01, 50, seed=3)
    result = compare_runs(as_run(with_rr(base, 0.002)), as_run(with_rr(new, 0.002)))
    assert [p.verdict.verdict for p in result.pairs] == [SLOWER]
    assert result.pairs[0].name == "gemm/M=1024,N=1024,K=1024/bfloat16/eager"
    assert exit_code(result) == 1


def _case(impl: str, median: float, seed: int, **kw) -> dict:
    return make_record(impl=impl, samples=noisy_samples(median, 0.01, 30, seed), **kw)


def test_missing_failed_added_and_recovered_are_listed():
    base = make_run([
        _case("eager", MEDIAN, 1),
        _case("cuda", MEDIAN, 2),
        _case("triton", MEDIAN, 3),
        _case("gone", MEDIAN, 4),
        make_record(impl="flaky", status="failed"),
    ])
    new = make_run([
        _case("eager", MEDIAN, 11),
        make_record(impl="cuda", status="failed", message="max_abs_err 3 > atol 0.01"),
        make_record(impl="triton", samples=[MEDIAN] * 10, status="skipped", message="no CUDA"),
        _case("flaky", MEDIAN, 14),
        _case("brand_new", MEDIAN, 15),
    ])
    r = compare_runs(as_run(base), as_run(new))
    assert [p.name.split("/")[-1] for p in r.pairs] == ["eager"]
    assert [p.key[-1] for p in r.failed] == ["cuda"]
    assert "max_abs_err" in r.failed[0].message
    assert sorted(p.key[-1] for p in r.missing) == ["gone", "triton"]
    assert [k[-1] for k in r.added] == ["brand_new"]
    assert [p.key[-1] for p in r.recovered] == ["flaky"]
    assert exit_code(r, {"slower"}) == 0
    assert exit_code(r, {"slower", "missing"}) == 1
    assert exit_code(r, {"failed"}) == 1


def test_duplicate_records_are_an_error_naming_the_file():
    run = make_run([_case("eager", MEDIAN, 1), _case("eager", MEDIAN, 2)])
    with pytest.raises(UserError, match="duplicate record"):
        compare_runs(as_run(run), as_run(run), base_path="base.json")


def test_time_comparison_across_devices_is_refused():
    base = make_run([_case("eager", MEDIAN, 1)], device="NVIDIA H200")
    new = make_run([_case("eager", MEDIAN, 2)], device="NVIDIA H100 80GB HBM3")
    with pytest.raises(UserError, match="different devices") as exc:
        compare_runs(as_run(base), as_run(new))
    assert exc.value.field == "env.device"
    assert compare_runs(as_run(base), as_run(new), allow_cross_device=True).pairs  # explicit opt-in works


def test_sol_metric_compares_across_gpus_with_different_peaks():
    h100_peaks = {**H200_PEAKS, "name": "NVIDIA H100 SXM", "memory_bandwidth": 3.35e12,
                  "tensor": {**H200_PEAKS["tensor"], "bf16": 989.4e12}}
    kw = {"flops": 1e6, "nbytes": 64e6}  # memory bound: T_SOL from bandwidth
    t_sol_h200, t_sol_h100 = 64e6 / 4.8e12, 64e6 / 3.35e12
    base = make_run([make_record(samples=noisy_samples(t_sol_h200 / 0.8, 0.01, 40, 1), **kw)])
    same = make_run([make_record(samples=noisy_samples(t_sol_h100 / 0.8, 0.01, 40, 2), peaks=h100_peaks, **kw)],
                    device="NVIDIA H100", peaks=h100_peaks)
    worse = make_run([make_record(samples=noisy_samples(t_sol_h100 / 0.6, 0.01, 40, 3), peaks=h100_peaks, **kw)],
                     device="NVIDIA H100", peaks=h100_peaks)
    r_same = compare_runs(as_run(base), as_run(same), metric="sol")
    r_worse = compare_runs(as_run(base), as_run(worse), metric="sol")
    assert r_same.pairs[0].verdict.verdict == SAME
    assert r_worse.pairs[0].verdict.verdict == SLOWER
    assert r_worse.pairs[0].base_value == pytest.approx(0.8, rel=0.02)
    assert r_worse.pairs[0].new_value == pytest.approx(0.6, rel=0.02)


def test_null_sample_is_a_user_error_naming_the_record():
    base = make_run([_case("eager", MEDIAN, 1)])
    new = make_run([_case("eager", MEDIAN, 2)])
    new["records"][0]["samples_s"][3] = None
    with pytest.raises(UserError, match="finite and positive") as exc:
        compare_runs(as_run(base), as_run(new), new_path="new.json")
    assert exc.value.file == "new.json" and exc.value.field.endswith("eager.samples_s")


def test_bad_fail_on_value_is_a_user_error():
    assert parse_fail_on("slower, missing") == {"slower", "missing"}
    with pytest.raises(UserError, match="--fail-on|unknown"):
        parse_fail_on("slower,regressed")


# ---------------------------------------------------------------- exports


def _mixed_pair():
    names = [("fast", -0.10), ("same", 0.0), ("slow", 0.10)]  # file order is not worst-first
    base = make_run([_case(n, MEDIAN, i) for i, (n, _) in enumerate(names)]
                    + [_case("dropped", MEDIAN, 9)])
    new = make_run([_case(n, MEDIAN * (1 + c), 100 + i) for i, (n, c) in enumerate(names)])
    return base, new


def test_markdown_lists_worst_regressions_first_and_problems():
    base, new = _mixed_pair()
    r = compare_runs(as_run(base), as_run(new), base_path="main.json", new_path="pr.json")
    text = to_markdown(r)
    assert "regressions found" in text
    rows = [line for line in text.splitlines() if line.startswith("| gemm/")]
    assert [row.split("|")[-2].strip() for row in rows] == [SLOWER, SAME, FASTER]
    assert "Missing from NEW" in text and "dropped" in text
    assert "main.json" in text and "pr.json" in text


def test_json_export_holds_counts_and_exit_code():
    base, new = _mixed_pair()
    r = compare_runs(as_run(base), as_run(new))
    data = json.loads(json.dumps(to_json(r, {"slower"})))
    assert data["counts"] == {SLOWER: 1, AMBIGUOUS: 0, SAME: 1, FASTER: 1}
    assert data["exit_code"] == 1
    assert data["pairs"][0]["verdict"] == SLOWER and data["pairs"][0]["ratio"] > 1.05
    assert [m["name"].split("/")[-1] for m in data["missing"]] == ["dropped"]


def test_github_benchmark_export_is_custom_smaller_is_better():
    run = make_run([_case("eager", 2e-3, 1), make_record(impl="cuda", status="failed")])
    entries = json.loads(json.dumps(to_github_benchmark(as_run(run))))
    assert len(entries) == 1  # failed records have no time to track
    e = entries[0]
    assert set(e) <= {"name", "unit", "value", "range", "extra"}
    assert e["name"] == "gemm/M=1024,N=1024,K=1024/bfloat16/eager" and e["unit"] == "us"
    median = run["records"][0]["time_s"]["median"]
    assert e["value"] == pytest.approx(median * 1e6)
    assert e["range"].startswith("± ") and float(e["range"][2:]) > 0
    assert "SOL" in e["extra"]


def test_bencher_export_holds_latency_in_ns():
    run = make_run([_case("eager", 2e-3, 1), _case("cuda", 1e-3, 2)])
    data = json.loads(json.dumps(to_bencher(as_run(run))))
    assert set(data) == {"gemm/M=1024,N=1024,K=1024/bfloat16/eager", "gemm/M=1024,N=1024,K=1024/bfloat16/cuda"}
    for rec in run["records"]:
        lat = data["/".join((rec["op"], rec["case"], rec["dtype"], rec["impl"]))]["latency"]
        assert lat["value"] == pytest.approx(rec["time_s"]["median"] * 1e9)
        assert lat["lower_value"] <= lat["value"] <= lat["upper_value"]


# ---------------------------------------------------------------- CLI


@pytest.fixture()
def files(tmp_path):
    def make(change: float, *, device: str = "NVIDIA H200", extra_base: list | None = None):
        base, new = ab_runs(MEDIAN, change, 0.01, 50, seed=5)
        base["records"] += extra_base or []
        new["env"]["device"] = device
        return write_run(tmp_path / "base.json", base), write_run(tmp_path / "new.json", new)

    return make


def test_cli_exit_1_on_slower_and_writes_every_export(files, tmp_path):
    b, n = files(0.08)
    out = {k: tmp_path / f"out.{k}" for k in ("md", "json", "gh", "bencher")}
    res = CliRunner().invoke(app, ["compare", str(b), str(n), "--markdown", str(out["md"]), "--json",
                                   str(out["json"]), "--github-benchmark", str(out["gh"]),
                                   "--bencher", str(out["bencher"])])
    assert res.exit_code == 1, res.output
    assert SLOWER in res.output
    assert json.loads(out["json"].read_text())["counts"][SLOWER] == 1
    assert len(json.loads(out["gh"].read_text())) == 1
    assert len(json.loads(out["bencher"].read_text())) == 1
    assert SLOWER in out["md"].read_text()


def test_cli_exit_0_when_nothing_regressed(files):
    b, n = files(0.0)
    res = CliRunner().invoke(app, ["compare", str(b), str(n)])
    assert res.exit_code == 0, res.output


def test_cli_fail_on_missing(files):
    b, n = files(0.0, extra_base=[_case("gone", MEDIAN, 77)])
    assert CliRunner().invoke(app, ["compare", str(b), str(n)]).exit_code == 0
    res = CliRunner().invoke(app, ["compare", str(b), str(n), "--fail-on", "slower,missing,failed"])
    assert res.exit_code == 1, res.output


def test_cli_refuses_cross_device_time_with_exit_2(files):
    b, n = files(0.0, device="NVIDIA A100-SXM4-80GB")
    res = CliRunner().invoke(app, ["compare", str(b), str(n)])
    assert res.exit_code == 2
    assert "different devices" in res.output
    assert CliRunner().invoke(app, ["compare", str(b), str(n), "--allow-cross-device"]).exit_code == 0


def test_cli_corrupt_file_is_exit_2_naming_the_file(files, tmp_path):
    b, _ = files(0.0)
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    res = CliRunner().invoke(app, ["compare", str(b), str(bad)])
    assert res.exit_code == 2 and "broken.json" in res.output


def test_runs_timed_or_scored_differently_are_refused_unless_allowed():
    base, new = ab_runs(1e-3, 0.0, 0.01, 30, seed=5)
    for rec in new["records"]:
        rec["timer"] = "cupti"
    with pytest.raises(UserError, match=r"timed with 'events' and NEW with 'cupti'"):
        compare_runs(as_run(base), as_run(new))
    assert compare_runs(as_run(base), as_run(new), allow_mixed_methods=True).pairs
    base, new = ab_runs(1e-3, 0.0, 0.01, 30, seed=6)
    new["peaks"] = {**new["peaks"], "source": "measured"}
    with pytest.raises(UserError, match=r"'datasheet' peaks and NEW against 'measured'"):
        compare_runs(as_run(base), as_run(new), metric="sol")
    assert compare_runs(as_run(base), as_run(new)).pairs   # times do not depend on the peaks


def test_runs_flushed_differently_are_refused_and_older_records_count_as_write():
    base, new = ab_runs(1e-3, 0.0, 0.01, 30, seed=7)
    for rec in base["records"]:
        rec["telemetry"] = {"flush_bytes": 128 << 20}                       # before the mode was recorded
    for rec in new["records"]:
        rec["telemetry"] = {"flush_bytes": 128 << 20, "flush_mode": "read"}
    with pytest.raises(UserError, match=r"flushed the L2 by 'write' and NEW by 'read'"):
        compare_runs(as_run(base), as_run(new))
    assert compare_runs(as_run(base), as_run(new), allow_mixed_methods=True).pairs
    for rec in new["records"]:
        rec["telemetry"]["flush_mode"] = "write"
    assert compare_runs(as_run(base), as_run(new)).pairs


# ---------------------------------------------------------------- the run-to-run criterion

TINY = 3.14e-6     # the H200 gelu 1024x1024 bf16 eager that an A/A pair once called SLOWER at +4.3%


def _shifted(median: float, shift: float, noise: float, n: int, seed: int) -> tuple[list, list]:
    """A/B samples where NEW's whole run sits `shift` away: what a run-to-run offset looks like."""
    return noisy_samples(median, noise, n, seed), noisy_samples(median * (1 + shift), noise, n, seed + 1)


def test_a_pure_run_to_run_shift_is_same():
    # Each run's median moves by ~5% on this tiny kernel; NEW landed 8% away with tight samples.
    base, new = _shifted(TINY, 0.08, 0.005, 200, seed=11)
    v = decide(base, new, run_to_run=(0.05, 0.05))
    assert v.verdict == SAME and v.decided_by == RUN_TO_RUN
    assert v.criteria == {WITHIN: True, RUN_TO_RUN: False, THRESHOLD: True}
    # Without the run-to-run criterion the same samples would fail the build:
    assert decide(base, new).verdict == SLOWER


def test_a_shift_beyond_the_run_to_run_spread_is_slower():
    base, new = _shifted(TINY, 0.30, 0.005, 200, seed=12)
    v = decide(base, new, run_to_run=(0.05, 0.05))
    assert v.verdict == SLOWER and v.decided_by == ALL_THREE and all(v.criteria.values())
    assert v.rr_margin == pytest.approx(3.29 * 0.05 * 2 ** 0.5, rel=1e-3)


def test_a_tiny_kernel_shifted_4_percent_is_slower_when_the_model_says_runs_agree():
    rr_default = default_model("cuda").spread(TINY)
    slower = 0
    for seed in range(20):
        # Samples like the H200 pair's: +4.3%, CI about [+3.3%, +5.3%], p ~ 1e-20.
        base, new = _shifted(TINY, 0.043, 0.03, 120, seed=100 + 2 * seed)
        quiet = decide(base, new, run_to_run=(0.003, 0.003))      # a quiet runner, measured
        assert quiet.criteria[RUN_TO_RUN], quiet.reason              # 4.3% is far beyond 3.29 x 0.42%
        if quiet.verdict == SLOWER:
            slower += 1
        else:                                                        # only the CI's own width can spare it
            assert quiet.decided_by == THRESHOLD, quiet.reason
        # The same pair under the default CUDA model (nothing measured): never a false alarm.
        assert decide(base, new, run_to_run=(rr_default, rr_default)).verdict in (SAME, AMBIGUOUS)
    assert slower >= 12


def test_an_a_a_run_with_run_to_run_offsets_never_gives_slower_or_faster():
    rng = np.random.default_rng(20261201)
    model = default_model("cuda")
    verdicts = []
    for i in range(200):
        median = float(10 ** rng.uniform(-5.7, -2))            # 2 us .. 10 ms
        spread = model.spread(median)
        offset = float(np.exp(spread * rng.standard_normal() * 2 ** 0.5))   # the two runs' medians differ
        base = noisy_samples(median, 0.01, 100, seed=2 * i)
        new = noisy_samples(median * offset, 0.01, 100, seed=2 * i + 1)
        verdicts.append(decide(base, new, run_to_run=(spread, spread), seed=i).verdict)
    assert SLOWER not in verdicts and FASTER not in verdicts
    assert verdicts.count(SAME) > 150


def test_records_without_run_to_run_get_the_default_model_and_say_so():
    base, new = ab_runs(MEDIAN, 0.0, 0.01, 50, seed=21)        # an older results file: no time_s.run_to_run
    r = compare_runs(as_run(base), as_run(new))
    p = r.pairs[0]
    assert p.base_rr.is_default and "not in the results file" in p.base_rr.source
    assert p.base_rr.spread == pytest.approx(default_model("cuda").spread(p.base_value), rel=1e-6)
    assert r.default_rr == 2
    md = to_markdown(r)
    assert "*" in md.split("| gemm/")[1].split("\n")[0] and "default run-to-run model" in md


def test_markdown_and_json_say_which_criterion_decided():
    base = make_run([_case("slow", TINY, 1), _case("shifted", TINY, 2), _case("steady", MEDIAN, 3)])
    new = make_run([_case("slow", TINY * 1.3, 11), _case("shifted", TINY * 1.08, 12), _case("steady", MEDIAN, 13)])
    for rec in base["records"] + new["records"]:
        spread = 0.05 if rec["impl"] != "steady" else 0.002
        rec["time_s"].update(run_to_run=spread, run_to_run_source="measured:test-gpu")
    r = compare_runs(as_run(base), as_run(new))
    by = {p.key[-1]: p.verdict for p in r.pairs}
    assert by["slow"].verdict == SLOWER and by["shifted"].verdict == SAME and by["steady"].verdict == SAME
    assert by["shifted"].decided_by == RUN_TO_RUN
    text = to_markdown(r)
    assert "decided by" in text and "run-to-run" in text.split("\n")[6]
    rows = {line.split("|")[1].strip().split("/")[-1]: line for line in text.splitlines() if line.startswith("| gemm/")}
    assert ALL_THREE in rows["slow"] and f"| {RUN_TO_RUN} | SAME |" in rows["shifted"]
    assert "±" in rows["shifted"] and "*" not in rows["shifted"]
    data = json.loads(json.dumps(to_json(r)))
    pair = next(p for p in data["pairs"] if p["key"][-1] == "shifted")
    assert pair["criteria"] == {WITHIN: True, RUN_TO_RUN: False, THRESHOLD: True}
    assert pair["decided_by"] == RUN_TO_RUN and pair["base_run_to_run"]["source"] == "measured:test-gpu"
    assert data["confidence"] == 0.999 and data["default_run_to_run"] == 0


def test_a_higher_confidence_asks_more_of_a_change():
    base, new = _shifted(MEDIAN, 0.05, 0.005, 100, seed=31)
    assert decide(base, new, run_to_run=(0.01, 0.01), confidence=0.99).verdict == SLOWER   # margin 3.7%
    v = decide(base, new, run_to_run=(0.01, 0.01), confidence=0.9999)                      # margin 5.5%
    assert v.verdict == SAME and v.decided_by == RUN_TO_RUN


def _noise_file(tmp_path, rel: float) -> str:
    reps = [KernelRepeats(f"k{i}", (t, t * (1 + rel), t * (1 - rel))) for i, t in enumerate((2e-6, 1e-4, 1e-2))]
    cal = assemble(reps, fingerprint_="test-gpu", device_kind="cuda", device="x", torch_version="", budget_s=0.25,
                   timer="events")
    return str(write_noise(cal, tmp_path))


def test_cli_noise_model_flag_replaces_the_records_model(tmp_path):
    base, new = ab_runs(MEDIAN, 0.08, 0.005, 100, seed=41)
    b, n = write_run(tmp_path / "b.json", with_rr(base, 0.001)), write_run(tmp_path / "n.json", with_rr(new, 0.001))
    assert CliRunner().invoke(app, ["compare", str(b), str(n)]).exit_code == 1
    wide = _noise_file(tmp_path, 0.05)
    res = CliRunner().invoke(app, ["compare", str(b), str(n), "--noise-model", wide, "--json", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    pair = json.loads((tmp_path / "c.json").read_text())["pairs"][0]
    assert pair["base_run_to_run"]["source"] == "measured:test-gpu" and pair["decided_by"] == RUN_TO_RUN


@pytest.mark.parametrize("args, flag", [
    (["--noise-model", "/nonexistent/noise.json"], "--noise-model"),
    (["--confidence", "1.5"], "--confidence"),
])
def test_cli_bad_gate_flags_exit_2_naming_them(files, args, flag):
    b, n = files(0.0)
    res = CliRunner().invoke(app, ["compare", str(b), str(n), *args])
    assert res.exit_code == 2 and flag in res.output and "Traceback" not in res.output


# ---------------------------------------------------------------- compare --aa


def _aa_runs(tmp_path, count: int, planted: dict | None = None) -> list[str]:
    """`count` runs of the same three cases, each run's medians offset as the run-to-run model says."""
    rng = np.random.default_rng(7)
    paths = []
    for r in range(count):
        recs = []
        for i, (impl, median) in enumerate((("tiny", TINY), ("mid", 60e-6), ("big", 2e-3))):
            spread = default_model("cuda").spread(median)
            offset = float(np.exp(spread * rng.standard_normal())) * (planted or {}).get((r, impl), 1.0)
            recs.append(_case(impl, median * offset, 100 * r + i))
        paths.append(str(write_run(tmp_path / f"aa_{r}.json", make_run(recs))))
    return paths


def test_aa_reports_zero_false_alarms_on_unchanged_code(tmp_path):
    paths = _aa_runs(tmp_path, 4)
    result = compare_aa(paths)
    assert len(result.comparisons) == 6 and len(result.pairs) == 18 and not result.false_alarms
    res = CliRunner().invoke(app, ["compare", "--aa", *paths, "--json", str(tmp_path / "aa.json"),
                                   "--markdown", str(tmp_path / "aa.md")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "aa.json").read_text())
    assert data["pairs"] == 18 and data["false_alarms"] == 0 and len(data["comparisons"]) == 6
    assert data["spreads"]["n"] == 18 and data["spreads"]["max"] < 3.29
    assert len(data["worst"]) == 10 and "0 false alarm" in (tmp_path / "aa.md").read_text()


def test_aa_counts_a_false_alarm_and_exits_1(tmp_path):
    paths = _aa_runs(tmp_path, 3, planted={(2, "big"): 1.2})    # run 2 is not unchanged code after all
    result = compare_aa(paths)
    assert sorted((a.comparison.base_path, a.comparison.new_path, a.pair.key[-1]) for a in result.false_alarms) == \
        [(paths[0], paths[2], "big"), (paths[1], paths[2], "big")]      # run 2 against runs 0 and 1
    res = CliRunner().invoke(app, ["compare", "--aa", *paths])
    assert res.exit_code == 1 and "false alarm" in res.output


def test_aa_needs_two_runs_and_compare_needs_exactly_two_without_it(tmp_path):
    paths = _aa_runs(tmp_path, 3)
    res = CliRunner().invoke(app, ["compare", "--aa", paths[0]])
    assert res.exit_code == 2 and "--aa" in res.output
    res = CliRunner().invoke(app, ["compare", *paths])
    assert res.exit_code == 2 and "--aa" in res.output and "Traceback" not in res.output
