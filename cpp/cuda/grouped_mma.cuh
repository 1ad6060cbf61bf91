// The grouped streaming kernel's sums on tensor cores (winrs/grouped.h, kMmaSliceChannels): at stage j, warp
// `slot` adds, for each of the 3 x 3 taps (a, b), the product of its 16 channels of dY row j - a (A: channels
// x pixels) and of X row j shifted by b pixels (B: pixels x channels) over the ring row's 32 pixel slots, as
// two k-steps of mma.sync m16n8k16 per n-tile of 8 channels. Both operands are read by ldmatrix
// .trans from the ring's pixel-major rows (a pixel's 64 channels in 128 bytes, 16-byte pieces swizzled: piece
// q of pixel r at q ^ (r % 8), so that 8 pixels' pieces hit distinct banks).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/device.cuh"
#include "winrs/grouped.h"

namespace winrs::cuda {

// A warp's accumulators: taps a x b, n-tiles of 8 channels, the m16n8 fragment (rows: dY channels, columns: X
// channels of the slice).
using MmaSums = float[kMmaTileW][kMmaTileW][2][4];

// Byte offsets, within a ring row, of the rows this lane gives ldmatrix: lanes 8q .. 8q + 7 address tile q.
// A (dY, per k-step of 16 pixel slots): tile q holds pixels 8 (q / 2) .. + 7 of the step and channels
// 8 (q % 2) .. + 7 of the slice (registers a0a1, a2a3, a4a5, a6a7 of the m16k16 fragment). B (X, per k-step
// and tap column b): tile q holds pixel slots 8 (q % 2) .. + 7 and channels 8 (q / 2) .. + 7 (b0b1, b2b3 of
// n-tile 0, then of n-tile 1), each slot's X pixel b columns right of its dY pixel in the same image.
struct MmaLanes {
  uint32_t a[2], b[2][kMmaTileW];

  __device__ MmaLanes(int lane, int slice, int out_cols, int x_image_bytes) {
    const int q = lane >> 3, r = lane & 7, cols_shift = __ffs(out_cols) - 1;  // out_cols: 8, 16 or 32
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      const int a_pixel = 16 * step + 8 * (q >> 1) + r, a_piece = 2 * slice + (q & 1);
      a[step] = a_pixel * 128 + ((a_piece ^ (a_pixel & 7)) << 4);
      const int slot = 16 * step + 8 * (q & 1) + r, b_piece = 2 * slice + (q >> 1);
      const int image = slot >> cols_shift, col = slot & ((1 << cols_shift) - 1);
#pragma unroll
      for (int tap = 0; tap < kMmaTileW; ++tap) {
        const int pixel = col + tap;
        b[step][tap] = image * x_image_bytes + pixel * 128 + ((b_piece ^ (pixel & 7)) << 4);
      }
    }
  }
};

template <typename T>
constexpr Operand mma_operand() {
  return std::is_same_v<T, __half> ? Operand::kF16 : Operand::kBF16;
}

// A warp's dY fragments: the A operands (channels x pixel slots, per k-step of 16) of dY rows j, j - 1, j - 2
// at stage j (zeros outside the tile), each loaded once, at its own stage.
using MmaRows = uint32_t[kMmaTileW][2][4];

// Stage j of a tile: loads dY row j's fragments (the ring's row at g_row; zeros past the tile's `rows`) into
// g[0], after moving g[0], g[1] to g[1], g[2]; then adds X row j (x_row) shifted by b against dY row j - a
// for tap (a, b). Each X and dY row is read from shared memory once (20 ldmatrix a stage when each stage read
// its 3 X rows: shared-memory waits were a third of the stage's stall samples, H100, 2026-11-25). X's
// fragments come a k-step at a time (registers for 3 blocks per SM), each step's before its MMAs: the asm
// keeps program order, so a load between MMAs waits out its latency (1.1-1.2x slower so on the H100).
template <typename T>
__device__ __forceinline__ void mma_stage(MmaSums& acc, MmaRows& g, const MmaLanes& lanes, uint32_t g_row,
                                          uint32_t x_row, int j, int rows) {
#pragma unroll
  for (int a = kMmaTileW - 1; a > 0; --a)
#pragma unroll
    for (int step = 0; step < 2; ++step)
#pragma unroll
      for (int r = 0; r < 4; ++r) g[a][step][r] = g[a - 1][step][r];
  if (j < rows) {
#pragma unroll
    for (int step = 0; step < 2; ++step) ldmatrix_x4_trans(g[0][step], g_row + lanes.a[step]);
  } else {
#pragma unroll
    for (int step = 0; step < 2; ++step)
#pragma unroll
      for (int r = 0; r < 4; ++r) g[0][step][r] = 0;
  }
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    uint32_t b[kMmaTileW][4];
#pragma unroll
    for (int tap = 0; tap < kMmaTileW; ++tap) ldmatrix_x4_trans(b[tap], x_row + lanes.b[step][tap]);
#pragma unroll
    for (int a = 0; a < kMmaTileW; ++a) {
      if (unsigned(j - a) >= unsigned(rows)) continue;  // dY row j - a outside the tile: no products
#pragma unroll
      for (int tap = 0; tap < kMmaTileW; ++tap) {
        mma_16bit<mma_operand<T>()>(acc[a][tap][0], g[a][step], b[tap][0], b[tap][1]);
        mma_16bit<mma_operand<T>()>(acc[a][tap][1], g[a][step], b[tap][2], b[tap][3]);
      }
    }
  }
}

// Stores the block's dW: the entries whose dY and X channels share a group, dW[k, a, b, c % group_c] (K x 3 x
// 3 x C_g, or a split's partial dW of that layout) for k from the block's first channel k0 (k < out_c): one
// span of dW. Each warp puts its entries at their places in the span in shared memory (`span`, free once the
// ring is read), then the block writes the span with 16-byte stores where it is 16-byte aligned. (The lanes'
// 72 scattered 4-byte stores of each entry were a third of the kernel's warp stall samples on 3x3 64:14:512
// g32, H100, 2026-11-25.) add: the splits add into dW (plan.atomic). Every thread of the block calls it.
__device__ __forceinline__ void mma_store(const MmaSums& acc, int lane, int slot, int k0, int out_c,
                                          int group_c, float* span, float* dw, bool add) {
  const int group_shift = __ffs(group_c) - 1;  // group_c: 2, 4, 8 or 16 (mma_group_channels)
  const int channels = min(kMmaBlockChannels, out_c - k0), taps = kMmaTileW * kMmaTileW;
  __syncthreads();  // every warp's last stage has read the ring
#pragma unroll
  for (int tile = 0; tile < 2; ++tile)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int m = (lane >> 2) + 8 * (e >> 1), n = 8 * tile + 2 * (lane & 3) + (e & 1);
      const int k = kMmaSliceChannels * slot + m;
      if ((m >> group_shift) == (n >> group_shift) && k < channels) {
        float* const at = span + ((k * taps) << group_shift) + (n & (group_c - 1));
#pragma unroll
        for (int a = 0; a < kMmaTileW; ++a)
#pragma unroll
          for (int b = 0; b < kMmaTileW; ++b) at[(a * kMmaTileW + b) << group_shift] = acc[a][b][tile][e];
      }
    }
  __syncthreads();
  const int elems = (channels * taps) << group_shift, thread = slot * kGroupedLanes + lane;
  constexpr int kThreads = kGroupedLanes * kGroupedSlots;
  float* const out = dw + ((int64_t(k0) * taps) << group_shift);
  if (reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    for (int i = 4 * thread; i + 4 <= elems; i += 4 * kThreads)
      put_float4(out + i, *reinterpret_cast<const float4*>(span + i), add);
    for (int i = (elems & ~3) + thread; i < elems; i += kThreads) put_float(out + i, span[i], add);
  } else {
    for (int i = thread; i < elems; i += kThreads) put_float(out + i, span[i], add);
  }
}

}  // namespace winrs::cuda
