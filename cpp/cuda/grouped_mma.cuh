// The grouped streaming kernel's sums on tensor cores (winrs/grouped.h, kMmaSliceChannels): per stage, warp
// `slot` adds, for each of the 3 x 3 taps (a, b), the product of its 16 channels of the stage's dY row (A:
// channels x pixels) and of X row a shifted by b pixels (B: pixels x channels) over the ring row's 32 pixel
// slots, as two k-steps of mma.sync m16n8k16 per n-tile of 8 channels. Both operands are read by ldmatrix
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
  int a[2], b[2][kMmaTileW];

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

// One stage: dY row g_row (the ring's) with X rows x_rows[a] (the TH rows it meets, in order). A row's
// fragments are all loaded before its MMAs (the asm keeps program order, so a load between MMAs waited out
// its latency: 1.1-1.2x faster so on the H100).
template <typename T>
__device__ __forceinline__ void mma_stage(MmaSums& acc, const MmaLanes& lanes, const char* g_row,
                                          const char* const (&x_rows)[kMmaTileW]) {
  uint32_t a[2][4];
#pragma unroll
  for (int step = 0; step < 2; ++step) ldmatrix_x4_trans(a[step], g_row + lanes.a[step]);
#pragma unroll
  for (int row = 0; row < kMmaTileW; ++row) {
    uint32_t b[kMmaTileW][2][4];
#pragma unroll
    for (int tap = 0; tap < kMmaTileW; ++tap)
#pragma unroll
      for (int step = 0; step < 2; ++step) ldmatrix_x4_trans(b[tap][step], x_rows[row] + lanes.b[step][tap]);
#pragma unroll
    for (int step = 0; step < 2; ++step)  // an accumulator's two MMAs 6 apart (timed alike with 1 apart)
#pragma unroll
      for (int tap = 0; tap < kMmaTileW; ++tap) {
        mma_16bit<mma_operand<T>()>(acc[row][tap][0], a[step], b[tap][step][0], b[tap][step][1]);
        mma_16bit<mma_operand<T>()>(acc[row][tap][1], a[step], b[tap][step][2], b[tap][step][3]);
      }
  }
}

// Stores the entries whose dY and X channels share a group: dW[k, a, b, c % group_c] (K x 3 x 3 x C_g, or a
// split's partial dW of that layout) for the slice's channels from `first` (k < out_c).
__device__ __forceinline__ void mma_store(const MmaSums& acc, int lane, int first, int out_c, int group_c,
                                          float* dw) {
#pragma unroll
  for (int a = 0; a < kMmaTileW; ++a)
#pragma unroll
    for (int b = 0; b < kMmaTileW; ++b)
#pragma unroll
      for (int tile = 0; tile < 2; ++tile)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = (lane >> 2) + 8 * (e >> 1), n = 8 * tile + 2 * (lane & 3) + (e & 1);
          const int k = first + m;
          if (m / group_c == n / group_c && k < out_c)
            dw[((k * kMmaTileW + a) * kMmaTileW + b) * group_c + n % group_c] = acc[a][b][tile][e];
        }
}

}  // namespace winrs::cuda
