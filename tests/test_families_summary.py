"""scripts/h200/families_summary.py: every case where a baseline beats our fastest kernel is listed,
odd sizes included (they are not rows of its table)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from synthetic import make_record, make_run, write_run

ROOT = Path(__file__).resolve().parents[1]


def _record(case: str, impl: str, median_s: float, spread: float = 0.0) -> dict:
    samples = [median_s * (1 + spread * k) for k in (-2, -1, 0, 1, 2)]
    return make_record("transpose", case, "bfloat16", impl, samples=samples, flops=0.0,
                       nbytes=8 * 2**20, compute_unit="simt", peak_key="fp32",
                       is_baseline=impl in ("eager", "compiled"))


def test_lists_each_case_where_a_baseline_is_faster(tmp_path):
    records = [
        _record("M=1024,N=1024", "eager", 8.6e-6), _record("M=1024,N=1024", "compiled", 2.35e-6),
        _record("M=1024,N=1024", "cuda", 2.58e-6), _record("M=1024,N=1024", "cuda_regs", 2.99e-6),
        _record("M=4095,N=4097", "compiled", 26.4e-6), _record("M=4095,N=4097", "cuda", 37.0e-6),
        _record("M=32768,N=8192", "compiled", 361.5e-6), _record("M=32768,N=8192", "cuda", 278.7e-6),
        _record("B=16,M=256,N=256", "compiled", 2.22e-6, 0.2), _record("B=16,M=256,N=256", "cuda", 2.30e-6, 0.2),
    ]
    path = write_run(tmp_path / "run.json", make_run(records))
    out = subprocess.run([sys.executable, str(ROOT / "scripts/h200/families_summary.py"), str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "3 cases where a baseline is faster than ours" in out.stdout
    # identical samples: no spread, so any lead is beyond the noise
    assert ("transpose M=1024,N=1024 bfloat16: ours 2.58 us, compiled 2.35 us (0.91x, beyond one run's noise: "
            "2 sigma 0.0%)") in out.stdout
    assert "transpose M=4095,N=4097 bfloat16: ours 37.00 us, compiled 26.40 us (0.71x, beyond" in out.stdout
    # samples 20% apart: rse = std / sqrt(5) / mean = 0.1414, 2 sigma of the difference = 2 * 0.1414 * sqrt(2) = 40.0%
    assert ("transpose B=16,M=256,N=256 bfloat16: ours 2.30 us, compiled 2.22 us (0.97x, within one run's noise: "
            "2 sigma 40.0%)") in out.stdout
    assert "M=32768,N=8192 bfloat16: ours" not in out.stdout   # ours is faster there
