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
  // 256 channels, each kernel alone), all paths on 2026-11-22.
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
    {1, 1, {{128, 128, 26.3, 2, 1.89e-07}, {128, 128, 33.9, 1, 3.06e-07}, {128, 128, 75.7, 2, 1.87e-05},
            {128, 128, 95.7, 2, 1.64e-03}, {128, 128, 96.0, 2, 1.79e-04}}},
    // alpha = 4
    {2, 3, {{64, 64, 27.1, 2, 1.94e-07}, {128, 64, 30.1, 1, 3.29e-07}, {128, 64, 46.4, 1, 1.73e-05},
            {128, 64, 64.2, 1, 1.24e-03}, {128, 64, 62.9, 1, 1.89e-04}}},
    {3, 2, {{64, 64, 27.4, 2, 1.88e-07}, {128, 64, 25.5, 1, 3.18e-07}, {128, 64, 36.6, 1, 1.80e-05},
            {128, 64, 55.1, 1, 1.73e-03}, {128, 64, 55.2, 1, 1.79e-04}}},
    // alpha = 8
    {3, 6, {{64, 32, 25.4, 2, 1.99e-07}, {64, 64, 26.6, 1, 3.22e-07}, {64, 64, 36.1, 1, 2.51e-05},
            {64, 64, 53.1, 1, 1.24e-03}, {64, 64, 53.9, 1, 1.85e-04}}},
    {6, 3, {{64, 32, 26.6, 2, 2.00e-07}, {64, 64, 30.0, 1, 3.37e-07}, {64, 64, 43.1, 1, 2.84e-05},
            {64, 64, 60.3, 1, 1.26e-03}, {64, 64, 60.9, 1, 1.87e-04}}},
    {4, 5, {{64, 32, 19.5, 2, 2.05e-07}, {64, 64, 20.8, 1, 3.46e-07}, {64, 64, 29.9, 1, 2.52e-05},
            {64, 64, 42.8, 1, 1.49e-03}, {64, 64, 44.4, 1, 1.45e-04}}},
    {5, 4, {{64, 32, 25.8, 2, 1.86e-07}, {64, 64, 28.4, 1, 3.13e-07}, {64, 64, 41.4, 1, 2.74e-05},
            {64, 64, 58.6, 1, 1.74e-03}, {64, 64, 60.0, 1, 1.80e-04}}},
    {7, 2, {{64, 32, 28.7, 2, 1.97e-07}, {64, 64, 22.0, 1, 3.02e-07}, {64, 64, 33.3, 1, 3.20e-05},
            {64, 64, 49.9, 1, 1.64e-03}, {64, 64, 51.7, 1, 1.83e-04}}},
    // alpha = 16
    {5, 12, {{64, 32, 24.3, 1, 1.60e-05}, {64, 32, 23.6, 1, 1.62e-05}, {64, 32, 30.8, 1, 1.97e-03},
             {64, 32, 37.6, 1, 1.52e-02}, {64, 32, 39.1, 1, 2.02e-03}}},
    {6, 11, {{64, 32, 24.7, 1, 1.46e-05}, {64, 32, 23.3, 1, 1.46e-05}, {64, 32, 30.8, 1, 1.85e-03},
             {64, 32, 40.4, 1, 1.49e-02}, {64, 32, 39.6, 1, 1.83e-03}}},
    {7, 10, {{64, 32, 25.0, 1, 1.38e-05}, {64, 32, 18.3, 1, 1.40e-05}, {64, 32, 24.8, 1, 1.81e-03},
             {64, 32, 31.6, 1, 1.51e-02}, {64, 32, 29.9, 1, 1.73e-03}}},
    {8, 9, {{64, 32, 25.2, 1, 1.35e-05}, {64, 32, 19.6, 1, 1.35e-05}, {64, 32, 25.9, 1, 1.83e-03},
            {64, 32, 32.0, 1, 1.35e-02}, {64, 32, 31.3, 1, 1.79e-03}}},
    {9, 8, {{64, 32, 24.1, 1, 1.33e-05}, {64, 32, 20.0, 1, 1.35e-05}, {64, 32, 26.7, 1, 1.77e-03},
            {64, 32, 33.7, 1, 1.42e-02}, {64, 32, 32.1, 1, 1.79e-03}}},
};
// clang-format on

inline constexpr int kMaxAlpha = 16;
inline constexpr int kMaxN = 9;
inline constexpr int kMaxR = 12;

}  // namespace winrs
