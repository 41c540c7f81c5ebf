"""The incomplete beta and Student t of shopsim_wh.analytics.stats against closed forms written here."""

from __future__ import annotations

import math

import pytest

from shopsim_wh.analytics.stats import betainc, t_cdf, t_two_sided_p


def t_abs_below(t: float, df: int) -> float:
    """P(|T| < t) for integer df: Abramowitz & Stegun 26.7.3 / 26.7.4 (finite trigonometric series)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        if df == 1:
            return 2 * theta / math.pi
        term, total = c, c
        for j in range(1, (df - 3) // 2 + 1):
            term *= c * c * (2 * j) / (2 * j + 1)
            total += term
        return 2 / math.pi * (theta + s * total)
    term, total = 1.0, 1.0
    for j in range(1, (df - 2) // 2 + 1):
        term *= c * c * (2 * j - 1) / (2 * j)
        total += term
    return s * total


@pytest.mark.parametrize("x", [1e-6, 0.01, 0.2, 0.5, 0.77, 0.99, 1 - 1e-9])
def test_betainc_closed_forms(x):
    for a in (0.5, 1.0, 2.5, 7.0, 40.0):
        assert betainc(a, 1.0, x) == pytest.approx(x**a, rel=1e-12, abs=1e-300)
        assert betainc(1.0, a, x) == pytest.approx(-math.expm1(a * math.log1p(-x)), rel=1e-12)
    assert betainc(0.5, 0.5, x) == pytest.approx(2 / math.pi * math.atan(math.sqrt(x / (1 - x))), rel=1e-12)
    for a, b in ((0.5, 3.0), (12.0, 0.5), (3.3, 4.4), (500.0, 0.5)):  # symmetry I_x(a,b) = 1 - I_{1-x}(b,a)
        assert betainc(a, b, x) + betainc(b, a, 1 - x) == pytest.approx(1.0, abs=1e-13)


def test_betainc_edges_and_errors():
    assert betainc(2.0, 3.0, 0.0) == 0.0 and betainc(2.0, 3.0, 1.0) == 1.0
    # I_x(2, 2) = 3x^2 - 2x^3
    assert betainc(2.0, 2.0, 0.3) == pytest.approx(3 * 0.09 - 2 * 0.027, rel=1e-13)
    with pytest.raises(ValueError):
        betainc(0.0, 1.0, 0.5)
    with pytest.raises(ValueError):
        betainc(1.0, 1.0, 1.5)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 10, 29, 30, 60, 251, 1000])
def test_t_two_sided_p_matches_series(df):
    for t in (0.0, 0.1, 0.9, 1.5, 2.0, 2.7, 4.0, 8.0, -3.2):
        assert t_two_sided_p(t, df) == pytest.approx(1 - t_abs_below(t, df), abs=1e-12)


def test_t_known_values_and_cdf():
    # two-sided 5% critical values from standard tables
    assert t_two_sided_p(12.706204736174707, 1) == pytest.approx(0.05, abs=1e-12)
    assert t_two_sided_p(2.228138851986274, 10) == pytest.approx(0.05, abs=1e-12)
    assert t_two_sided_p(2.042272456301238, 30) == pytest.approx(0.05, abs=1e-12)
    # df = 1 is Cauchy, df = 2 has a closed form
    for t in (-4.0, -0.3, 0.0, 1.7, 9.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-13)
    # huge df approaches the normal: P(|Z| > 1.959963984540054) = 0.05
    assert t_two_sided_p(1.959963984540054, 10**9) == pytest.approx(0.05, abs=1e-7)
    assert t_two_sided_p(float("inf"), 5) == 0.0
    assert t_two_sided_p(40.0, 96000) < 1e-300 or t_two_sided_p(40.0, 96000) == 0.0
    with pytest.raises(ValueError):
        t_two_sided_p(1.0, 0)
