// Winograd F(n, r) transform matrices generated at compile time from interpolation points (paper eq. (1)).
//
// For the correlation y_j = sum_k w_k x_{j+k} (j < n, k < r, x of length alpha = n + r - 1):
//   y = A^T [ (G w) (.) (D^T x) ]
// With finite points a_0..a_{alpha-2} and the point at infinity (the last row):
//   A[i][j]  = a_i^j                      A[inf][j]  = [j == n-1]
//   G[i][k]  = a_i^k / f_i                G[inf][k]  = [k == r-1]      f_i = prod_{l != i} (a_i - a_l)
//   D^T[i]   = coefficients of prod_{l != i} (x - a_l),   D^T[inf] = coefficients of prod_l (x - a_l)
// This is the transposed Toom-Cook linear convolution; tests check the identity in exact arithmetic.
// alpha-16 variants carry the scaling matrices of eq. (7): rows of G and D^T are normalised to unit L1 norm
// and the output transform A absorbs the inverse factors, so the identity is unchanged.
#pragma once

#include "variants.h"

namespace winrs {

// The k-th finite point: 0, 1, -1, 2, -2, 1/2, -1/2, 3, -3, 1/3, -1/3, 4, -4, 1/4, -1/4.
constexpr double interpolation_point(int k) {
  if (k == 0) return 0.0;
  const int pair = (k - 1) / 2;  // 0: +-1, 1: +-2, 2: +-1/2, 3: +-3, 4: +-1/3, ...
  const double sign = (k % 2 == 1) ? 1.0 : -1.0;
  if (pair == 0) return sign;
  const int m = (pair + 1) / 2 + 1;
  return sign * ((pair % 2 == 1) ? double(m) : 1.0 / m);
}

struct Transform {
  int alpha, n, r;
  double A[kMaxAlpha][kMaxN];       // alpha x n, output transform
  double G[kMaxAlpha][kMaxR];       // alpha x r, filter transform (applied to output-gradient units)
  double DT[kMaxAlpha][kMaxAlpha];  // alpha x alpha, input transform D^T
};

constexpr double abs_value(double v) { return v < 0 ? -v : v; }

constexpr Transform make_transform(int n, int r, bool scaled) {
  Transform t{};
  t.alpha = n + r - 1;
  t.n = n;
  t.r = r;
  const int finite = t.alpha - 1;
  double a[kMaxAlpha] = {};
  for (int i = 0; i < finite; ++i) a[i] = interpolation_point(i);

  for (int i = 0; i < finite; ++i) {
    double f = 1.0;
    for (int l = 0; l < finite; ++l)
      if (l != i) f *= a[i] - a[l];
    double power = 1.0;
    for (int j = 0; j < n || j < r; ++j) {
      if (j < n) t.A[i][j] = power;
      if (j < r) t.G[i][j] = power / f;
      power *= a[i];
    }
  }
  t.A[finite][n - 1] = 1.0;
  t.G[finite][r - 1] = 1.0;

  // D^T rows: polynomial products, coefficients in increasing powers of x.
  for (int i = 0; i <= finite; ++i) {
    double poly[kMaxAlpha + 1] = {1.0};
    int degree = 0;
    for (int l = 0; l < finite; ++l) {
      if (l == i) continue;
      for (int d = degree + 1; d > 0; --d) poly[d] = poly[d - 1] - a[l] * poly[d];
      poly[0] = -a[l] * poly[0];
      ++degree;
    }
    for (int c = 0; c < t.alpha; ++c) t.DT[i][c] = poly[c];
  }

  if (scaled) {
    for (int i = 0; i < t.alpha; ++i) {
      double g_norm = 0.0, d_norm = 0.0;
      for (int k = 0; k < r; ++k) g_norm += abs_value(t.G[i][k]);
      for (int c = 0; c < t.alpha; ++c) d_norm += abs_value(t.DT[i][c]);
      for (int k = 0; k < r; ++k) t.G[i][k] /= g_norm;
      for (int c = 0; c < t.alpha; ++c) t.DT[i][c] /= d_norm;
      for (int j = 0; j < n; ++j) t.A[i][j] *= g_norm * d_norm;
    }
  }
  return t;
}

constexpr Transform transform_of(int variant) {
  const Variant& v = kVariants[variant];
  return make_transform(v.n, v.r, v.alpha_class() == 16);
}

}  // namespace winrs
