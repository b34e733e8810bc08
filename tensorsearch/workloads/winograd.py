"""Winograd F(m, r) transform matrices (Cook-Toom construction, Lavin & Gray 2015).

The matrices are the ones TVM's ``topi.nn.winograd_util.winograd_transform_matrices``
builds: interpolation points from Barabasz et al. (2018), ``A`` of shape (alpha, m),
``B`` of shape (alpha, alpha) and ``G`` of shape (alpha, r) with ``alpha = m + r - 1``, so
that for one tile ``d`` (alpha x alpha) and one kernel ``g`` (r x r)::

    Y = A.T @ ((G @ g @ G.T) * (B.T @ d @ B)) @ A      # the m x m correlation of d with g
"""

from __future__ import annotations

from functools import cache

import numpy as np

# interpolation points per degree (= m + r - 2), the low-error choices of Barabasz et al.
_POINTS: dict[int, tuple[float, ...]] = {
    3: (0, -1, 1),
    4: (0, -1, 1, 1 / 2),
    5: (0, -1, 1, 1 / 2, -2),
    6: (0, -1, 1, 1 / 2, -2, -1 / 2),
    7: (0, -1, 1, 1 / 2, -1 / 2, 2, -2),
    8: (0, -1, 1, 1 / 2, -1 / 2, 2, -2, -1 / 4),
    9: (0, -1, 1, 1 / 2, -1 / 2, 2, -2, -1 / 4, 4),
}


def _lagrange_denominators(points: np.ndarray) -> np.ndarray:
    n = len(points)
    return np.array([np.prod([points[i] - points[k] for k in range(n) if k != i]) for i in range(n)])


@cache
def transform_matrices(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, G)`` in float64 for the Winograd algorithm F(m x m, r x r)."""
    if not 1 < m < 9:
        raise ValueError(f"unsupported Winograd tile size {m} (supported: 2..8)")
    if not 2 < r < 8:
        raise ValueError(f"unsupported Winograd kernel size {r} (supported: 3..7)")
    degree = m + r - 2
    if degree not in _POINTS:
        raise ValueError(f"no interpolation points for F({m}, {r})")
    pts = np.array(_POINTS[degree], dtype=np.float64)  # alpha - 1 finite points, plus infinity
    alpha = m + r - 1
    n = alpha - 1

    # F: diagonal of the Lagrange denominators, with 1 for the point at infinity
    f = np.zeros((alpha, alpha))
    f[np.arange(n), np.arange(n)] = _lagrange_denominators(pts)
    f[n, n] = 1.0
    if f[0, 0] < 0:
        f[0, :] *= -1

    def vandermonde(rows: int, cols: int) -> np.ndarray:
        # rows-1 finite points raised to powers 0..cols-1, then the row of the point at infinity
        v = np.zeros((rows, cols))
        for i in range(rows - 1):
            v[i] = pts[i] ** np.arange(cols)
        v[rows - 1, cols - 1] = 1.0
        return v

    a_mat = vandermonde(alpha, m)
    g_mat = (vandermonde(alpha, r).T @ np.linalg.inv(f)).T

    # B: coefficients of the Lagrange basis polynomials, completed for the point at infinity
    denom = _lagrange_denominators(pts)
    coef = np.zeros((n, n))  # coef[i, p]: coefficient of x**p in l_i(x)
    for i in range(n):
        poly = np.poly1d([1.0])
        for k in range(n):
            if k != i:
                poly = poly * np.poly1d([1.0, -pts[k]])
        c = poly.coeffs[::-1]  # lowest power first
        coef[i, : len(c)] = c / denom[i]
    t = np.concatenate([np.eye(n), -(pts[:, None] ** n)], axis=1)  # (n, alpha)
    b_mat = np.concatenate([coef.T @ t, np.eye(alpha)[n][None, :]], axis=0)
    b_mat = b_mat @ f.T
    return a_mat, b_mat, g_mat
