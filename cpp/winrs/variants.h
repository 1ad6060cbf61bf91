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
  // 256 channels, each kernel alone), all paths on 2026-11-22 (after the per-path staging, ddd87d2).
  double gemm_tflops;
  // Resident blocks per SM the CUDA kernel is compiled for (registers are capped to fit them).
  int blocks_per_sm;
  // Mean absolute relative error of dW against float64 in the paper's protocol (section 6.3: uniform [0, 1)
  // inputs, dY x 1e-2 for float16; dW in the input dtype), measured by tools/accuracy.py on the CPU executor,
  // which rounds operands exactly as the GPU path does (2026-11-22). The planner admits a kernel only where
  // this stays within the accuracy budget of the request (plan.cc).
  double mare;
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

// Columns: fp32, tf32x3, tf32, bf16, fp16 (paths.h), each
// {B_N, B_M, GEMM TFLOP/s, blocks per SM, MARE}.
// clang-format off
inline constexpr Variant kVariants[kNumVariants] = {
    // direct convolution
    {1, 1, {{128, 128, 32.4, 2, 1.89e-07}, {128, 128, 29.6, 1, 3.06e-07}, {128, 128, 70.4, 2, 1.87e-05},
            {128, 128, 133.3, 2, 1.64e-03}, {128, 128, 133.7, 2, 1.79e-04}}},
    // alpha = 4
    {2, 3, {{64, 64, 25.0, 2, 1.94e-07}, {128, 64, 30.4, 1, 3.29e-07}, {128, 64, 45.4, 1, 1.73e-05},
            {128, 64, 78.0, 1, 1.24e-03}, {128, 64, 80.9, 1, 1.89e-04}}},
    {3, 2, {{64, 64, 25.5, 2, 1.88e-07}, {128, 64, 23.8, 1, 3.18e-07}, {128, 64, 39.1, 1, 1.80e-05},
            {128, 64, 62.9, 1, 1.73e-03}, {128, 64, 71.1, 1, 1.79e-04}}},
    // alpha = 8
    {3, 6, {{64, 32, 27.1, 2, 1.99e-07}, {64, 64, 27.6, 1, 3.22e-07}, {64, 64, 45.5, 1, 2.51e-05},
            {64, 64, 62.2, 1, 1.24e-03}, {64, 64, 73.2, 1, 1.85e-04}}},
    {6, 3, {{64, 32, 29.5, 2, 2.00e-07}, {64, 64, 30.3, 1, 3.37e-07}, {64, 64, 50.2, 1, 2.84e-05},
            {64, 64, 79.7, 1, 1.26e-03}, {64, 64, 81.4, 1, 1.87e-04}}},
    {4, 5, {{64, 32, 21.4, 2, 2.05e-07}, {64, 64, 22.3, 1, 3.46e-07}, {64, 64, 35.9, 1, 2.52e-05},
            {64, 64, 56.9, 1, 1.49e-03}, {64, 64, 58.1, 1, 1.45e-04}}},
    {5, 4, {{64, 32, 29.6, 2, 1.86e-07}, {64, 64, 29.4, 1, 3.13e-07}, {64, 64, 47.7, 1, 2.74e-05},
            {64, 64, 77.3, 1, 1.74e-03}, {64, 64, 78.5, 1, 1.80e-04}}},
    {7, 2, {{64, 32, 23.1, 2, 1.97e-07}, {64, 64, 23.3, 1, 3.02e-07}, {64, 64, 39.7, 1, 3.20e-05},
            {64, 64, 65.3, 1, 1.64e-03}, {64, 64, 65.2, 1, 1.83e-04}}},
    // alpha = 16
    {5, 12, {{64, 32, 25.3, 1, 1.60e-05}, {64, 32, 24.9, 1, 1.62e-05}, {64, 32, 26.3, 1, 1.97e-03},
             {64, 32, 40.6, 1, 1.52e-02}, {64, 32, 40.6, 1, 2.02e-03}}},
    {6, 11, {{64, 32, 23.6, 1, 1.46e-05}, {64, 32, 25.2, 1, 1.46e-05}, {64, 32, 26.8, 1, 1.85e-03},
             {64, 32, 40.1, 1, 1.49e-02}, {64, 32, 42.1, 1, 1.83e-03}}},
    {7, 10, {{64, 32, 18.0, 1, 1.38e-05}, {64, 32, 19.9, 1, 1.40e-05}, {64, 32, 20.8, 1, 1.81e-03},
             {64, 32, 31.8, 1, 1.51e-02}, {64, 32, 33.2, 1, 1.73e-03}}},
    {8, 9, {{64, 32, 18.6, 1, 1.35e-05}, {64, 32, 20.6, 1, 1.35e-05}, {64, 32, 21.6, 1, 1.83e-03},
            {64, 32, 33.9, 1, 1.35e-02}, {64, 32, 34.9, 1, 1.79e-03}}},
    {9, 8, {{64, 32, 18.6, 1, 1.33e-05}, {64, 32, 21.3, 1, 1.35e-05}, {64, 32, 21.6, 1, 1.77e-03},
            {64, 32, 33.9, 1, 1.42e-02}, {64, 32, 35.7, 1, 1.79e-03}}},
};
// clang-format on

inline constexpr int kMaxAlpha = 16;
inline constexpr int kMaxN = 9;
inline constexpr int kMaxR = 12;

}  // namespace winrs
