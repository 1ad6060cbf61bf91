// The 13 WinRS kernel variants Omega_alpha(n, r) of the paper's Figure 6 (section 5), with each variant's
// kernel shape on every arithmetic path (paths.h).
// This table is the single source of truth: the planner, the CPU executor, the CUDA kernels, the Python
// bindings, the tests and the docs all iterate over it.
#pragma once

#include "paths.h"
#include "problem.h"
#include "smem.h"

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
  // 256 channels, each kernel alone), all paths in one run on 2026-11-23 (atomic adds, four channels per add
  // on sm_90). tools/tune.py highest times the FP32 and split-TF32 kernels on two more shapes (N=128 with 64
  // channels, N=16 with 512): split TF32 is faster at alpha 8 on all three, at alpha 4 on two of them, and
  // within 8% at alpha 16. The direct kernel's TF32, bf16 and fp16 entries are from a later run the same day,
  // with copy staging (staging.cuh, CopyStager; the other entries of that run within a few percent of these):
  // 81.6 -> 101.8, 142.2 -> 223.5, 146.7 -> 238.9. It applies where channels come in 16-byte pieces; odd
  // channel counts still run register staging at the older rates. The Winograd entries (alpha >= 4) are from
  // one run of 2026-11-24 (thirteenth stop), after the packed 16-bit transforms, Omega_4(2, 3)'s 64 x 128
  // block in 16 bits and the predicated loads into words (staging.cuh, device.cuh): bf16 Omega_4(2, 3)
  // 106.2 -> 129.6, Omega_4(3, 2) 110.7 -> 133.6, alpha 8 5-17% and alpha 16 20% faster, TF32 and FP32 within
  // -4%..+25%. The TF32 and split-TF32 entries (the direct kernel's too) are from a run of the fourteenth
  // stop (2026-11-24), after TF32 rounding became one instruction on sm_90 (device.cuh, tf32_bits): TF32
  // 4-11% faster on every variant (direct 101.8 -> 114.8), split TF32 between 0.91x and 1.17x
  // (geomean 1.03x).
  double gemm_tflops;
  // Resident blocks per SM the CUDA kernel is compiled for (registers are capped to fit them).
  int blocks_per_sm;
  // Errors of dW against float64, measured by tools/accuracy.py on the CPU executor, which rounds operands
  // exactly as the GPU path does (2026-11-22); dW in the input dtype. The planner admits a kernel only where
  // both stay within the accuracy budget of the request (plan.cc).
  // mare: mean absolute relative error in the paper's protocol (section 6.3: uniform [0, 1) inputs, dY x 1e-2
  // for float16), where dW's sums never cancel.
  double mare;
  // signed_error: ||dW - exact|| / ||exact|| on standard normal inputs (dY x 1e-2 for float16), as real
  // activations and gradients are: the rounding of transformed operands shows here, 4.5x-6x a direct sum's
  // at alpha 8.
  double signed_error;
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
// {B_N, B_M, GEMM TFLOP/s, blocks per SM, MARE, signed error}.
// clang-format off
inline constexpr Variant kVariants[kNumVariants] = {
    // direct convolution
    {1, 1, {{128, 128, 34.4, 2, 1.89e-07, 3.01e-07}, {128, 128, 46.1, 1, 3.06e-07, 5.10e-07},
            {128, 128, 114.8, 2, 1.87e-05, 2.95e-04}, {128, 128, 223.5, 2, 1.64e-03, 1.65e-03},
            {128, 128, 238.9, 2, 1.79e-04, 2.09e-04}}},
    // alpha = 4
    {2, 3, {{64, 64, 32.3, 2, 1.94e-07, 3.91e-07}, {128, 64, 40.7, 1, 3.29e-07, 6.61e-07},
            {128, 64, 65.2, 1, 1.73e-05, 3.79e-04}, {64, 128, 129.6, 1, 1.24e-03, 3.38e-03},
            {64, 128, 129.2, 1, 1.89e-04, 4.12e-04}}},
    {3, 2, {{64, 64, 33.1, 2, 1.88e-07, 3.89e-07}, {128, 64, 39.2, 1, 3.18e-07, 6.44e-07},
            {128, 64, 71.6, 1, 1.80e-05, 3.77e-04}, {128, 64, 133.6, 1, 1.73e-03, 3.38e-03},
            {128, 64, 133.5, 1, 1.79e-04, 4.22e-04}}},
    // alpha = 8
    {3, 6, {{64, 32, 28.6, 2, 1.99e-07, 1.42e-06}, {64, 64, 37.0, 1, 3.22e-07, 2.29e-06},
            {64, 64, 61.4, 1, 2.51e-05, 1.34e-03}, {64, 64, 95.2, 1, 1.24e-03, 9.86e-03},
            {64, 64, 93.1, 1, 1.85e-04, 1.25e-03}}},
    {6, 3, {{64, 32, 31.2, 2, 2.00e-07, 1.42e-06}, {64, 64, 38.6, 1, 3.37e-07, 2.32e-06},
            {64, 64, 71.1, 1, 2.84e-05, 1.30e-03}, {64, 64, 120.5, 1, 1.26e-03, 9.86e-03},
            {64, 64, 115.1, 1, 1.87e-04, 1.23e-03}}},
    {4, 5, {{64, 32, 28.1, 2, 2.05e-07, 1.35e-06}, {64, 64, 34.8, 1, 3.46e-07, 2.23e-06},
            {64, 64, 61.3, 1, 2.52e-05, 1.27e-03}, {64, 64, 97.8, 1, 1.49e-03, 9.76e-03},
            {64, 64, 96.4, 1, 1.45e-04, 1.20e-03}}},
    {5, 4, {{64, 32, 29.9, 2, 1.86e-07, 1.36e-06}, {64, 64, 40.6, 1, 3.13e-07, 2.16e-06},
            {64, 64, 66.3, 1, 2.74e-05, 1.29e-03}, {64, 64, 102.4, 1, 1.74e-03, 9.48e-03},
            {64, 64, 101.8, 1, 1.80e-04, 1.20e-03}}},
    {7, 2, {{64, 32, 31.8, 2, 1.97e-07, 1.54e-06}, {64, 64, 40.0, 1, 3.02e-07, 2.53e-06},
            {64, 64, 73.9, 1, 3.20e-05, 1.43e-03}, {64, 64, 122.6, 1, 1.64e-03, 1.08e-02},
            {64, 64, 119.0, 1, 1.83e-04, 1.34e-03}}},
    // alpha = 16
    {5, 12, {{64, 32, 26.8, 1, 1.60e-05, 2.79e-04}, {64, 32, 26.4, 1, 1.62e-05, 4.38e-04},
             {64, 32, 32.9, 1, 1.97e-03, 2.55e-01}, {64, 32, 47.4, 1, 1.52e-02, 2.00e+00},
             {64, 32, 48.0, 1, 2.02e-03, 2.46e-01}}},
    {6, 11, {{64, 32, 26.7, 1, 1.46e-05, 2.67e-04}, {64, 32, 26.2, 1, 1.46e-05, 4.16e-04},
             {64, 32, 32.9, 1, 1.85e-03, 2.39e-01}, {64, 32, 47.0, 1, 1.49e-02, 1.94e+00},
             {64, 32, 46.1, 1, 1.83e-03, 2.36e-01}}},
    {7, 10, {{64, 32, 24.7, 1, 1.38e-05, 2.57e-04}, {64, 32, 28.0, 1, 1.40e-05, 4.01e-04},
             {64, 32, 33.1, 1, 1.81e-03, 2.37e-01}, {64, 32, 47.8, 1, 1.51e-02, 1.84e+00},
             {64, 32, 47.1, 1, 1.73e-03, 2.30e-01}}},
    {8, 9, {{64, 32, 26.0, 1, 1.35e-05, 2.53e-04}, {64, 32, 29.2, 1, 1.35e-05, 4.12e-04},
            {64, 32, 34.7, 1, 1.83e-03, 2.32e-01}, {64, 32, 52.2, 1, 1.35e-02, 1.78e+00},
            {64, 32, 52.4, 1, 1.81e-03, 2.30e-01}}},
    {9, 8, {{64, 32, 25.9, 1, 1.33e-05, 2.60e-04}, {64, 32, 29.6, 1, 1.35e-05, 4.09e-04},
            {64, 32, 35.1, 1, 1.77e-03, 2.37e-01}, {64, 32, 53.6, 1, 1.42e-02, 1.82e+00},
            {64, 32, 53.7, 1, 1.79e-03, 2.30e-01}}},
};
// clang-format on

// Whether a variant's kernel of its table block fits a GPU's shared memory per block (smem.h): on sm_86 and
// sm_89 (99 KiB) the tensor-core paths' alpha-16 blocks do not (112 KiB).
constexpr bool omega_fits(int variant, Path path, int64_t smem_per_block) {
  const KernelShape& s = kVariants[variant].shape(path);
  return omega_smem_bytes(kVariants[variant].alpha(), path, s.block_oc, s.block_ic, false) <= smem_per_block;
}

// The direct kernel's block on the tensor-core paths is 128 x 128 channels; on a layer with at most 64
// channels on each side three quarters of that tile would be zeros (ResNet's 3x3 128:56:64 in bf16: 731 us
// against 203 us for 3x3 128:28:128, the same FLOPs, Nsight Compute, 2026-11-23), so there it runs a 64 x 64
// block instead.
inline constexpr int kNarrowBlock = 64;
constexpr bool narrow_block(int variant, Path path, long long out_c, long long in_c) {
  return variant == 0 && path_info(path).tensor_cores && out_c <= kNarrowBlock && in_c <= kNarrowBlock;
}
// The direct kernel's filter-row tile on the tensor-core paths (cuda/direct_taps.cuh): kDirectTaps filter
// columns of a 64 x 64 channel block per thread block, dY staged once for all of them and X once with a halo
// of kDirectTaps - 1 columns, where the filter width is a multiple of kDirectTaps and the channel counts come
// in 16-byte pieces (its copy staging). In 16 bits also widths from 5 that are not: the last tile computes
// its columns past the filter and drops them (5 -> 6, 7 -> 9), 1.64x faster than one column per block on 1D
// 5- and 7-wide bf16 layers, 1.10x on a 5x5 one (H100, 2026-11-23); not measured in TF32, nor width 4 (4 ->
// 6). A tile of one tap reads X and dY once per tap: nine times for a 3x3 layer, which bound the 64-channel
// layers by L2 bandwidth (docs/benchmarks.md, 2026-11-23). Where both channel counts pass 64 the 128 x 128
// block of one tap fills its tile and ran faster (bf16 3x3 128:28:128 0.137 against 0.209 ms, 128:14:256
// 0.141 against 0.192; H100, 2026-11-23; on wgmma, 0.090 against 0.134 and 0.119 against 0.149).
inline constexpr int kDirectTaps = 3;
constexpr bool direct_taps(int variant, Path path, long long filter_w, long long out_c, long long in_c) {
  const long long piece = 16 / storage_bytes(path);
  const bool width = filter_w % kDirectTaps == 0 || (storage_bytes(path) == 2 && filter_w >= 5);
  return variant == 0 && path_info(path).tensor_cores && width && out_c % piece == 0 && in_c % piece == 0 &&
         (out_c <= kNarrowBlock || in_c <= kNarrowBlock);
}
// The 128 x 128 channel block of the tiles above (kWideBlock) serves strided layers alone (strided_wide). For
// unstrided 16-bit layers whose channel counts both pass 64, a filter-row tile on 128 x 128 channels (three
// taps from one staging of X and dY, 192 FLOP per byte against the one-tap block's 64) ran until the
// thirty-first stop: against the one-tap blocks of today (the persistent 128 x 256 kernel, nineteenth stop)
// it took 1.10-1.68x their time on all eight layers measured where it ran (bf16 and f16 on an H200,
// 2026-11-28: 1D k=3 32:16000:256 0.600 against 0.546 ms, 16:8192:256 0.165 / 0.144, k=6 16:32000:128 0.315 /
// 0.286; 3x3 32:112:128 0.387 / 0.291, 8:224:128 0.386 / 0.299, 16:128:128 0.247 / 0.211, 16:112:96 0.248 /
// 0.148; docs/benchmarks.md, thirty-first stop), so the one-tap block runs there. (Not measured on an A100,
// the other GPU whose shared memory held it.)
inline constexpr int kWideBlock = 128;
// Whether the filter-row tile's 128 x 128 block at the problem's column stride fits the GPU's shared memory
// (smem.h; on sm_86 and sm_89 it does not: 104 KiB, 155 KiB at stride 2): elsewhere the 64 x 64 one runs.
constexpr bool wide_taps_fit(Path path, const Problem& p) {
  return taps_smem_bytes(path, kDirectTaps, kWideBlock, p.stride_w) <= p.smem_per_block;
}

// The filter-window tile: the 64 x 64 filter-row tile over kWindowRows filter rows at once (16 bits, filter
// heights from 3), so that a block stages each dY row once for all kWindowRows x kDirectTaps taps instead of
// once per filter row. On Hopper one block per SM runs it by wgmma with TMA staging, a warpgroup per filter
// row (cuda/wgmma_window.cuh); elsewhere, and where its staging does not apply, the filter-row tile runs
// instead, a block per filter row (the plan's semaphores count those; cuda/omega_kernel.cuh, launch_window).
inline constexpr int kWindowRows = 3;
constexpr bool window_taps(int variant, Path path, const Problem& p) {
  return !p.strided() && direct_taps(variant, path, p.filter_w, p.out_c, p.in_c) &&
         storage_bytes(path) == 2 && p.filter_h >= kWindowRows;
}

// Strides read in place (winrs_jax's planner splits other strided layers into DWM's stride-1 pieces on
// copies): the filter-row tile in 16 bits (cuda/direct_taps.cuh, TapsStager), any row stride, column stride 1
// or 2 (kMaxTapsStride: X's columns staged by phase, tap j of a step reading phase j % s from row j / s; on
// Hopper by mma.sync, as the wgmma tile's overlapping panels need a one-row shift per tap; row strides alone
// run the wgmma tiles). Its block is 64 x 64 channels where one side has at most 64, else 128 x 128
// (strided_wide: column stride 2 and widths a multiple of 3, the form the GPU tests run). On a layer of 64
// input and 128 output channels the 128 x 128 block ran slower, though each output-channel block of the 64 x
// 64 one reads X again (3x3x3 8:16x56x56:64->128 s2, bf16: 0.121 ms on 64 x 64 blocks, 0.205 on 128 x 128;
// H100, 2026-11-25).
inline constexpr int kMaxTapsStride = 2;
constexpr bool strided_wide(const Problem& p) { return p.out_c > kNarrowBlock && p.in_c > kNarrowBlock; }
constexpr bool strided_taps(Path path, const Problem& p) {
  // The 128 x 128 block as measured and tested on the GPU: column stride 2 (mma.sync), widths a multiple
  // of 3.
  const bool wide_ok = !strided_wide(p) || (p.stride_w == 2 && p.filter_w % kDirectTaps == 0);
  const bool width = p.filter_w % kDirectTaps == 0 || p.filter_w >= 5;
  return storage_bytes(path) == 2 && path_info(path).tensor_cores && p.stride_w <= kMaxTapsStride && width &&
         wide_ok && p.out_c % 8 == 0 && p.in_c % 8 == 0;
}

// The work tile a variant runs with on a layer (schedule.h): filter columns, the block (B_N, B_M), the
// blocks resident per SM and filter rows. One function for the planner's block count and the kernel launch.
struct TileShape {
  int columns, block_oc, block_ic, blocks_per_sm, rows = 1;
};
constexpr TileShape tile_shape(int variant, Path path, const Problem& p) {
  if (variant == 0 && p.strided() && strided_taps(path, p)) {
    // (Where the 128 x 128 block does not fit the GPU, the 64 x 64 one takes the same layers.)
    if (strided_wide(p) && wide_taps_fit(path, p)) return {kDirectTaps, kWideBlock, kWideBlock, 1};
    return {kDirectTaps, kNarrowBlock, kNarrowBlock, 2};
  }
  if (window_taps(variant, path, p)) return {kDirectTaps, kNarrowBlock, kNarrowBlock, 1, kWindowRows};
  if (direct_taps(variant, path, p.filter_w, p.out_c, p.in_c))
    return {kDirectTaps, kNarrowBlock, kNarrowBlock, 2};
  const KernelShape& s = kVariants[variant].shape(path);
  // (The direct kernel's 128 x 128 block, copy-staged, takes 102 KiB: more than sm_86 and sm_89 give.)
  const bool one_tap_fits = variant != 0 || !path_info(path).tensor_cores ||
                            omega_smem_bytes(1, path, s.block_oc, s.block_ic, true) <= p.smem_per_block;
  if (narrow_block(variant, path, p.out_c, p.in_c) || !one_tap_fits)
    return {1, kNarrowBlock, kNarrowBlock, s.blocks_per_sm};
  return {kVariants[variant].n, s.block_oc, s.block_ic, s.blocks_per_sm};
}

inline constexpr int kMaxAlpha = 16;
inline constexpr int kMaxN = 9;
inline constexpr int kMaxR = 12;

}  // namespace winrs
