// The band kernel's sums (depthwise layers on tensor cores, winrs/grouped.h): per added pair of X rows, warp
// `slot` takes its 8 channel pairs (16-byte pieces 2 slot and 2 slot + 1 of a pixel's 64 channels) over the
// ring rows' 32 pixels in 4 chunks of 8 dY columns. For each chunk, pair and window w one mma.sync m16n8k16:
//   A (16 x 16): row g, g + 8 = X rows x, x + 1 shifted by kw = g; column 2 s + c = channel c of column s.
//     Lane (g, t) holds X's words at columns s = t and t + 4 (plus g): a pixel's two channels, unchanged.
//   B (16 x 8): column n = 2 i + c = dY row x + 1 - 4 w - i, channel c; row 2 s + c' = channel c' of column
//     s. Lane (g, t) holds dY's words at columns t and t + 4 of row i = g / 2, masked to channel g % 2 (zeros
//     for the other channel, and for rows outside the tile).
//   C: lane (g, t) holds kw = g, i = t: channels 0 and 1 of X row x (c0, c1) and of x + 1 (c2, c3), so tap
//     kh = a + i - 1 + 4 w for X row x + a.
// The ring's pixels are 128-byte swizzled (piece q of pixel r at q ^ (r % 8)): the 8 lanes of a quarter warp
// read 5 (A) or 4 (B) distinct pixels of one row, which hit distinct banks. The lanes' offsets are computed
// once (BandLanes), the loads take 32-bit shared addresses, and each chunk's loads are issued before the MMAs
// of the chunk before it (the asm keeps program order): Nsight Compute counted 19 instructions per MMA on
// 7x7 64:28:256 when the compiler derived the addresses at every load.
#pragma once

#include <cstdint>

#include "cuda/device.cuh"
#include "cuda/grouped_mma.cuh"
#include "winrs/grouped.h"

namespace winrs::cuda {

// A warp's accumulators: its channel pairs, the windows, the m16n8 fragment.
template <int TH>
using BandSums = float[kBandPairs][band_windows(TH)][4];

// 16 bytes of shared memory at `address` + kOffset.
template <int kOffset = 0>
__device__ __forceinline__ uint4 band_load(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4 + %5];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address), "n"(kOffset));
  return v;
}

__device__ __forceinline__ uint32_t band_word(const uint4& v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

// Byte offsets of this lane's pieces: within an X image row (columns t + g and t + 4 + g of a chunk), within
// a dY ring row (columns t and t + 4 of chunk 0: chunk c is 1024 c further), per half (piece 2 slot + half);
// and each chunk's first X pixel in an X ring row (its image's, then 8 columns a chunk).
struct BandLanes {
  uint32_t x[2][2], g[2][2], chunk_x[4];

  __device__ BandLanes(int lane, int slot, int out_cols, int x_image_bytes) {
    const int g_lane = lane >> 2, t = lane & 3, cols_shift = __ffs(out_cols) - 1;  // out_cols: 8, 16 or 32
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int piece = 2 * slot + half, x_col = t + g_lane + 4 * k, g_col = t + 4 * k;
        x[half][k] = x_col * 128 + ((piece ^ (x_col & 7)) << 4);
        g[half][k] = g_col * 128 + ((piece ^ g_col) << 4);
      }
#pragma unroll
    for (int chunk = 0; chunk < 4; ++chunk) {
      const int first = 8 * chunk;
      chunk_x[chunk] = (first >> cols_shift) * x_image_bytes + (first & (out_cols - 1)) * 128;
    }
  }
};

// One chunk-half's operands: X rows a at columns k, dY windows w at columns k.
template <int W>
struct BandOperands {
  uint4 x[2][2], g[W][2];
};

template <int W, int kChunk, int kHalf>
__device__ __forceinline__ void band_fetch(BandOperands<W>& o, const BandLanes& lanes,
                                           const uint32_t (&x_rows)[2], const uint32_t (&g_rows)[W]) {
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int k = 0; k < 2; ++k) o.x[a][k] = band_load(x_rows[a] + lanes.chunk_x[kChunk] + lanes.x[kHalf][k]);
#pragma unroll
  for (int w = 0; w < W; ++w)
#pragma unroll
    for (int k = 0; k < 2; ++k) o.g[w][k] = band_load<1024 * kChunk>(g_rows[w] + lanes.g[kHalf][k]);
}

template <typename T, int TH, int kHalf>
__device__ __forceinline__ void band_products(BandSums<TH>& acc, const BandOperands<band_windows(TH)>& o,
                                              const uint32_t (&g_masks)[band_windows(TH)]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t a[4] = {band_word(o.x[0][0], e), band_word(o.x[1][0], e), band_word(o.x[0][1], e),
                           band_word(o.x[1][1], e)};
#pragma unroll
    for (int w = 0; w < band_windows(TH); ++w)
      mma_16bit<mma_operand<T>()>(acc[4 * kHalf + e][w], a, band_word(o.g[w][0], e) & g_masks[w],
                                  band_word(o.g[w][1], e) & g_masks[w]);
  }
}

// Step s of a pair of X rows (chunk s / 2, half s % 2, operand buffer s % 2): fetches step s + 1's operands,
// then adds step s's products, so that each step's loads are in flight during the MMAs before them.
template <typename T, int TH, int kStep>
__device__ __forceinline__ void band_steps(BandSums<TH>& acc, BandOperands<band_windows(TH)> (&o)[2],
                                           const BandLanes& lanes, const uint32_t (&x_rows)[2],
                                           const uint32_t (&g_rows)[band_windows(TH)],
                                           const uint32_t (&g_masks)[band_windows(TH)]) {
  constexpr int kNext = kStep + 1;
  if constexpr (kNext < 8)
    band_fetch<band_windows(TH), kNext / 2, kNext % 2>(o[kNext % 2], lanes, x_rows, g_rows);
  band_products<T, TH, kStep % 2>(acc, o[kStep % 2], g_masks);
  if constexpr (kNext < 8) band_steps<T, TH, kNext>(acc, o, lanes, x_rows, g_rows, g_masks);
}

// One pair of X rows (shared addresses x_rows) against the dY rows of lane (g, t)'s row i = g / 2 in each
// window (g_rows, masks g_masks): the 8 chunk-halves in turn (band_steps).
template <typename T, int TH>
__device__ __forceinline__ void band_stage(BandSums<TH>& acc, const BandLanes& lanes,
                                           const uint32_t (&x_rows)[2],
                                           const uint32_t (&g_rows)[band_windows(TH)],
                                           const uint32_t (&g_masks)[band_windows(TH)]) {
  BandOperands<band_windows(TH)> o[2];
  band_fetch<band_windows(TH), 0, 0>(o[0], lanes, x_rows, g_rows);
  band_steps<T, TH, 0>(acc, o, lanes, x_rows, g_rows, g_masks);
}

// Stores the warp's taps of its task's tap tile (t.kh0, t.kw0; the tile's rows and columns inside the
// filter): dW[k, kh, kw] (K x FH x FW x 1, or a split's partial dW) for its channels from `first` (k <
// out_c). Tap kh of channel c at kw = g is X row x + 1's product in lane (g, kh % 4), window kh / 4 (c2, c3)
// plus X row x's in lane (g, (kh + 1) % 4), window (kh + 1) / 4 (c0, c1), added in that order.
template <int TH, int TW>
__device__ __forceinline__ void band_store(const BandSums<TH>& acc, int lane, int first,
                                           const GroupedProblem& p, const GroupedTask& task, float* dw,
                                           bool add) {
  constexpr int W = band_windows(TH);
  const int g = lane >> 2, t = lane & 3, next = (lane & ~3) | ((t + 1) & 3);
  const int64_t kw = task.kw0 + g;
#pragma unroll
  for (int pair = 0; pair < kBandPairs; ++pair)
#pragma unroll
    for (int w = 0; w < W; ++w)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float same = __shfl_sync(0xffffffffu, acc[pair][w][c], next);
        const float later = __shfl_sync(0xffffffffu, w + 1 < W ? acc[pair][w + 1][c] : 0.0f, next);
        const int kh = t + 4 * w;
        const int64_t k = first + 2 * pair + c;
        if (kh < task.taps_h && g < TW && kw < p.filter_w && k < p.out_c)  // (g = TW: the next tile's column)
          put_float(dw + (k * p.filter_h + task.kh0 + kh) * p.filter_w + kw,
                    acc[pair][w][2 + c] + (t == 3 ? later : same), add);
      }
}

}  // namespace winrs::cuda
