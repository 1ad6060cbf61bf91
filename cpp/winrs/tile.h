// Per-tile WinRS math shared by the CPU executor and the CUDA kernels: the three transforms of one
// F(n, r) tile (paper eq. (6)), written with the row-pair symmetry of section 5.2 (rows of the points +p and
// -p share even-position elements and negate odd-position ones), and the index mapping of a unit onto the
// input, with the height clipping of Figure 7 and the width masking of section 5.1.
//
// Coefficients are read in constant expressions (static_for), so the compiler drops zero terms and turns
// +-1 products into additions, on the host and in device code alike.
#pragma once

#include <type_traits>

#include "config.h"
#include "transforms.h"

namespace winrs {

template <int Begin, int End, int Step = 1, typename F>
WINRS_HD inline void static_for(F&& f) {
  if constexpr (Begin < End) {
    f(std::integral_constant<int, Begin>{});
    static_for<Begin + Step, End, Step>(f);
  }
}

// sum += coefficient * value, with the coefficient known at compile time.
template <typename Real>
struct Term {
  template <typename Coefficient>
  WINRS_HD static void add(Real& sum, Coefficient, const Real& value) {
    constexpr double c = Coefficient::value;
    if constexpr (c == 1.0) {
      sum += value;
    } else if constexpr (c == -1.0) {
      sum -= value;
    } else if constexpr (c != 0.0) {
      sum += Real(c) * value;
    }
  }
};

template <int V>
struct TileMath {
  static constexpr Variant variant = kVariants[V];
  static constexpr int alpha = variant.alpha();
  static constexpr int n = variant.n;
  static constexpr int r = variant.r;
  static constexpr Transform T = transform_of(V);
  static constexpr int kPairs = alpha >= 2 ? (alpha - 2) / 2 : 0;  // rows 1..alpha-2: (+p, -p) pairs

  template <int Row, int Col>
  struct G {
    static constexpr double value = T.G[Row][Col];
  };
  template <int Row, int Col>
  struct DT {
    static constexpr double value = T.DT[Row][Col];
  };
  template <int Row, int Col>
  struct A {
    static constexpr double value = T.A[Row][Col];
  };

  // out = M in for M = G (Cols = r) or D^T (Cols = alpha): rows 0 and alpha-1 directly, the (+p, -p) row
  // pairs from their shared even and odd partial sums.
  template <template <int, int> class M, int Cols, typename Real>
  WINRS_HD static void apply(const Real (&in)[Cols], Real (&out)[alpha]) {
    if constexpr (alpha == 1) {
      out[0] = in[0];
    } else {
      out[0] = Real(0.0);
      out[alpha - 1] = Real(0.0);
      static_for<0, Cols>([&](auto c) {
        Term<Real>::add(out[0], M<0, decltype(c)::value>{}, in[c]);
        Term<Real>::add(out[alpha - 1], M<alpha - 1, decltype(c)::value>{}, in[c]);
      });
      static_for<0, kPairs>([&](auto pair) {
        constexpr int row = 1 + 2 * decltype(pair)::value;
        Real even(0.0), odd(0.0);
        static_for<0, Cols, 2>([&](auto c) { Term<Real>::add(even, M<row, decltype(c)::value>{}, in[c]); });
        static_for<1, Cols, 2>([&](auto c) { Term<Real>::add(odd, M<row, decltype(c)::value>{}, in[c]); });
        out[row] = even + odd;
        out[row + 1] = even - odd;
      });
    }
  }

  // Filter transform of one output-gradient unit: out = G w.
  template <typename Real>
  WINRS_HD static void filter(const Real (&w)[r], Real (&out)[alpha]) {
    apply<G, r>(w, out);
  }

  // Input transform of one input tile: out = D^T x.
  template <typename Real>
  WINRS_HD static void input(const Real (&x)[alpha], Real (&out)[alpha]) {
    apply<DT, alpha>(x, out);
  }

  // Output transform of accumulated products: y = A^T m.
  template <typename Real>
  WINRS_HD static void output(const Real (&m)[alpha], Real (&y)[n]) {
    if constexpr (alpha == 1) {
      y[0] = m[0];
    } else {
      static_for<0, n>([&](auto j) {
        y[j] = Real(0.0);
        Term<Real>::add(y[j], A<0, decltype(j)::value>{}, m[0]);
      });
      static_for<0, kPairs>([&](auto pair) {
        constexpr int row = 1 + 2 * decltype(pair)::value;
        const Real sum = m[row] + m[row + 1], diff = m[row] - m[row + 1];
        static_for<0, n>([&](auto j) {
          Term<Real>::add(y[j], A<row, decltype(j)::value>{}, (decltype(j)::value % 2 == 0) ? sum : diff);
        });
      });
      Term<Real>::add(y[n - 1], A<alpha - 1, n - 1>{}, m[alpha - 1]);
    }
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
