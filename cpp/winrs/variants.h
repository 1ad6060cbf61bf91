// The 13 WinRS kernel variants Omega_alpha(n, r) of the paper's Figure 6 (section 5), with each variant's
// kernel shape on every arithmetic path (paths.h).
// This table is the single source of truth: the planner, the CPU executor, the CUDA kernels, the Python
// bindings, the tests and the docs all iterate over it.
#pragma once

#include "paths.h"

namespace winrs {

// How one variant runs on one path.
struct KernelShape {
  // Cache block B_N x B_M (paper footnote 3): output x input channels per thread block. The tensor-core
  // paths use larger blocks (the paper's FP16 kernels do too): their GEMM is cheap next to the transforms,
  // which a larger block amortises over more channels. Accumulators are FP32 on every path, so
  // alpha x B_N x B_M / 256 threads <= 128 registers bounds the block.
  int block_oc;
  int block_ic;
  // Throughput of the kernel's batched GEMM in TFLOP/s on an H100 SXM (GEMM FLOPs, i.e. direct FLOPs x
  // alpha / (n r)): the kernel-pair choice of section 4.1 weighs variants with it, and the planner compares
  // paths of equal accuracy with it. Measured by tools/tune.py variants (N=32, 32 x ~48 output gradient,
  // 256 channels, each kernel alone): FP32 on 2026-11-22; the tensor-core columns are estimates until the
  // same tool measures them.
  double gemm_tflops;
  // Resident blocks per SM the CUDA kernel is compiled for (registers are capped to fit them).
  int blocks_per_sm;
};

struct Variant {
  int n;  // output-tile width: filter-gradient columns produced per tile (must divide F_W)
  int r;  // unit width: output-gradient columns consumed per unit (segment widths are multiples of r)
  KernelShape shapes[kNumPaths];

  constexpr int alpha() const { return n + r - 1; }
  // The paper's alpha class (2, 4, 8 or 16). It labels the direct-convolution kernel Omega_2(1, 1), whose
  // transform is the identity F(1, 1) with alpha = n + r - 1 = 1.
  constexpr int alpha_class() const {
    int c = 2;
    while (c < alpha()) c *= 2;
    return c;
  }
  // Multiplications saved relative to direct convolution, n * r / alpha (section 3, Level 2).
  constexpr double acceleration() const { return double(n) * r / alpha(); }
  constexpr const KernelShape& shape(Path p) const { return shapes[static_cast<int>(p)]; }
  // Effective (direct-convolution) TFLOP/s the variant delivers on a path.
  constexpr double relative_speed(Path p) const { return acceleration() * shape(p).gemm_tflops; }
};

inline constexpr int kNumVariants = 13;

// Columns: fp32, tf32x3, tf32, bf16, fp16 (paths.h), each {B_N, B_M, GEMM TFLOP/s, blocks per SM}.
inline constexpr Variant kVariants[kNumVariants] = {
    // direct convolution
    {1, 1, {{128, 128, 26.3, 2}, {128, 128, 60, 1}, {128, 128, 120, 1}, {128, 128, 200, 1}, {128, 128, 200, 1}}},
    // alpha = 4
    {2, 3, {{64, 64, 27.1, 2}, {128, 64, 60, 1}, {128, 64, 120, 1}, {128, 64, 200, 1}, {128, 64, 200, 1}}},
    {3, 2, {{64, 64, 27.4, 2}, {128, 64, 60, 1}, {128, 64, 120, 1}, {128, 64, 200, 1}, {128, 64, 200, 1}}},
    // alpha = 8
    {3, 6, {{64, 32, 25.4, 2}, {64, 64, 60, 1}, {64, 64, 120, 1}, {64, 64, 200, 1}, {64, 64, 200, 1}}},
    {6, 3, {{64, 32, 26.6, 2}, {64, 64, 60, 1}, {64, 64, 120, 1}, {64, 64, 200, 1}, {64, 64, 200, 1}}},
    {4, 5, {{64, 32, 19.5, 2}, {64, 64, 60, 1}, {64, 64, 120, 1}, {64, 64, 200, 1}, {64, 64, 200, 1}}},
    {5, 4, {{64, 32, 25.8, 2}, {64, 64, 60, 1}, {64, 64, 120, 1}, {64, 64, 200, 1}, {64, 64, 200, 1}}},
    {7, 2, {{64, 32, 28.7, 2}, {64, 64, 60, 1}, {64, 64, 120, 1}, {64, 64, 200, 1}, {64, 64, 200, 1}}},
    // alpha = 16
    {5, 12, {{64, 32, 24.3, 1}, {64, 32, 60, 1}, {64, 32, 120, 1}, {64, 32, 200, 1}, {64, 32, 200, 1}}},
    {6, 11, {{64, 32, 24.7, 1}, {64, 32, 60, 1}, {64, 32, 120, 1}, {64, 32, 200, 1}, {64, 32, 200, 1}}},
    {7, 10, {{64, 32, 25.0, 1}, {64, 32, 60, 1}, {64, 32, 120, 1}, {64, 32, 200, 1}, {64, 32, 200, 1}}},
    {8, 9, {{64, 32, 25.2, 1}, {64, 32, 60, 1}, {64, 32, 120, 1}, {64, 32, 200, 1}, {64, 32, 200, 1}}},
    {9, 8, {{64, 32, 24.1, 1}, {64, 32, 60, 1}, {64, 32, 120, 1}, {64, 32, 200, 1}, {64, 32, 200, 1}}},
};

inline constexpr int kMaxAlpha = 16;
inline constexpr int kMaxN = 9;
inline constexpr int kMaxR = 12;

}  // namespace winrs
