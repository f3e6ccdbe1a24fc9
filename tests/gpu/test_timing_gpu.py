"""CUDA timers on a real GPU: agreement with CUPTI, telemetry and the timer fields on records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from typer.testing import CliRunner  # noqa: E402

from solbench import timing  # noqa: E402
from solbench.cli import app  # noqa: E402
from solbench.telemetry import ClockMonitor  # noqa: E402
from tests import cheats  # noqa: E402


def _add_call(n: int):
    sets = [(torch.randn(n, device="cuda"), torch.randn(n, device="cuda")) for _ in range(3)]
    return lambda i: torch.add(*sets[i % 3])


def _median(call, timer: str) -> float:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    mon = ClockMonitor.open("cuda", 0)
    m = timing.measure(call, "cuda", timing.TimingConfig(timer=timer, budget_s=1.0, cross_check=False), l2,
                       mon.sm_max_mhz, mon)
    return m.stats.median


def test_timers_agree_on_a_long_kernel():
    call = _add_call(2**24)   # 192 MiB moved: tens of microseconds
    cupti = _median(call, "cupti")
    assert cupti >= 20e-6
    for timer in ("events", "graph"):
        assert _median(call, timer) == pytest.approx(cupti, rel=0.05), timer


def test_default_timer_measures_the_kernel_not_the_launch():
    call = _add_call(2**18)   # 3 MiB moved: about a microsecond of kernel
    cupti, events = _median(call, "cupti"), _median(call, "events")
    assert events == pytest.approx(cupti, rel=0.25), (events, cupti)


@pytest.mark.parametrize("timer", ["events", "graph", "cupti"])
def test_records_carry_timer_telemetry_and_cross_check(tmp_path, timer):
    specs = tmp_path / "specs"
    op = cheats.write_spec(specs, "honest", cases="[{M: 4096, N: 4096}]", cuda=True)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["run", "--ops", op, "--specs", str(specs), "--out", str(tmp_path),
                                   "--json", str(out), "--no-isolate", "--budget", "0.3", "--timer", timer,
                                   "--peaks", "at-clock"])
    assert res.exit_code == 0, res.output
    for r in cheats.records_by_impl(out).values():
        assert r["status"] == "ok", r["message"]
        assert r["timer"] == timer
        tel = r["telemetry"]
        if tel["enabled"]:
            assert tel["during"]["n"] >= 1 and tel["observed_sm_mhz"] > 0
            assert any("re-scored at the observed SM clock" in w for w in r["warnings"])
        if timer != "cupti":
            assert tel["cross_check"]["ok"] is True
