import math
import random

import pytest

from solbench import stats


def test_summary_of_known_samples():
    s = stats.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median, s.min, s.max, s.q1, s.q3, s.n) == (3.0, 1.0, 5.0, 2.0, 4.0, 5)
    assert s.mean == 3.0
    assert s.std == pytest.approx(math.sqrt(2.5))


def test_outliers_do_not_move_the_median():
    base = [1.0] * 50 + [1.01] * 50
    assert stats.summarize(base + [100.0]).median == pytest.approx(1.01)


def test_rse_shrinks_with_more_samples_and_needs_three():
    rng = random.Random(1)
    few = [1 + rng.gauss(0, 0.05) for _ in range(20)]
    many = few + [1 + rng.gauss(0, 0.05) for _ in range(2000)]
    assert stats.median_rse(many) < stats.median_rse(few)
    # sigma 5%: SE(median) ~ 1.2533 * 0.05 / sqrt(n)
    assert stats.median_rse(many) == pytest.approx(1.2533 * 0.05 / math.sqrt(len(many)), rel=0.15)
    assert math.isinf(stats.median_rse([1.0, 2.0]))


def test_geomean():
    assert stats.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert math.isnan(stats.geomean([]))
