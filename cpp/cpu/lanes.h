// A fixed-width bundle of float lanes so the scalar per-tile math of winrs/tile.h runs over W channels at
// once on the CPU; the compiler turns the element loops into SIMD instructions.
#pragma once

namespace winrs::cpu {

template <int W>
struct Lanes {
  float v[W];

  Lanes() = default;
  Lanes(double scalar) {  // NOLINT(google-explicit-constructor): broadcasts transform coefficients
    for (int l = 0; l < W; ++l) v[l] = float(scalar);
  }
  Lanes& operator+=(const Lanes& o) {
    for (int l = 0; l < W; ++l) v[l] += o.v[l];
    return *this;
  }
  Lanes& operator-=(const Lanes& o) {
    for (int l = 0; l < W; ++l) v[l] -= o.v[l];
    return *this;
  }
  friend Lanes operator+(Lanes a, const Lanes& b) { return a += b; }
  friend Lanes operator-(Lanes a, const Lanes& b) { return a -= b; }
  friend Lanes operator-(Lanes a) {
    for (int l = 0; l < W; ++l) a.v[l] = -a.v[l];
    return a;
  }
  friend Lanes operator*(Lanes a, const Lanes& b) {
    for (int l = 0; l < W; ++l) a.v[l] *= b.v[l];
    return a;
  }
};

}  // namespace winrs::cpu
