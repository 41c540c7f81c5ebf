"""Student's t distribution without scipy: the regularised incomplete beta function by continued fraction.

``betainc(a, b, x)`` is I_x(a, b) (Numerical Recipes §6.4: modified Lentz evaluation of the continued
fraction, using the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where the fraction converges slowly).
The two-sided p-value of a t statistic with ``df`` degrees of freedom is I_{df/(df+t^2)}(df/2, 1/2).
"""

from __future__ import annotations

import math

_TINY = 1e-300
_EPS = 1e-16
_MAXIT = 100_000


def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAXIT + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if a <= 0 or b <= 0:
        raise ValueError("betainc needs a > 0 and b > 0")
    if not 0.0 <= x <= 1.0:
        raise ValueError("betainc needs 0 <= x <= 1")
    if x == 0.0 or x == 1.0:
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("the t distribution needs df > 0")
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    half = 0.5 * t_two_sided_p(t, df)
    return 1.0 - half if t > 0 else half


# ------------------------------------------------------------------ ShopSimRL parity (docs/gate.md)

ZERO_TOLERANCE = 1e-12  # coefficients this close to 0 are reported as 0.0 (as ShopSimRL does)


class RankDeficient(ArithmeticError):
    """The normal equations have no unique solution."""


def solve_exact(matrix: list[list[float]], rhs: list[float], rel_tol: float = 1e-12) -> list[float]:
    """Solve ``matrix @ x = rhs`` by Gauss-Jordan elimination with partial pivoting in plain floats.

    Column by column: the row with the largest absolute entry at or below the diagonal becomes the pivot
    (the first such row on ties); a pivot of magnitude <= ``rel_tol * max(1, max |entry|)`` means the system is
    rank deficient (:class:`RankDeficient`). The pivot row is divided by the pivot, then subtracted from every
    other row with a non-zero entry in that column. Plain Python floats in this fixed order, so the result is
    the same digits on every machine (numpy's LAPACK solve may differ in the last bits).
    """
    size = len(rhs)
    if any(len(row) != size for row in matrix):
        raise ValueError("solve_exact needs a square matrix with one row per right-hand side entry")
    rows = [[float(v) for v in row] + [float(rhs[i])] for i, row in enumerate(matrix)]
    biggest = max((abs(float(v)) for row in matrix for v in row), default=1.0)
    tolerance = max(1.0, biggest) * rel_tol
    for col in range(size):
        pivot = col
        for r in range(col + 1, size):
            if abs(rows[r][col]) > abs(rows[pivot][col]):
                pivot = r
        if abs(rows[pivot][col]) <= tolerance:
            raise RankDeficient(f"no usable pivot in column {col} (|pivot| <= {tolerance:g})")
        rows[col], rows[pivot] = rows[pivot], rows[col]
        top = rows[col]
        p = top[col]
        for j in range(col, size + 1):
            top[j] /= p
        for r in range(size):
            if r == col:
                continue
            row = rows[r]
            f = row[col]
            if f == 0.0:
                continue
            for j in range(col, size + 1):
                row[j] -= f * top[j]
    return [rows[i][size] for i in range(size)]


def percentile_linear(sorted_values, probability: float) -> float:
    """The ``probability`` quantile of ascending ``sorted_values``, linear between the two closest ranks
    (position ``probability * (n - 1)``; numpy's default 'linear' method)."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    pos = probability * (n - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi:
        return float(sorted_values[lo])
    w = pos - lo
    return float(sorted_values[lo]) * (1.0 - w) + float(sorted_values[hi]) * w
