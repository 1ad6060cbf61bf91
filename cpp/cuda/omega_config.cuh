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

// Load phases for `chunks` chunks per step: a power of two, so that the GEMM splits evenly into parts.
constexpr int chunk_phases(int chunks) {
  int p = 1;
  while (p * kThreads < chunks) p *= 2;
  return p;
}

// Channels per chunk of the staging with one width for both sides: at least 16 bytes of the storage type and
// enough that one load phase covers a step (K units of B_N + B_M channels) with the block's threads, halved
// (one more load phase) while a thread's raw registers for a chunk (max(alpha, r) columns) would pass 32 (16
// under the 128-register cap of two blocks per SM). One phase keeps all of a step's loads in flight during
// the whole GEMM: on split TF32 a 16-register bound (two phases) measured 12-17% slower than this one.
constexpr int uniform_chunk(int storage_bytes, int columns, int step_channels, int blocks_per_sm) {
  const int budget = (blocks_per_sm > 1 ? 16 : 32) * 4;  // bytes
  int v = 16 / storage_bytes;
  while (v * kThreads < step_channels) v *= 2;
  while (v > 1 && columns * v * storage_bytes > budget) v /= 2;
  return v;
}

// Channels per chunk of each side, the dY side's (r columns per chunk) and the X side's (alpha columns): the
// load phases of the uniform width, and within them the least work in the largest chunk, since the block
// waits at its barrier for its slowest thread. A chunk's work is its elements, each weighted by its side's
// transform: kPackedElementWork for the packed 16-bit transforms (staging.cuh, transform_store: about one
// instruction per two outputs, no unpacking or packing), kFp32ElementWork for the FP32 ones (unpacking, the
// transform's FP32 operations and half a conversion per element). The uniform width had left a quarter of
// the threads of the alpha-4 bf16 kernels (128 x 64 channels) without a chunk and the X side's threads with
// twice the dY side's elements: the warps stalled at the step's barrier in 32% of their cycles (Nsight
// Compute, Omega_4(3, 2) on 3x3 32:56:256, H100, 2026-11-24). The dY side's chunks come first in a step and
// fill whole warps.
inline constexpr int kPackedElementWork = 1, kFp32ElementWork = 4;
struct ChunkWidths {
  int filter, input;
};
constexpr ChunkWidths chunk_widths(int storage_bytes, int r, int alpha, int bn, int bm, int k,
                                   int blocks_per_sm, bool filter_packed = false, bool input_packed = false) {
  const int uniform = uniform_chunk(storage_bytes, alpha > r ? alpha : r, k * (bn + bm), blocks_per_sm);
  const int phases = chunk_phases(k * bn / uniform + k * bm / uniform);
  const int filter_work = filter_packed ? kPackedElementWork : kFp32ElementWork;
  const int input_work = input_packed ? kPackedElementWork : kFp32ElementWork;
  const auto work = [&](int f, int i) {
    const int filter = f * r * filter_work, input = i * alpha * input_work;
    return filter > input ? filter : input;
  };
  ChunkWidths best{uniform, uniform};
  int best_work = work(uniform, uniform);
  for (int f = 1; f <= bn; f *= 2) {
    if (bn % f != 0 || (k * bn / f) % 32 != 0) continue;
    for (int i = 1; i <= bm; i *= 2) {
      if (bm % i == 0 && chunk_phases(k * bn / f + k * bm / i) <= phases && work(f, i) < best_work) {
        best = {f, i};
        best_work = work(f, i);
      }
    }
  }
  return best;
}
// The alpha-4 bf16 kernels with FP32 transforms (128 x 64 channels, 16 units per step): 256 chunks of at
// most 48 elements, where one width gave 192 chunks of up to 64; the alpha-8 ones (64 x 64) keep their
// 8-channel chunks on both sides. Omega_4(2, 3) in 16 bits (64 x 128: its X side packed, its dY side FP32):
// dY chunks of 8 channels (24 FP32 elements), X chunks of 16 (64 packed).
static_assert(chunk_widths(2, 3, 4, 128, 64, 16, 1).filter == 16 &&
              chunk_widths(2, 3, 4, 128, 64, 16, 1).input == 8);
static_assert(chunk_widths(2, 2, 4, 128, 64, 16, 1).filter == 16 &&
              chunk_widths(2, 2, 4, 128, 64, 16, 1).input == 8);
static_assert(chunk_widths(2, 6, 8, 64, 64, 16, 1).filter == 8 &&
              chunk_widths(2, 6, 8, 64, 64, 16, 1).input == 8);
static_assert(chunk_widths(2, 3, 4, 64, 128, 16, 1, false, true).filter == 8 &&
              chunk_widths(2, 3, 4, 64, 128, 16, 1, false, true).input == 16);
static_assert(chunk_widths(2, 2, 4, 128, 64, 16, 1, true, true).filter == 16 &&
              chunk_widths(2, 2, 4, 128, 64, 16, 1, true, true).input == 8);

// Rounds of the output transform (Algorithm 3, lines 12-18) whose As[alpha][rows / R][out_stride] floats fit
// the `bytes` of shared memory that the main loop used.
constexpr int output_rounds(int alpha, int rows, int out_stride, size_t bytes) {
  int rounds = 1;
  while (sizeof(float) * size_t(alpha) * (rows / rounds) * out_stride > bytes) rounds *= 2;
  return rounds;
}

template <int V, Path P, bool Narrow = false, bool Copy = false>
struct OmegaConfig {
  using Tile = TileMath<V>;
  static constexpr int variant = V;
  static constexpr Path path = P;
  static constexpr Operand operand = path_info(P).operand;
  static constexpr bool tensor_cores = path_info(P).tensor_cores;
  using Storage = typename StorageType<path_info(P).storage>::T;  // X and dY in global memory
  using Smem = typename SmemType<operand>::T;                     // staged GEMM operands

  static constexpr int alpha = Tile::alpha, n = Tile::n, r = Tile::r;
  // The table's block, or the direct kernel's 64 x 64 one for layers of at most 64 channels (variants.h).
  static_assert(!Narrow || narrow_block(V, P, kNarrowBlock, kNarrowBlock));
  static constexpr int BN = Narrow ? kNarrowBlock : kVariants[V].shape(P).block_oc;
  static constexpr int BM = Narrow ? kNarrowBlock : kVariants[V].shape(P).block_ic;
  static constexpr int blocks_per_sm = kVariants[V].shape(P).blocks_per_sm;
  static constexpr int K = path_info(P).units_per_step;

  // Staging (staging.cuh). Chunks: a step's K units are cut into chunks of consecutive channels of one
  // unit's dY rows (B_N / filter_chunk per unit, numbered first) or X tile (B_M / input_chunk per unit);
  // thread t takes chunk phase * 256 + t in each load phase. Units: each warp takes one unit per phase, each
  // thread FC dY and IC X channels of it. Measured on an H100 (2026-11-22, Nsight Compute at locked clocks):
  // chunks made the bf16 kernels 1.24-1.36x and TF32 1.06-1.12x faster, but split TF32 and FP32 7-12% slower
  // (whose extra registers (fragment splits, the 128-register cap) the chunks' 32 raw registers crowd).
  static constexpr bool chunked = P != Path::kFp32 && P != Path::kTf32x3;
  // The sides whose transforms run on packed 16-bit words (staging.cuh, transform_store).
  static constexpr bool filter_packed = kSixteenBit<operand> && Tile::kFilterOneRounding;
  static constexpr bool input_packed = kSixteenBit<operand> && Tile::kInputOneRounding;
  static constexpr ChunkWidths chunk_width =
      chunk_widths(storage_bytes(P), r, alpha, BN, BM, K, blocks_per_sm, filter_packed, input_packed);
  static constexpr int filter_chunk = chunk_width.filter, input_chunk = chunk_width.input;
  static constexpr int filter_chunks = K * BN / filter_chunk, chunks = filter_chunks + K * BM / input_chunk;
  static constexpr int FC = BN / 32, IC = BM / 32;
  static constexpr int phases = chunked ? chunk_phases(chunks) : K / kWarps;
  static_assert(!chunked || (filter_chunk > 0 && BN % filter_chunk == 0 && BM % input_chunk == 0 &&
                             filter_chunks % 32 == 0),
                "a warp stages one side");
  static_assert(chunked || (FC * 32 == BN && IC * 32 == BM && FC <= 4 && IC <= 4 && K % kWarps == 0));

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
  static constexpr int R = output_rounds(alpha, BN, out_stride, gemm_bytes);
  static constexpr int round_rows = BN / R;

  // Copy staging (staging.cuh, CopyStager) of the direct kernel on the tensor-core paths, where X and dY go
  // to shared memory untransformed: cp.async straight from global memory into copy_stages buffers, all but
  // one in flight, each step copy_substeps K-blocks of the GEMM (stage layouts as above, one after the
  // other). Register staging kept one 16-unit step in flight, whose GEMM (about 130 tensor cycles per block)
  // hid a fraction of the loads' latency: the direct bf16 kernel ran at 142 GEMM TFLOP/s, now 224. TF32
  // operands land unrounded and are rounded at the fragment load.
  static constexpr int taps = 1;  // filter columns per block of the direct kernel (direct_taps.cuh: more)
  static constexpr bool copy = Copy, wgmma = false, tma = false;
  static_assert(!Copy || (V == 0 && tensor_cores && BN == BM));
  static constexpr int copy_substeps = 4, copy_stages = 3;
  static constexpr int copy_pieces = 1;                 // 16-byte pieces per thread and unit (CopyStager)
  static constexpr int copy_units = copy_substeps * K;  // units per copy step
  static constexpr int copy_step_elems = copy_substeps * stage;
  static constexpr size_t copy_bytes = size_t(copy_stages) * copy_step_elems * sizeof(Smem);
  static constexpr size_t smem_bytes = Copy && copy_bytes > gemm_bytes ? copy_bytes : gemm_bytes;
  static_assert(smem_bytes == size_t(omega_smem_bytes(alpha, P, BN, BM, Copy)),
                "the planner's count (smem.h)");
  static constexpr size_t smem_align = 16;
  // Element offsets in a copy step of unit k's piece at channel c of dY and of X: the K-block's stage layout.
  __device__ static constexpr int grad_offset(int k, int c) { return k / K * stage + k % K * gs_stride + c; }
  __device__ static constexpr int input_offset(int k, int c) {
    return k / K * stage + filter_stage + k % K * ds_stride + c;
  }
};

}  // namespace winrs::cuda
