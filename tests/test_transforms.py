"""The generated F(n, r) transforms are exact Winograd identities; the per-tile code of tile.h agrees."""

from fractions import Fraction

import numpy as np
import pytest

import winrs_jax
from winrs_jax import _winrs

VARIANTS = winrs_jax.variants()
IDS = [v.name for v in VARIANTS]


def _points(count):
    """0, 1, -1, 2, -2, 1/2, -1/2, 3, -3, 1/3, -1/3, ...: an independent rational generator."""
    out = [Fraction(0)]
    magnitude = [Fraction(1)]
    m = 2
    while len(magnitude) * 2 + 1 < count + 2:
        magnitude += [Fraction(m), Fraction(1, m)]
        m += 1
    for p in magnitude:
        out += [p, -p]
    return out[:count]


def _exact_matrices(n, r):
    """Toom-Cook in rationals, by inverting the Vandermonde matrix (not the closed form used in C++)."""
    alpha = n + r - 1
    pts = _points(alpha - 1)

    def vandermonde(cols):
        rows = [[p**j for j in range(cols)] for p in pts]
        return rows + [[Fraction(int(j == cols - 1)) for j in range(cols)]]

    v = vandermonde(alpha)
    # Gauss-Jordan inverse in exact arithmetic.
    aug = [row[:] + [Fraction(int(i == j)) for j in range(alpha)] for i, row in enumerate(v)]
    for col in range(alpha):
        pivot = next(i for i in range(col, alpha) if aug[i][col] != 0)
        aug[col], aug[pivot] = aug[pivot], aug[col]
        inv = 1 / aug[col][col]
        aug[col] = [e * inv for e in aug[col]]
        for i in range(alpha):
            if i != col and aug[i][col] != 0:
                f = aug[i][col]
                aug[i] = [a - f * b for a, b in zip(aug[i], aug[col], strict=True)]
    v_inv = [row[alpha:] for row in aug]
    a = vandermonde(n)
    g = vandermonde(r)
    dt = [[v_inv[t][i] for t in range(alpha)] for i in range(alpha)]  # (V^-1)^T
    return a, g, dt


def _identity_residual(a, g, dt, n, r):
    """max |sum_i A[i][j] G[i][k] DT[i][t] - [t == j + k]| over j, k, t: zero for an exact F(n, r)."""
    alpha = n + r - 1
    worst = 0
    for j in range(n):
        for k in range(r):
            for t in range(alpha):
                s = sum(a[i][j] * g[i][k] * dt[i][t] for i in range(alpha))
                worst = max(worst, abs(s - (1 if t == j + k else 0)))
    return worst


def test_thirteen_variants_of_figure_6():
    names = sorted((v.alpha_class, v.n, v.r) for v in VARIANTS)
    assert names == sorted(
        [(2, 1, 1), (4, 2, 3), (4, 3, 2)]
        + [(8, 3, 6), (8, 6, 3), (8, 4, 5), (8, 5, 4), (8, 7, 2)]
        + [(16, 5, 12), (16, 6, 11), (16, 7, 10), (16, 8, 9), (16, 9, 8)]
    )
    for v in VARIANTS:
        assert v.alpha == v.n + v.r - 1


def test_interpolation_points():
    assert [_winrs.interpolation_point(k) for k in range(15)] == [float(p) for p in _points(15)]


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_exact_rational_identity(variant):
    a, g, dt = _exact_matrices(variant.n, variant.r)
    assert _identity_residual(a, g, dt, variant.n, variant.r) == 0


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_generated_matrices_are_an_identity_in_float64(variant):
    a, g, dt = (np.array(m) for m in _winrs.transform(variant.index))
    assert a.shape == (variant.alpha, variant.n)
    assert g.shape == (variant.alpha, variant.r)
    assert dt.shape == (variant.alpha, variant.alpha)
    tensor = np.einsum("ij,ik,it->jkt", a, g, dt)
    expected = np.zeros_like(tensor)
    for j in range(variant.n):
        for k in range(variant.r):
            expected[j, k, j + k] = 1
    # float64 rounding of coefficients up to ~1e5 (alpha 16) bounds the residual far below 1e-9.
    assert np.abs(tensor - expected).max() < 1e-9


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.alpha_class < 16], ids=lambda v: v.name)
def test_unscaled_matrices_match_the_rational_construction(variant):
    """C++ uses the closed form G[i] = V_r[i] / f_i, D^T[i] = f_i (V^-1)^T[i]; compare row by row.
    (alpha-16 matrices carry the eq. (7) scaling and are checked by the identity and normalisation tests.)"""
    a, g, dt = (np.array(m) for m in _winrs.transform(variant.index))
    ea, eg, edt = _exact_matrices(variant.n, variant.r)
    pts = _points(variant.alpha - 1)
    for i in range(variant.alpha):
        f = 1
        if i < variant.alpha - 1:
            for j, q in enumerate(pts):
                if j != i:
                    f *= pts[i] - q
        np.testing.assert_allclose(a[i], [float(e) for e in ea[i]], rtol=1e-13, atol=0)
        np.testing.assert_allclose(g[i], [float(e / f) for e in eg[i]], rtol=1e-13, atol=0)
        np.testing.assert_allclose(dt[i], [float(e * f) for e in edt[i]], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.alpha_class == 16], ids=lambda v: v.name)
def test_alpha16_scaling_normalises_rows(variant):
    _, g, dt = (np.array(m) for m in _winrs.transform(variant.index))
    np.testing.assert_allclose(np.abs(g).sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.abs(dt).sum(axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.alpha > 2], ids=lambda v: v.name)
def test_row_pair_symmetry(variant):
    """Section 5.2: rows of +p and -p share even-position entries and negate odd-position ones."""
    for m in _winrs.transform(variant.index):
        m = np.array(m)
        sign = (-1.0) ** np.arange(m.shape[1])
        for row in range(1, variant.alpha - 1, 2):
            np.testing.assert_allclose(m[row + 1], sign * m[row], rtol=1e-13, atol=0)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_tile_code_computes_the_correlation(variant, rng):
    w = rng.standard_normal(variant.r)
    x = rng.standard_normal(variant.alpha)
    y = np.array(_winrs.correlate_tile(variant.index, list(w), list(x)))
    expected = np.array([np.dot(w, x[j : j + variant.r]) for j in range(variant.n)])
    np.testing.assert_allclose(y, expected, rtol=1e-9, atol=1e-9)


def test_tile_code_rejects_wrong_sizes():
    with pytest.raises(ValueError, match="tile sizes"):
        _winrs.correlate_tile(3, [1.0], [1.0])
    with pytest.raises(IndexError):
        _winrs.transform(13)
