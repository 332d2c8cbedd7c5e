"""The statistics of the analysis that Spark does not have, on the numbers it returns (pure: numpy and
math): confidence intervals of correlations (Fisher's z) and of regression coefficients (Student's t), and
least squares solved from a Gram matrix Spark computed in one pass (jobs/analysis.py)."""
from __future__ import annotations

import math

import numpy as np

Z95 = 1.959964  # the normal quantile of a 95% interval


def fisher_interval(r: float, n: int, method: str) -> tuple[float | None, float | None]:
    """The 95% interval of a correlation coefficient by Fisher's z (Spearman's with Fieller's 1.06)."""
    if n <= 3 or r is None:
        return None, None
    z = math.atanh(max(-0.999999, min(0.999999, r)))
    se = math.sqrt((1.06 if method == "spearman" else 1.0) / (n - 3))
    return math.tanh(z - Z95 * se), math.tanh(z + Z95 * se)


def ols(g, x: list[int], y: int) -> tuple[float, list[float], list[float], float]:
    """Least squares of column `y` on the intercept (column 0) and columns `x`, from the Gram matrix `g` of
    them all: (intercept, coefficients, their standard errors, R²). Solved centred and on the correlation
    scale, where the normal equations are well conditioned whatever the features' units."""

    n = g[0, 0]
    idx = [*x, y]
    mean = g[0, idx] / n
    centred = g[np.ix_(idx, idx)] - n * np.outer(mean, mean)
    scale = np.sqrt(np.diag(centred))
    corr = centred / np.outer(scale, scale)
    k = len(x)
    inverse = np.linalg.inv(corr[:k, :k])
    standardized = inverse @ corr[:k, k]
    coefficients = standardized * scale[k] / scale[:k]
    residual = centred[k, k] * (1 - corr[:k, k] @ standardized)
    variance = max(residual, 0.0) / (n - k - 1)
    errors = np.sqrt(variance * np.diag(inverse)) / scale[:k]
    intercept = mean[k] - coefficients @ mean[:k]
    return float(intercept), [float(c) for c in coefficients], [float(e) for e in errors], \
        float(1 - residual / centred[k, k])


def independent(columns: list[str], g, tolerance: float = 1e-9) -> list[str]:
    """The columns, in order, each kept only if it is not (within `tolerance`, on the correlation scale) a
    linear combination of the intercept and the columns kept before it; `g` is the Gram matrix of the
    intercept and `columns`."""

    kept = [0]
    for j in range(1, len(columns) + 1):
        idx = kept + [j]
        sub = g[np.ix_(idx, idx)]
        scale = np.sqrt(np.diag(sub))
        if scale.min() > 0 and np.linalg.eigvalsh(sub / np.outer(scale, scale))[0] > tolerance:
            kept.append(j)
    return [columns[j - 1] for j in kept[1:]]


def interval(value: float, error: float, t: float) -> tuple[float, float | None, float | None]:
    if math.isnan(error):
        return value, None, None
    return value, value - t * error, value + t * error


def t_quantile(df: int) -> float:
    """Student's t 97.5% quantile (a 95% interval's), by the Cornish-Fisher expansion around the normal's
    (Abramowitz and Stegun 26.7.5: within 0.004 at 3 degrees of freedom, 3e-4 at 5, closer as they grow);
    Spark has none."""
    z, v = Z95, max(df, 1)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / (92160 * v ** 4))
