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
WINRS_HD constexpr void static_for(F&& f) {
  if constexpr (Begin < End) {
    f(std::integral_constant<int, Begin>{});
    static_for<Begin + Step, End, Step>(f);
  }
}

// sum += coefficient * value (add), or sum = coefficient * value for a sum's first term (first), with the
// coefficient known at compile time.
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
  template <typename Coefficient>
  WINRS_HD static Real first(Coefficient, const Real& value) {
    constexpr double c = Coefficient::value;
    if constexpr (c == 1.0) {
      return value;
    } else if constexpr (c == -1.0) {
      return -value;
    } else if constexpr (c == 0.0) {
      return Real(0.0);
    } else {
      return Real(c) * value;
    }
  }
};

// Whether |c| is a power of two (from 2^-30 to 2^30): a product by it is exact in any binary format.
constexpr bool power_of_two(double c) {
  double a = c < 0 ? -c : c;
  if (a == 0.0) return false;
  for (int i = 0; i < 30 && a < 1.0; ++i) a *= 2.0;
  for (int i = 0; i < 30 && a > 1.0; ++i) a /= 2.0;
  return a == 1.0;
}

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

  // Nonzero coefficients of row Row of M among columns Begin, Begin + Step, ... < End.
  template <template <int, int> class M, int Row, int Begin, int End, int Step = 1>
  static constexpr int nonzeros() {
    int count = 0;
    static_for<Begin, End, Step>([&](auto c) { count += M<Row, decltype(c)::value>::value != 0.0; });
    return count;
  }

  // The column whose term starts a row's sum over columns Begin, Begin + Step, ... < End: the first with a
  // positive coefficient (x2 - x0 is one subtraction, -x0 + x2 a negation and an addition), else the first
  // nonzero one, else -1.
  template <template <int, int> class M, int Row, int Begin, int End, int Step>
  static constexpr int lead_column() {
    int positive = -1, nonzero = -1;
    static_for<Begin, End, Step>([&](auto col) {
      constexpr double c = M<Row, decltype(col)::value>::value;
      if (c > 0.0 && positive < 0) positive = decltype(col)::value;
      if (c != 0.0 && nonzero < 0) nonzero = decltype(col)::value;
    });
    return positive >= 0 ? positive : nonzero;
  }

  // sum = the sum of M[Row][c] in[c] over columns c = Begin, Begin + Step, ... < End, from its lead term (0 +
  // x would be an instruction, and on packed 16-bit words a rounding the sum need not have).
  template <template <int, int> class M, int Row, int Begin, int End, int Step, typename Real, int Cols>
  WINRS_HD static void row_sum(Real& sum, const Real (&in)[Cols]) {
    constexpr int lead = lead_column<M, Row, Begin, End, Step>();
    if constexpr (lead < 0) {
      sum = Real(0.0);
    } else {
      sum = Term<Real>::first(M<Row, lead>{}, in[lead]);
      static_for<Begin, End, Step>([&](auto col) {
        if constexpr (decltype(col)::value != lead)
          Term<Real>::add(sum, M<Row, decltype(col)::value>{}, in[col]);
      });
    }
  }

  // out = M in for M = G (Cols = r) or D^T (Cols = alpha): rows 0 and alpha-1 directly, the (+p, -p) row
  // pairs from their shared even and odd partial sums.
  template <template <int, int> class M, int Cols, typename Real>
  WINRS_HD static void apply(const Real (&in)[Cols], Real (&out)[alpha]) {
    if constexpr (alpha == 1) {
      out[0] = in[0];
    } else {
      row_sum<M, 0, 0, Cols, 1>(out[0], in);
      row_sum<M, alpha - 1, 0, Cols, 1>(out[alpha - 1], in);
      static_for<0, kPairs>([&](auto pair) {
        constexpr int row = 1 + 2 * decltype(pair)::value;
        constexpr bool has_even = lead_column<M, row, 0, Cols, 2>() >= 0;
        constexpr bool has_odd = lead_column<M, row, 1, Cols, 2>() >= 0;
        Real even, odd;
        row_sum<M, row, 0, Cols, 2>(even, in);
        row_sum<M, row, 1, Cols, 2>(odd, in);
        if constexpr (has_even && has_odd) {
          out[row] = even + odd;
          out[row + 1] = even - odd;
        } else if constexpr (has_even) {
          out[row] = even;
          out[row + 1] = even;
        } else {
          out[row] = odd;
          out[row + 1] = -odd;
        }
      });
    }
  }

  // Whether M in, computed by apply in a 16-bit type, rounds each output once, as the FP32 transform then the
  // conversion to the operand type does: every row has at most two nonzero coefficients, each a power of two
  // (then every product is exact and each output is one sum or a copy). Alpha-4 input transforms (D^T x =
  // x2 - x0, x1 + x2, x2 - x1, x3 - x1) and the r = 2 filter transform (-w0, (w0 + w1) / 2, (w0 - w1) / 2,
  // w1) are; the kernels then transform packed pairs of 16-bit channels, one instruction for two outputs
  // (staging.cuh, transform_store).
  template <template <int, int> class M, int Cols>
  static constexpr bool one_rounding() {
    bool ok = true;
    static_for<0, alpha>([&](auto row) {
      constexpr int i = decltype(row)::value;
      ok = ok && nonzeros<M, i, 0, Cols>() <= 2;
      static_for<0, Cols>([&](auto col) {
        constexpr double c = M<i, decltype(col)::value>::value;
        ok = ok && (c == 0.0 || power_of_two(c));
      });
    });
    return ok;
  }
  static constexpr bool kFilterOneRounding = one_rounding<G, r>();
  static constexpr bool kInputOneRounding = one_rounding<DT, alpha>();

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
      static_for<0, n>([&](auto j) { y[j] = Term<Real>::first(A<0, decltype(j)::value>{}, m[0]); });
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

// Which transforms the 16-bit kernels run packed (one_rounding): both of Omega_4(3, 2)'s, Omega_4(2, 3)'s
// input transform (its three-tap filter rows (w0 + w1 + w2) / 2 would round twice), none at alpha 8.
static_assert(TileMath<2>::kFilterOneRounding && TileMath<2>::kInputOneRounding);
static_assert(!TileMath<1>::kFilterOneRounding && TileMath<1>::kInputOneRounding);
static_assert(!TileMath<3>::kFilterOneRounding && !TileMath<3>::kInputOneRounding);

// Output-gradient rows of a segment that meet real input rows for filter row fh (Figure 7): rows oh with
// 0 <= oh stride + fh - pad_top < in_h. Rows outside only multiply the height zero padding and are skipped.
struct RowRange {
  int begin, end;
};

// ceil(a / b) for b > 0 and a of either sign, in 64 bits (a stride near 2^31 must not wrap).
WINRS_HD inline long long ceil_div_signed(long long a, long long b) {
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

WINRS_HD inline RowRange clip_rows(int seg_begin, int seg_end, int fh, int pad_top, int in_h,
                                   int stride = 1) {
  long long begin = ceil_div_signed((long long)pad_top - fh, stride);
  long long end = ceil_div_signed((long long)in_h + pad_top - fh, stride);
  begin = begin > seg_begin ? begin : seg_begin;
  end = end < seg_end ? end : seg_end;
  return {int(begin), int(end > begin ? end : begin)};
}

// Input column of tile element t for the unit starting at output-gradient column w0 and the filter-gradient
// tile starting at column f0; negative or >= in_w means width padding, read as zero. A stride other than 1
// only with the direct kernel (one element per tile).
WINRS_HD inline int input_column(int w0, int f0, int t, int pad_left, int stride = 1) {
  return w0 * stride + f0 + t - pad_left;
}

// One unsigned comparison: a negative column wraps past any width.
WINRS_HD inline bool column_in_bounds(int col, int in_w) { return unsigned(col) < unsigned(in_w); }

}  // namespace winrs
