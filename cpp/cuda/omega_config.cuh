// Compile-time configuration of the Omega kernel for one variant on one arithmetic path: block shape,
// shared-memory layout and the number of output rounds, all derived from the variant table and the path
// table.
#pragma once

#include <cstddef>

#include "cuda/device.cuh"
#include "winrs/tile.h"
#include "winrs/variants.h"

namespace winrs::cuda {

inline constexpr int kThreads = 256;  // 8 warps
inline constexpr int kWarps = kThreads / 32;
// Units staged per load phase: each warp loads and transforms one unit (dY unit and X tile) per phase. A
// main-loop step has units_per_step / 8 phases, each overlapping its global loads with one part of the GEMM.
inline constexpr int kUnitsPerPhase = 8;

template <int V, Path P>
struct OmegaConfig {
  using Tile = TileMath<V>;
  static constexpr int variant = V;
  static constexpr Path path = P;
  static constexpr Operand operand = path_info(P).operand;
  static constexpr bool tensor_cores = path_info(P).tensor_cores;
  using Storage = typename StorageType<path_info(P).storage>::T;  // X and dY in global memory
  using Smem = typename SmemType<operand>::T;                     // staged GEMM operands

  static constexpr int alpha = Tile::alpha, n = Tile::n, r = Tile::r;
  static constexpr int BN = kVariants[V].shape(P).block_oc, BM = kVariants[V].shape(P).block_ic;
  static constexpr int blocks_per_sm = kVariants[V].shape(P).blocks_per_sm;
  static constexpr int K = path_info(P).units_per_step;
  static constexpr int phases = K / kUnitsPerPhase;
  static_assert(phases * kUnitsPerPhase == K);

  // Consecutive channels each thread loads and transforms per phase: one unit per warp, so a warp covers
  // B_N output channels of its dY unit and B_M input channels of its X tile.
  static constexpr int FC = BN / 32, IC = BM / 32;
  static_assert(FC * 32 == BN && IC * 32 == BM && FC <= 4 && IC <= 4 && 4 % FC == 0 && 4 % IC == 0);

  // Shared memory per stage: Gs[alpha][K][B_N + pad] and Ds[alpha][K][B_M + pad]. The tensor-core paths pad
  // each K row by 16 bytes (16-bit) or 32 bytes (FP32 words) so that ldmatrix and the TF32 fragment loads of
  // one warp hit distinct banks (section 5.2); the FFMA path reads rows with broadcasts and needs no padding.
  static constexpr int pad = tensor_cores ? 8 : 0;
  static constexpr int gs_stride = BN + pad, ds_stride = BM + pad;
  static constexpr int filter_stage = alpha * K * gs_stride;  // elements
  static constexpr int stage = filter_stage + alpha * K * ds_stride;
  static constexpr size_t gemm_bytes = 2 * sizeof(Smem) * size_t(stage);  // double buffered

  // Output transform in R rounds (Algorithm 3, lines 12-18): As[alpha][B_N / R][B_M + 4] floats reuse the
  // GEMM buffers; 4 floats of padding keep rows on different banks.
  static constexpr int out_stride = BM + 4;
  static constexpr int rounds() {
    int rounds = 1;
    while (sizeof(float) * size_t(alpha) * (BN / rounds) * out_stride > gemm_bytes) rounds *= 2;
    return rounds;
  }
  static constexpr int R = rounds();
  static constexpr int round_rows = BN / R;
  static constexpr size_t smem_bytes = gemm_bytes;
};

}  // namespace winrs::cuda
