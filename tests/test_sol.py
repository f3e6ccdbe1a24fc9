import pytest

from solbench import sol


def test_gemm_8192_bf16_on_h200_datasheet():
    flops = 2 * 8192**3
    nbytes = 3 * 8192 * 8192 * 2
    s = sol.score(flops, nbytes, median_s=1.5e-3, peak_flops=989.4e12, peak_bandwidth=4.8e12)
    assert s.bound == "compute"
    assert s.t_sol_s == pytest.approx(flops / 989.4e12)
    assert s.tflops == pytest.approx(flops / 1.5e-3 / 1e12)
    assert s.mfu == pytest.approx(s.tflops * 1e12 / 989.4e12)
    assert s.sol == pytest.approx(s.t_sol_s / 1.5e-3)
    assert s.intensity == pytest.approx(flops / nbytes)
    assert sol.invalid_reason(s) is None


def test_memory_bound_softmax():
    nbytes = 2 * 32768 * 8192 * 2
    s = sol.score(5 * 32768 * 8192, nbytes, 0.5e-3, 66.9e12, 4.8e12)
    assert s.bound == "memory"
    assert s.t_sol_s == pytest.approx(nbytes / 4.8e12)
    assert s.mbu == pytest.approx(nbytes / 0.5e-3 / 4.8e12)
    assert s.sol == pytest.approx(s.mbu)


def test_faster_than_light_is_invalid_not_a_win():
    s = sol.score(0, 1e9, median_s=1e-4, peak_flops=None, peak_bandwidth=4.8e12)
    assert s.sol > 1
    assert "faster than the speed of light" in sol.invalid_reason(s)


def test_zero_flops_and_missing_compute_peak():
    tsol, bound = sol.t_sol(0, 100, None, 10)
    assert (tsol, bound) == (10.0, "memory")
    s = sol.score(10, 100, 20.0, None, 10)
    assert s.mfu is None


def test_bad_inputs():
    with pytest.raises(ValueError):
        sol.score(1, 1, 0.0, 1, 1)
    with pytest.raises(ValueError):
        sol.t_sol(1, 1, 1, 0)


def test_speedup():
    assert sol.speedup(2.0, 1.0) == 2.0
    assert sol.speedup(None, 1.0) is None
