// The 13 WinRS kernel variants Omega_alpha(n, r) of the paper's Figure 6 (section 5).
// This table is the single source of truth: the planner, the CPU executor, the CUDA kernels, the Python
// bindings, the tests and the docs all iterate over it.
#pragma once

namespace winrs {

struct Variant {
  int n;  // output-tile width: filter-gradient columns produced per tile (must divide F_W)
  int r;  // unit width: output-gradient columns consumed per unit (segment widths are multiples of r)
  // FP32 CUDA-core cache block B_N x B_M (paper footnote 3): output channels x input channels per block.
  int block_oc;
  int block_ic;
  // Throughput of the kernel's batched GEMM as a fraction of FP32 peak, used by the kernel-pair choice of
  // section 4.1: measured on H100 SXM (tools/tune.py variants, 2026-11-22; N=32, 32 x ~48 output gradient,
  // 256 channels, each kernel alone).
  double gemm_efficiency;
  // Resident blocks per SM the CUDA kernel is compiled for (registers are capped to fit them).
  int blocks_per_sm;

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
  constexpr double relative_speed() const { return acceleration() * gemm_efficiency; }
};

inline constexpr int kNumVariants = 13;

inline constexpr Variant kVariants[kNumVariants] = {
    // direct convolution
    {1, 1, 128, 128, 0.393, 2},
    // alpha = 4
    {2, 3, 64, 64, 0.405, 2},
    {3, 2, 64, 64, 0.409, 2},
    // alpha = 8
    {3, 6, 64, 32, 0.379, 2},
    {6, 3, 64, 32, 0.398, 2},
    {4, 5, 64, 32, 0.291, 2},
    {5, 4, 64, 32, 0.386, 2},
    {7, 2, 64, 32, 0.429, 2},
    // alpha = 16
    {5, 12, 64, 32, 0.363, 1},
    {6, 11, 64, 32, 0.369, 1},
    {7, 10, 64, 32, 0.373, 1},
    {8, 9, 64, 32, 0.376, 1},
    {9, 8, 64, 32, 0.360, 1},
};

inline constexpr int kMaxAlpha = 16;
inline constexpr int kMaxN = 9;
inline constexpr int kMaxR = 12;

}  // namespace winrs
