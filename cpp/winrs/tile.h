// Per-tile WinRS math shared by the CPU executor and the CUDA kernels: the three transforms of one
// F(n, r) tile (paper eq. (6)), written with the row-pair symmetry of section 5.2 (rows of the points +p and
// -p share even-position elements and negate odd-position ones), and the index mapping of a unit onto the
// input, with the height clipping of Figure 7 and the width masking of section 5.1.
#pragma once

#include "config.h"
#include "transforms.h"

namespace winrs {

template <int V>
struct TileMath {
  static constexpr Variant variant = kVariants[V];
  static constexpr int alpha = variant.alpha();
  static constexpr int n = variant.n;
  static constexpr int r = variant.r;
  static constexpr Transform T = transform_of(V);
  static constexpr int kPairs = (alpha - 2) / 2;  // rows 1..alpha-2 come in (+p, -p) pairs

  // Filter transform of one output-gradient unit: out = G w.
  template <typename Real>
  WINRS_HD static void filter(const Real (&w)[r], Real (&out)[alpha]) {
    if constexpr (alpha == 1) {
      out[0] = w[0];
    } else {
      out[0] = Real(T.G[0][0]) * w[0];
      WINRS_UNROLL
      for (int p = 0; p < kPairs; ++p) {
        const int row = 1 + 2 * p;
        Real even = 0, odd = 0;
        WINRS_UNROLL
        for (int k = 0; k < r; k += 2) even += Real(T.G[row][k]) * w[k];
        WINRS_UNROLL
        for (int k = 1; k < r; k += 2) odd += Real(T.G[row][k]) * w[k];
        out[row] = even + odd;
        out[row + 1] = even - odd;
      }
      out[alpha - 1] = Real(T.G[alpha - 1][r - 1]) * w[r - 1];
    }
  }

  // Input transform of one input tile: out = D^T x.
  template <typename Real>
  WINRS_HD static void input(const Real (&x)[alpha], Real (&out)[alpha]) {
    if constexpr (alpha == 1) {
      out[0] = x[0];
    } else {
      out[0] = dot_row(0, x);
      WINRS_UNROLL
      for (int p = 0; p < kPairs; ++p) {
        const int row = 1 + 2 * p;
        Real even = 0, odd = 0;
        WINRS_UNROLL
        for (int c = 0; c < alpha; c += 2) even += Real(T.DT[row][c]) * x[c];
        WINRS_UNROLL
        for (int c = 1; c < alpha; c += 2) odd += Real(T.DT[row][c]) * x[c];
        out[row] = even + odd;
        out[row + 1] = even - odd;
      }
      out[alpha - 1] = dot_row(alpha - 1, x);
    }
  }

  // Output transform of accumulated products: y = A^T m.
  template <typename Real>
  WINRS_HD static void output(const Real (&m)[alpha], Real (&y)[n]) {
    if constexpr (alpha == 1) {
      y[0] = m[0];
    } else {
      WINRS_UNROLL
      for (int j = 0; j < n; ++j) y[j] = Real(T.A[0][j]) * m[0];
      WINRS_UNROLL
      for (int p = 0; p < kPairs; ++p) {
        const int row = 1 + 2 * p;
        const Real sum = m[row] + m[row + 1], diff = m[row] - m[row + 1];
        WINRS_UNROLL
        for (int j = 0; j < n; ++j) y[j] += Real(T.A[row][j]) * ((j % 2 == 0) ? sum : diff);
      }
      y[n - 1] += Real(T.A[alpha - 1][n - 1]) * m[alpha - 1];
    }
  }

 private:
  template <typename Real>
  WINRS_HD static Real dot_row(int row, const Real (&x)[alpha]) {
    Real s = 0;
    WINRS_UNROLL
    for (int c = 0; c < alpha; ++c)
      if (T.DT[row][c] != 0.0) s += Real(T.DT[row][c]) * x[c];
    return s;
  }
};

// Output-gradient rows of a segment that meet real input rows for filter row fh (Figure 7): rows oh with
// 0 <= oh + fh - pad_top < in_h. Rows outside only multiply the height zero padding and are skipped.
struct RowRange {
  int begin, end;
};

WINRS_HD inline RowRange clip_rows(int seg_begin, int seg_end, int fh, int pad_top, int in_h) {
  int begin = pad_top - fh;
  int end = in_h + pad_top - fh;
  begin = begin > seg_begin ? begin : seg_begin;
  end = end < seg_end ? end : seg_end;
  return {begin, end > begin ? end : begin};
}

// Input column of tile element t for the unit starting at output-gradient column w0 and the filter-gradient
// tile starting at column f0; negative or >= in_w means width padding, read as zero.
WINRS_HD inline int input_column(int w0, int f0, int t, int pad_left) { return w0 + f0 + t - pad_left; }

WINRS_HD inline bool column_in_bounds(int col, int in_w) { return col >= 0 && col < in_w; }

}  // namespace winrs
