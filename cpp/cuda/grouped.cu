// The direct grouped filter gradient on the GPU (winrs/grouped.h): one kernel template over the storage type
// and the thread's tap tile, then the compensated sum of the splits (winrs/reduction.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>

#include "cuda/device.cuh"
#include "cuda/grouped_band.cuh"
#include "cuda/grouped_mma.cuh"
#include "cuda/omega.h"
#include "cuda/tma.cuh"
#include "winrs/grouped.h"
#include "winrs/reduction.h"
#include "winrs/tile.h"

namespace winrs::cuda {
namespace {

// 16 bytes of consecutive channels (loaded raw: converted only when stored, so that a batch of loads stays in
// few registers) as floats in shared memory.
__device__ __forceinline__ void store16(float* dst, const uint4& raw, float) {
  *reinterpret_cast<uint4*>(dst) = raw;
}
template <typename T>
__device__ __forceinline__ void store16(float* dst, const uint4& raw, T) {  // bfloat16 or float16
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; i += 2) {
    T v[4];
    memcpy(v, &words[i], 8);
    *reinterpret_cast<float4*>(dst + 2 * i) =
        make_float4(to_float(v[0]), to_float(v[1]), to_float(v[2]), to_float(v[3]));
  }
}

// Resident blocks per SM the registers must allow: small tap tiles keep 20 warps busy (their sums are
// memory bound), larger ones 16 or 12 (up to 7 x 7 accumulators), without spilling.
template <int TW>
constexpr int kGroupedMinBlocks = grouped_tile_rows(TW) * TW <= 16   ? 5
                                  : grouped_tile_rows(TW) * TW <= 25 ? 4
                                                                     : 3;

// Block: kGroupedLanes output channels x kGroupedSlots warps; grid: channel blocks x units x (stacked
// problems x splits). Each spatial tile of the split's range is staged in shared memory (float32, lane-major,
// zeros outside the arrays), then the warps add their chunks of it (winrs/grouped.h). kPipelined (16-bit
// depthwise layers with 16-byte channel runs): the tiles stay 16-bit in two buffers of the same bytes, the
// next tile copied by cp.async while the warps add the current one (the float32 staging loaded, then added,
// with no overlap, reached 27% of DRAM's bandwidth on a 3x3 bf16 layer; pipelined, 1.22-1.35x faster on
// depthwise 3x3, 5x5 and 7x7 bf16 layers, H100, 2026-11-23).
template <typename T, int TW, bool kUnitColumns, bool kPipelined>
__global__ void __launch_bounds__(kGroupedLanes* kGroupedSlots, kGroupedMinBlocks<TW>)
    grouped_kernel(GroupedProblem p, GroupedPlan plan, const T* __restrict__ x, const T* __restrict__ dy,
                   float* dw, float* workspace, long long input_stride, long long grad_stride) {
  constexpr int TH = grouped_tile_rows(TW);
  static_assert(!kPipelined || sizeof(T) == 2);
  extern __shared__ float4 smem4[];
  float* const smem = reinterpret_cast<float*>(smem4);
  const int lane = threadIdx.x, slot = threadIdx.y;
  const int64_t k = int64_t(blockIdx.x) * kGroupedLanes + lane;
  const int64_t split = blockIdx.z % plan.splits, problem = blockIdx.z / plan.splits;
  const bool active = k < p.out_c;
  const GroupedTask t = grouped_task(p, plan, active ? k : int64_t(0), int64_t(blockIdx.y));
  const int64_t channel = grouped_x_channel(p, t);
  x += problem * input_stride;
  dy += problem * grad_stride;
  const int x_cols = int(plan.x_cols), out_cols = int(plan.out_cols);
  const int x_pixels = int(plan.x_rows) * x_cols, g_pixels = int(plan.out_rows) * out_cols;
  float* const sx = smem;
  float* const sg = smem + x_pixels * kGroupedLanes;
  auto x_at = [&](int64_t row, int64_t col) {
    return sx[(int(row) * x_cols + int(col)) * kGroupedLanes + lane];
  };
  auto g_at = [&](int64_t row, int64_t col) {
    return sg[(int(row) * out_cols + int(col)) * kGroupedLanes + lane];
  };
  // Stores value(i) at pixel i of a staged array, this warp's pixels kStageBatch at a time: all of a batch's
  // loads are issued before the first store waits for one.
  constexpr int kStageBatch = 8;
  auto stage = [&](float* dst, int pixels, auto value) {
    for (int base = slot; base < pixels; base += kGroupedSlots * kStageBatch) {
      float v[kStageBatch];
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) {
        const int i = base + b * kGroupedSlots;
        v[b] = i < pixels ? value(i) : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) {
        const int i = base + b * kGroupedSlots;
        if (i < pixels) dst[i * kGroupedLanes + lane] = v[b];
      }
    }
  };
  // With 16-byte aligned channel runs (a depthwise X of C % V == 0 channels, a dY of K % V == 0), lanes load
  // 16 bytes each: a warp stages 32 / (32 / V) pixels of the block's 32 channels per load.
  constexpr int V = 16 / sizeof(T), kLanesPerPixel = kGroupedLanes / V,
                kPixelsPerLoad = kGroupedLanes / kLanesPerPixel;
  const int64_t k0 = int64_t(blockIdx.x) * kGroupedLanes;
  const bool vector_x = p.group_c == 1 && p.out_c == p.groups && p.in_c % V == 0;
  const bool vector_g = p.out_c % V == 0;
  auto stage_vectors = [&](float* dst, int pixels, int cols, int64_t row0, int64_t col0, int64_t rows,
                           int64_t width, const T* base, int64_t pixel_pitch) {
    constexpr int kBatch = 4;
    const int sub = lane / kLanesPerPixel, part = lane % kLanesPerPixel;
    const bool lane_inside = k0 + part * V < p.out_c;
    for (int first = slot * kPixelsPerLoad; first < pixels;
         first += kGroupedSlots * kPixelsPerLoad * kBatch) {
      uint4 raw[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = first + b * kGroupedSlots * kPixelsPerLoad + sub;
        const int64_t row = row0 + i / cols, col = col0 + i % cols;
        raw[b] =
            i < pixels && lane_inside && row >= 0 && row < rows && col >= 0 && col < width
                ? __ldg(reinterpret_cast<const uint4*>(base + (row * width + col) * pixel_pitch + part * V))
                : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = first + b * kGroupedSlots * kPixelsPerLoad + sub;
        if (i < pixels) store16(dst + i * kGroupedLanes + part * V, raw[b], T{});
      }
    }
  };
  float acc[TH][TW] = {};
  if constexpr (kPipelined) {
    // Tile buffers of T: X window, then dY, lane-major as above; 16-byte copies, zeros outside the arrays.
    T* const buffers = reinterpret_cast<T*>(smem);
    const int tile_elems = (x_pixels + g_pixels) * kGroupedLanes;
    const int sub = lane / kLanesPerPixel, part = lane % kLanesPerPixel;
    const bool lane_inside = k0 + part * V < p.out_c;
    auto copy = [&](T* dst, int pixels, int cols, int64_t row0, int64_t col0, int64_t rows, int64_t width,
                    const T* base, int64_t pixel_pitch) {
      for (int i = slot * kPixelsPerLoad + sub; i < pixels; i += kGroupedSlots * kPixelsPerLoad) {
        const int64_t row = row0 + i / cols, col = col0 + i % cols;
        const bool inside = lane_inside && row >= 0 && row < rows && col >= 0 && col < width;
        cp_async_16(dst + i * kGroupedLanes + part * V,
                    inside ? base + (row * width + col) * pixel_pitch + part * V : base, inside);
      }
    };
    auto issue = [&](int64_t tile, T* buffer) {
      const GroupedTileOrigin o = grouped_tile_origin(p, plan, t, tile);
      copy(buffer, x_pixels, x_cols, o.ih, o.iw, p.in_h, p.in_w, x + o.n * p.in_h * p.in_w * p.in_c + k0,
           p.in_c);
      copy(buffer + x_pixels * kGroupedLanes, g_pixels, out_cols, o.oh, o.ow, p.out_h, p.out_w,
           dy + o.n * p.out_h * p.out_w * p.out_c + k0, p.out_c);
    };
    const int64_t first = plan.first_tile(split), last = plan.first_tile(split + 1);
    if (first < last) issue(first, buffers);
    cp_async_commit();
    for (int64_t tile = first; tile < last; ++tile) {
      const T* current = buffers + (tile - first) % 2 * tile_elems;
      // The other buffer was read in the previous iteration, before its closing barrier.
      if (tile + 1 < last) issue(tile + 1, buffers + (tile + 1 - first) % 2 * tile_elems);
      cp_async_commit();
      cp_async_wait<1>();  // this tile's copies (the next tile's may still be in flight)
      __syncthreads();
      const T* const tx = current;
      const T* const tg = current + x_pixels * kGroupedLanes;
      auto raw_x = [&](int64_t row, int64_t col) {
        return to_float(tx[(int(row) * x_cols + int(col)) * kGroupedLanes + lane]);
      };
      auto raw_g = [&](int64_t row, int64_t col) {
        return to_float(tg[(int(row) * out_cols + int(col)) * kGroupedLanes + lane]);
      };
      const GroupedTileOrigin o = grouped_tile_origin(p, plan, t, tile);
      if (active)
        for_slot_chunks(p, plan, o, slot, [&](int64_t, int64_t r, int64_t q) {  // one image a tile
          grouped_chunk<TW, kUnitColumns>(p, t, r, q, raw_x, raw_g, acc);
        });
      __syncthreads();  // the buffer is read before the copies of tile + 2 overwrite it
    }
    cp_async_wait<0>();
  }
  for (int64_t tile = plan.first_tile(split); !kPipelined && tile < plan.first_tile(split + 1); ++tile) {
    const GroupedTileOrigin o = grouped_tile_origin(p, plan, t, tile);
    __syncthreads();  // the previous tile is read
    if (vector_x) {
      stage_vectors(sx, x_pixels, x_cols, o.ih, o.iw, p.in_h, p.in_w, x + o.n * p.in_h * p.in_w * p.in_c + k0,
                    p.in_c);
    } else {
      stage(sx, x_pixels, [&](int i) {
        const int64_t ih = o.ih + i / x_cols, iw = o.iw + i % x_cols;
        return active && ih >= 0 && ih < p.in_h && iw >= 0 && iw < p.in_w
                   ? to_float(x[((o.n * p.in_h + ih) * p.in_w + iw) * p.in_c + channel])
                   : 0.0f;
      });
    }
    if (vector_g) {
      stage_vectors(sg, g_pixels, out_cols, o.oh, o.ow, p.out_h, p.out_w,
                    dy + o.n * p.out_h * p.out_w * p.out_c + k0, p.out_c);
    } else {
      stage(sg, g_pixels, [&](int i) {
        const int64_t oh = o.oh + i / out_cols, ow = o.ow + i % out_cols;
        return active && oh < p.out_h && ow < p.out_w
                   ? to_float(dy[((o.n * p.out_h + oh) * p.out_w + ow) * p.out_c + k])
                   : 0.0f;
      });
    }
    __syncthreads();
    if (active)
      for_slot_chunks(p, plan, o, slot, [&](int64_t, int64_t r, int64_t q) {  // one image a tile
        grouped_chunk<TW, kUnitColumns>(p, t, r, q, x_at, g_at, acc);
      });
  }
  // The warps' partial taps, added in the CPU executor's order.
  __syncthreads();
  float* const partial = smem;  // (kGroupedSlots - 1) x TH x TW x kGroupedLanes
  if (slot > 0) {
#pragma unroll
    for (int r = 0; r < TH; ++r)
#pragma unroll
      for (int j = 0; j < TW; ++j)
        partial[(((slot - 1) * TH + r) * TW + j) * kGroupedLanes + lane] = acc[r][j];
  }
  __syncthreads();
  if (slot != 0 || !active) return;
#pragma unroll
  for (int s = 0; s < kGroupedSlots - 1; ++s)
#pragma unroll
    for (int r = 0; r < TH; ++r)
#pragma unroll
      for (int j = 0; j < TW; ++j) acc[r][j] += partial[((s * TH + r) * TW + j) * kGroupedLanes + lane];
  float* const out = plan.split_output(dw, workspace, p.filter_elems(), problem, split);
  grouped_store<TW>(p, t, acc, out, [&](float* at, float v) { put_float(at, v, plan.atomic); });
}

// A thread's channels of one pixel: one 4-byte word (winrs/grouped.h, kStreamBytes), unpacked to floats.
template <typename T>
using StreamSums = ChannelSums<stream_channels(sizeof(T))>;
__device__ __forceinline__ StreamSums<float> unpack_stream(uint32_t bits, float) {
  return {{__uint_as_float(bits)}};
}
__device__ __forceinline__ StreamSums<__nv_bfloat16> unpack_stream(uint32_t bits, __nv_bfloat16) {
  return {{__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u)}};
}
__device__ __forceinline__ StreamSums<__half> unpack_stream(uint32_t bits, __half) {
  __half2 pair;
  memcpy(&pair, &bits, 4);
  const float2 f = __half22float2(pair);
  return {{f.x, f.y}};
}

// The arithmetic of the streaming kernel's sums: FP32 FMA, or tensor cores for grouped layers
// (grouped_mma.cuh) or depthwise ones (grouped_band.cuh).
enum class StreamMath { kFma, kGroupMma, kBandMma };

// The tensor maps of the streaming kernel's TMA producer: X and dY as (stacked problems x N) x H x W x C,
// boxes of one pixel row's kGroupedLanes x V channels (x_cols and out_cols pixels).
struct StreamMaps {
  CUtensorMap x, g;
};

// The streaming kernel (depthwise layers, plan.streams): the blocks, tiles and warps of grouped_kernel, each
// warp a column of 8 outputs of its tiles (plan: 4 per row of the tile's images, so for_slot_chunks gives
// warp `slot` chunk `slot`, rows in order), each lane V consecutive channels (one 4-byte word of a pixel).
// The block walks its tiles row by row through a ring of stream_ring_rows(TH) X rows and dY rows in shared
// memory (each the row of every image of the tile), copied kStreamDepth - 1 rows ahead of the row its warps
// add (the loads straight from memory this kernel made before kept one row in flight per lane: latency bound
// at 28% of issue slots). kTma (sm_90a): one thread copies each image's row as one TMA box, completing a
// barrier per ring row; else every thread copies 16-byte pieces by cp.async. Each tap adds the chunks in
// grouped_chunk's order: the sums are the CPU executor's.
//
// kMath: the sums' arithmetic. kGroupMma (grouped layers on tensor cores, grouped.h): warp `slot` takes
// channels 16 slot .. 16 slot + 15 of the block's 64 (an mma slice) instead of a column, the rows' pixels are
// 128-byte swizzled, and stage j copies dY row j with X row j (dY leads: X row j meets dY rows j - a, kept in
// registers; the cp.async form's producer leaves registers for 2 blocks per SM, 3 spilled). kBandMma
// (depthwise layers on tensor cores, grouped_band.cuh): the same rows, channels and copies, dY rows kept in
// the ring for band_windows x 4 stages.
//
// kStride (1, or 2 in both directions: MobileNet's and EfficientNet's downsampling layers): a tile's stages
// are its X rows, a dY row added at every kStride-th from TH - 1 on, and a warp's chunk meets X columns
// kStride c0 .. kStride (c0 + 7) + TW - 1.
//
// kSequence (1D layers, plan.sequence): one row of taps (TH 1), and a tile's rows follow each other along the
// layer's one row, out_cols apart (tile_offset): stage j copies X and dY at columns j out_cols on.
template <typename T, int TW, bool kTma, bool kMultiplied, StreamMath kMath = StreamMath::kFma,
          int kStride = 1, bool kSequence = false>
__global__ void __launch_bounds__(kGroupedLanes* kGroupedSlots,
                                  kMath == StreamMath::kBandMma ? kBandBlocksPerSm
                                  : kMath == StreamMath::kGroupMma
                                      ? (kTma ? kMmaBlocksPerSm : kMmaBlocksPerSm - 1)
                                      : stream_blocks_per_sm(kSequence ? 1 : grouped_tile_rows(TW), TW))
    grouped_streaming_kernel(GroupedProblem p, GroupedPlan plan, const T* __restrict__ x,
                             const T* __restrict__ dy, float* dw, float* workspace, long long input_stride,
                             long long grad_stride, const __grid_constant__ StreamMaps maps) {
  if constexpr (kTma && !WINRS_WGMMA_CODE) return;  // not launched on this target (launch_storage)
  constexpr bool kMma = kMath != StreamMath::kFma, kBand = kMath == StreamMath::kBandMma;
  static_assert(!kMma || (sizeof(T) == 2 && !kMultiplied && (kBand || TW == kMmaTileW)));
  static_assert(kStride == 1 || (kStride == 2 && !kMma && !kMultiplied));
  static_assert(!kSequence || (kStride == 1 && !kMma && !kMultiplied));
  constexpr int TH = kSequence ? 1 : grouped_tile_rows(TW), V = stream_channels(sizeof(T)), C = kGroupedChunk;
  // X's and dY's ring rows (stream_ring_rows, band_x_rows and band_g_rows; kGroupMma reads each X row at its
  // own stage only).
  constexpr int kDepth = kBand ? kBandDepth : kMma ? kMmaDepth : stream_depth(TH);
  constexpr int kRing = kBand ? band_x_rows() : kMma ? kDepth : TH + kDepth - 1;
  constexpr int kGRing = kBand ? band_g_rows(TH) : kDepth;
  // kReleases (the TMA form on tensor cores): thread 0 reuses ring rows once the warps release them (done
  // barriers), else all threads wait for each other at every stage (a block barrier: the CUDA-core forms,
  // 5-6 blocks per SM, whose registers the done barriers' bookkeeping would spill).
  constexpr bool kReleases = kTma && kMma;
  static_assert(kRing <= 16 && kRing >= kDepth);  // kTma's phase bits; done[r]'s phases (below)
  // 16-byte copies: kPieces per pixel of the block's kGroupedLanes x V channels, kPieceChannels each.
  constexpr int kPieceChannels = 16 / sizeof(T), kPieces = kGroupedLanes * kStreamBytes / 16;
  using Sums = StreamSums<T>;
  extern __shared__ float4 smem4[];
  const int lane = threadIdx.x, slot = threadIdx.y, thread = slot * kGroupedLanes + lane;
  const int k0 = int(blockIdx.x) * kGroupedLanes * V;  // the block's first channel
  const int64_t k = k0 + lane * V;                     // this lane's first channel
  // kMultiplied: m = 2^m_shift output channels per input channel (the planner's powers of two, at least V),
  // so a lane's V channels meet one X channel and a pixel of the block's X channels is 32 / m words.
  const int m_shift = kMultiplied ? __ffs(int(p.out_c / p.groups)) - 1 : 0;
  const int x_k0 = k0 >> m_shift, x_words = kGroupedLanes >> m_shift;
  // (32-bit tile and split math: the planner keeps tiles below 2^31)
  const int split = int(blockIdx.z) % int(plan.splits), problem = int(blockIdx.z) / int(plan.splits);
  const bool active = k < p.out_c;
  const GroupedTask t = grouped_task<int>(p, plan, active ? int(k) : 0, int(blockIdx.y));
  x += problem * input_stride;
  dy += problem * grad_stride;
  const int in_h = int(p.in_h), in_w = int(p.in_w), in_c = int(p.in_c);
  const int out_h = int(p.out_h), out_w = int(p.out_w), out_c = int(p.out_c);
  const int x_cols = int(plan.x_cols), out_cols = int(plan.out_cols), images = int(plan.tile_images);
  // This warp's column of 8 outputs: `image` of the tile's images, from column c0 of its out_cols.
  const int image = slot / (out_cols / C), c0 = slot % (out_cols / C) * C;
  // A ring row holds the tile's images side by side: X's of x_image_words each (padded to 128 bytes, as
  // TMA's destinations must be), dY's of out_cols x lanes words. A pixel's words are lane-major, so that a
  // warp's reads of a pixel hit 32 banks.
  // kMma: each image's X from a 1024-byte boundary (mma_x_image_bytes), the ring from the first one.
  const int x_image_words = kMma ? int(mma_x_image_bytes(x_cols) / 4) : (x_cols * x_words + 31) & ~31;
  const int x_row_words = images * x_image_words;
  uint32_t* const ring_x =
      kMma ? reinterpret_cast<uint32_t*>((reinterpret_cast<uintptr_t>(smem4) + 1023) & ~uintptr_t(1023))
           : reinterpret_cast<uint32_t*>(smem4);
  uint32_t* const ring_g =
      ring_x + kRing * (kMma ? x_row_words : images * x_cols * kGroupedLanes);  // X rows sized for m = 1
  const int g_row_words = images * out_cols * kGroupedLanes;
  // kTma: full[r], ring row r's copies have landed (one arrival, the copies' bytes). kReleases: done[r],
  // every warp has read the rows of the stage that used ring row r last.
  uint64_t* const full = reinterpret_cast<uint64_t*>(ring_g + kGRing * g_row_words);
  uint64_t* const done = full + kRing;
  // The maps' image index of image 0 of this problem (stacked problems share X or dY, or follow each other).
  const int x_image0 = input_stride == 0 ? 0 : int(problem * p.batch);
  const int g_image0 = grad_stride == 0 ? 0 : int(problem * p.batch);

  // A tile's rows go through the ring as (rows - 1) kStride + TH stages: stage j copies X row j of the tile's
  // window and, from j = TH - 1 on at every kStride-th, dY row (j - TH + 1) / kStride, which the warps then
  // add with X rows j - TH + 1 .. j.
  struct Tile {
    int n, images, ih0, iw0, oh0, ow0, rows;  // images: those of the tile inside the batch
    const T *image_x, *image_g;               // offsets within one image fit 32 bits (the planner checks)
  };
  auto tile_at = [&](int tile) {
    const GroupedTileOrigin o = grouped_tile_origin<int>(p, plan, t, tile);
    return Tile{int(o.n),
                min(images, int(p.batch - o.n)),
                int(o.ih),
                int(o.iw),
                int(o.oh),
                int(o.ow),
                kSequence ? min(int(plan.out_rows), (out_w - int(o.ow) + out_cols - 1) / out_cols)
                          : min(int(plan.out_rows), out_h - int(o.oh)),
                x + o.n * p.in_h * p.in_w * p.in_c + x_k0,
                dy + o.n * p.out_h * p.out_w * p.out_c + k0};
  };
  // 2^piece_shift pieces per pixel (kPieces for dY, kPieces / m for X), channels from `first` of `channels`;
  // kMma: piece q of pixel r at place q ^ (r % 8), as TMA's 128-byte swizzle puts it.
  auto copy_row = [&](uint32_t* dst, int pixels, int piece_shift, bool row_inside, int col0, int width,
                      const T* row_base, int pitch, int first, int channels) {
    for (int i = thread; i < pixels << piece_shift; i += kGroupedLanes * kGroupedSlots) {
      const int pixel = i >> piece_shift, part = i & ((1 << piece_shift) - 1), col = col0 + pixel;
      const bool inside =
          row_inside && unsigned(col) < unsigned(width) && first + part * kPieceChannels < channels;
      const int place = kMma ? part ^ (pixel & 7) : part;
      cp_async_16(dst + (pixel << piece_shift) * (16 / 4) + place * (16 / 4),
                  inside ? row_base + col * pitch + part * kPieceChannels : x, inside);
    }
  };
  constexpr int kPieceShift = 3;
  static_assert(kPieces == 1 << kPieceShift);
  // Stage j of a tile: X row j of each of its images and, from j = TH - 1 on, their dY row j - TH + 1 (kMma:
  // dY row j, while j < rows). kMma sums every pixel of a ring row: images past the batch are copied as zeros
  // (a TMA box past the maps' last image; another problem's images may follow this one's).
  auto adds_at = [](int j) { return j >= TH - 1 && (j - (TH - 1)) % kStride == 0; };
  auto copies_g = [&](const Tile& tile, int j) { return kMma ? j < tile.rows : adds_at(j); };
  // kBand: X rows in pairs (an odd count of rows gets the next, which meets only dY rows past the tile).
  auto stages = [](const Tile& tile) {
    const int rows = (tile.rows - 1) * kStride + TH;
    return kBand ? (rows + 1) & ~1 : rows;
  };
  auto issue = [&](const Tile& tile, int j, int ring_row, int g_ring_row) {
    const int ih = tile.ih0 + (kSequence ? 0 : j);
    const int oh = tile.oh0 + (kSequence ? 0 : kMma ? j : (j - (TH - 1)) / kStride);
    const int iw = tile.iw0 + (kSequence ? j * out_cols : 0), ow = tile.ow0 + (kSequence ? j * out_cols : 0);
    const bool adds_g = copies_g(tile, j);
    const int copied = kMma ? images : tile.images;
    if constexpr (kTma) {
      const int row_bytes = kGroupedLanes * kStreamBytes;
      mbarrier_arrive_expect(
          full + ring_row, copied * ((x_cols * row_bytes >> m_shift) + (adds_g ? out_cols * row_bytes : 0)));
    }
    for (int i = 0; i < copied; ++i) {
      uint32_t* const x_dst = ring_x + ring_row * x_row_words + i * x_image_words;
      uint32_t* const g_dst = ring_g + g_ring_row * g_row_words + i * out_cols * kGroupedLanes;
      const bool inside = i < tile.images;
      if constexpr (kTma) {
        constexpr int kPastMaps = 1 << 30;
        tma_load_4d(x_dst, &maps.x, full + ring_row, x_k0, iw, ih,
                    inside ? x_image0 + tile.n + i : kPastMaps);
        if (adds_g)
          tma_load_4d(g_dst, &maps.g, full + ring_row, k0, ow, oh,
                      inside ? g_image0 + tile.n + i : kPastMaps);
      } else {
        copy_row(x_dst, x_cols, kPieceShift - m_shift, inside && unsigned(ih) < unsigned(in_h), iw, in_w,
                 tile.image_x + i * int64_t(in_h) * in_w * in_c + ih * in_w * in_c, in_c, x_k0, in_c);
        if (adds_g)
          copy_row(g_dst, out_cols, kPieceShift, inside, ow, out_w,
                   tile.image_g + i * int64_t(out_h) * out_w * out_c + oh * out_w * out_c, out_c, k0, out_c);
      }
    }
  };

  const int first = plan.first_tile<int>(split), last = plan.first_tile<int>(split + 1);
  // The copying cursor runs kDepth - 1 stages ahead of the adding one, across tiles.
  int copy_tile = first;
  int copy_j = 0, copy_ring = 0, copy_g_ring = 0;
  Tile copying = tile_at(first < last ? first : 0);
  auto issue_next = [&] {
    if (copy_tile < last) {
      if (!kTma || thread == 0) issue(copying, copy_j, copy_ring, copy_g_ring);
      copy_ring = copy_ring + 1 == kRing ? 0 : copy_ring + 1;
      copy_g_ring = copy_g_ring + 1 == kGRing ? 0 : copy_g_ring + 1;
      if (++copy_j == stages(copying) && ++copy_tile < last) copy_j = 0, copying = tile_at(copy_tile);
    }
    if constexpr (!kTma) cp_async_commit();  // empty groups past the end keep the count of groups in step
  };
  if constexpr (kTma) {
    if (thread == 0) {
      for (int r = 0; r < kRing; ++r) mbarrier_init(full + r, 1);
      for (int r = 0; r < kRing && kReleases; ++r) mbarrier_init(done + r, kGroupedSlots);
      mbarrier_init_fence();
    }
    __syncthreads();
    if (kReleases && lane == 0) mbarrier_arrive(done + kRing - 1);  // the first stage's: nothing read before
  }
#pragma unroll
  for (int d = 0; d + 1 < kDepth; ++d) issue_next();

  Sums acc[TH][TW] = {};
  MmaSums mma_acc = {};        // kGroupMma
  MmaRows mma_rows = {};       // kGroupMma: dY rows j, j - 1, j - 2
  BandSums<TH> band_acc = {};  // kBandMma
  const BandLanes band_lanes(lane, slot, out_cols, x_image_words * 4);
  const uint32_t ring_x_address = shared_address(ring_x), ring_g_address = shared_address(ring_g);
  const uint32_t x_row_bytes = x_row_words * 4, g_row_bytes = g_row_words * 4;
  const int mma_first = k0 + kMmaSliceChannels * slot;
  const MmaLanes mma_lanes(lane, slot, out_cols, x_image_words * 4);
  int ring = 0, g_ring = 0;  // the X and dY ring rows of the current stage
  // kTma: bit r, the parity of full[r]'s phase this thread waits for; kReleases: bit 16 + r, thread 0's of
  // done[r]
  uint32_t phases = 0;
  for (int tile = first; tile < last; ++tile) {
    const Tile adding = tile_at(tile);
    // for_slot_chunks skips images past the batch and columns past the output
    const bool adds = active && image < adding.images && (kSequence || adding.ow0 + c0 < out_w);
    for (int j = 0; j < stages(adding); ++j) {
      if constexpr (kReleases) {
        // Thread 0 copies stage j + kDepth - 1's rows once every warp has read those of the stage before
        // this one, which used the ring rows they reuse: the other warps go on without it (a block barrier
        // here was 14-18% of the warps' stall samples on the grouped tensor-core layers, H100, 2026-11-25).
        if (thread == 0) {
          const int before = (ring == 0 ? kRing : ring) - 1 + 16;
          mbarrier_wait(done + before - 16, phases >> before & 1);
          phases ^= 1u << before;
          issue_next();
        }
        mbarrier_wait(full + ring, phases >> ring & 1);  // stage j's rows have landed
        phases ^= 1u << ring;
      } else if constexpr (kTma) {
        __syncthreads();  // the ring row stage j + kDepth - 1 reuses is read
        issue_next();
        mbarrier_wait(full + ring, phases >> ring & 1);  // stage j's rows have landed
        phases ^= 1u << ring;
      } else {
        cp_async_wait<kDepth - 2>();  // this thread's copies of stage j
        __syncthreads();              // everyone's, and the ring row stage j + kDepth - 1 reuses is read
        issue_next();
      }
      if constexpr (kBand) {
        if (j & 1) {  // X rows (j - 1, j) against dY rows j - 4 w - i, i = g / 2 this lane's
          const uint32_t x_rows[2] = {ring_x_address + (ring == 0 ? kRing - 1 : ring - 1) * x_row_bytes,
                                      ring_x_address + ring * x_row_bytes};
          uint32_t g_rows[band_windows(TH)], g_masks[band_windows(TH)];
#pragma unroll
          for (int w = 0; w < band_windows(TH); ++w) {
            const int back = 4 * w + (lane >> 3), y = j - back, row = g_ring - back;
            g_rows[w] = ring_g_address + (row < 0 ? row + kGRing : row) * g_row_bytes;
            g_masks[w] = unsigned(y) < unsigned(adding.rows) ? ((lane & 4) ? 0xffff0000u : 0x0000ffffu) : 0u;
          }
          band_stage<T, TH>(band_acc, band_lanes, x_rows, g_rows, g_masks);
        }
      } else if constexpr (kMma) {
        if (mma_first < out_c)  // X row j against dY rows j - a
          mma_stage<T>(mma_acc, mma_rows, mma_lanes, ring_g_address + g_ring * g_row_bytes,
                       ring_x_address + ring * x_row_bytes, j, adding.rows);
      } else if (adds && adds_at(j) && (!kSequence || adding.ow0 + j * out_cols + c0 < out_w)) {
        const uint32_t* const g_row =
            ring_g + g_ring * g_row_words + (image * out_cols + c0) * kGroupedLanes + lane;
        Sums g[C];
#pragma unroll
        for (int i = 0; i < C; ++i) g[i] = unpack_stream(g_row[i * kGroupedLanes], T{});
#pragma unroll
        for (int a = 0; a < TH; ++a) {
          int row = ring - (TH - 1) + a;  // X row j - TH + 1 + a
          row += row < 0 ? kRing : 0;
          Sums w[kStride * (C - 1) + TW];
          if constexpr (kMultiplied) {  // the lane's X channel, once for its V channels
            const T* const x_row = reinterpret_cast<const T*>(ring_x + row * x_row_words +
                                                              image * x_image_words + c0 * x_words) +
                                   (lane * V >> m_shift);
#pragma unroll
            for (int u = 0; u < C + TW - 1; ++u) {
              const float value = to_float(x_row[u * (x_words * 4 / int(sizeof(T)))]);
#pragma unroll
              for (int v = 0; v < V; ++v) w[u].v[v] = value;
            }
          } else {
            const uint32_t* const x_row =
                ring_x + row * x_row_words + image * x_image_words + kStride * c0 * kGroupedLanes + lane;
#pragma unroll
            for (int u = 0; u < kStride * (C - 1) + TW; ++u)
              w[u] = unpack_stream(x_row[u * kGroupedLanes], T{});
          }
          if constexpr (kStride == 1) {
            grouped_row_products<TW>(w, g, acc[a]);
          } else {  // grouped_chunk's order: tap by tap, columns in turn
#pragma unroll
            for (int b = 0; b < TW; ++b)
#pragma unroll
              for (int i = 0; i < C; ++i) fma_into(acc[a][b], w[kStride * i + b], g[i]);
          }
        }
      }
      if constexpr (kReleases) {  // this warp has read stage j's rows
        __syncwarp();
        if (lane == 0) mbarrier_arrive(done + ring);
      }
      ring = ring + 1 == kRing ? 0 : ring + 1;
      g_ring = g_ring + 1 == kGRing ? 0 : g_ring + 1;
    }
  }
  if constexpr (!kTma) cp_async_wait<0>();
  float* const out = plan.split_output(dw, workspace, p.filter_elems(), problem, split);
  if constexpr (kBand) {  // each warp's own channels: no sums across warps
    band_store<TH, TW>(band_acc, lane, mma_first, p, t, out, plan.atomic);
    return;
  } else if constexpr (kMma) {
    // (the span from smem4's symbol, so that its loads and stores are the shared memory's own)
    float* const span = reinterpret_cast<float*>(smem4) + (ring_x - reinterpret_cast<uint32_t*>(smem4));
    mma_store(mma_acc, lane, slot, k0, out_c, int(p.group_c), span, out, plan.atomic);
    return;
  }
  __syncthreads();  // the ring is read: its memory takes the warps' partial taps

  // The warps' partial taps, added in the CPU executor's order, then stored channel by channel.
  float* const partial = reinterpret_cast<float*>(smem4);  // (kGroupedSlots - 1) x TH x TW x V x lanes
  auto at = [&](int s, int r, int j, int v) {
    return (((s * TH + r) * TW + j) * V + v) * kGroupedLanes + lane;
  };
  if (slot > 0) {
#pragma unroll
    for (int r = 0; r < TH; ++r)
#pragma unroll
      for (int j = 0; j < TW; ++j)
#pragma unroll
        for (int v = 0; v < V; ++v) partial[at(slot - 1, r, j, v)] = acc[r][j].v[v];
  }
  __syncthreads();
  if (slot != 0 || !active) return;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    float sums[TH][TW];
#pragma unroll
    for (int r = 0; r < TH; ++r)
#pragma unroll
      for (int j = 0; j < TW; ++j) {
        sums[r][j] = acc[r][j].v[v];
#pragma unroll
        for (int s = 0; s < kGroupedSlots - 1; ++s) sums[r][j] += partial[at(s, r, j, v)];
      }
    GroupedTask channel = t;
    channel.k += v;
    grouped_store<TW, TH>(p, channel, sums, out, [&](float* at, float v) { put_float(at, v, plan.atomic); });
  }
}

// dW = the compensated sum of the splits (winrs/reduction.h), Lanes threads per element, for every stacked
// problem; the CPU executor adds them in the same lanes and tree.
template <int Lanes>
__global__ void split_sum_kernel(float* filter_grad, const float* workspace, long long problems,
                                 long long dw_elems, long long splits) {
  const long long thread = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long element = thread / Lanes;  // over all problems
  const int lane = int(thread % Lanes);
  const bool active = element < problems * dw_elems;
  const long long problem = active ? element / dw_elems : 0, e = active ? element % dw_elems : 0;
  float* dw = filter_grad + problem * dw_elems;
  const float* ws = workspace + problem * (splits - 1) * dw_elems;
  auto partial = [&](long long s) { return s == 0 ? dw[e] : ws[(s - 1) * dw_elems + e]; };
  Compensated sum = lane_sum(partial, active ? splits : 0, lane, Lanes);
#pragma unroll
  for (int offset = Lanes / 2; offset > 0; offset /= 2) {
    const Compensated other{__shfl_down_sync(0xffffffffu, sum.sum, offset),
                            __shfl_down_sync(0xffffffffu, sum.error, offset)};
    if (lane < offset) sum = merge(sum, other);
  }
  if (active && lane == 0) dw[e] = sum.value();
}

cudaError_t launch_split_sum(const GroupedOp& op, float* filter_grad, const float* workspace,
                             cudaStream_t stream) {
  constexpr int kBlock = 256;
  const long long elements = op.stacked * op.problem.filter_elems();
  const int lanes = split_sum_lanes(op.plan.splits);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned((elements * lanes + kBlock - 1) / kBlock));
  config.blockDim = dim3(kBlock);
  config.stream = stream;
  return lanes == 32 ? cudaLaunchKernelEx(&config, split_sum_kernel<32>, filter_grad, workspace, op.stacked,
                                          op.problem.filter_elems(), op.plan.splits)
                     : cudaLaunchKernelEx(&config, split_sum_kernel<1>, filter_grad, workspace, op.stacked,
                                          op.problem.filter_elems(), op.plan.splits);
}

bool aligned_to(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// Whether the pipelined 16-bit kernel can run: a depthwise layer (one input channel per group, as many output
// channels) whose X and dY come in 16-byte channel runs at 16-byte aligned addresses, in every stacked
// problem.
template <typename T>
bool pipelines(const GroupedOp& op, const void* input, const void* out_grad) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    constexpr long long V = 16 / sizeof(T);
    const GroupedProblem& p = op.problem;
    return p.group_c == 1 && p.out_c == p.groups && p.in_c % V == 0 && p.out_c % V == 0 &&
           aligned_to(input, 16) && aligned_to(out_grad, 16) && op.input_stride % V == 0 &&
           op.grad_stride % V == 0;
  }
}

// The streaming kernel copies 16 bytes at a time: its plans' X and dY must be 16-byte aligned (XLA's buffers
// are; the planner's channel counts keep every pixel and stacked problem so).
bool stream_aligned(const void* input, const void* out_grad) {
  return aligned_to(input, 16) && aligned_to(out_grad, 16);
}

// The streaming kernel's launch: by TMA where the device runs the sm_90a code and the driver maps X and dY,
// else by cp.async. WINRS_JAX_STREAM_TMA=0 takes cp.async on sm_90a too (so that an H100 tests the form
// sm_80 to sm_89 run).
template <typename T, int TW, bool kMultiplied, StreamMath kMath = StreamMath::kFma, int kStride = 1,
          bool kSequence = false>
cudaError_t launch_streaming(const GroupedOp& op, const T* input, const T* out_grad, float* filter_grad,
                             float* workspace, long long count, cudaLaunchConfig_t config) {
  const GroupedProblem& p = op.problem;
  const GroupedPlan& plan = op.plan;
  StreamMaps maps = {};
  auto* kernel = grouped_streaming_kernel<T, TW, false, kMultiplied, kMath, kStride, kSequence>;
  const char* tma_flag = std::getenv("WINRS_JAX_STREAM_TMA");
  if (!(tma_flag && tma_flag[0] == '0') &&
      loads_sm90a(reinterpret_cast<const void*>(
          grouped_streaming_kernel<T, TW, true, kMultiplied, kMath, kStride, kSequence>))) {
    // Images of all `count` problems in one map where they follow each other (one where they share it).
    const long long x_images = op.input_stride == 0 ? p.batch : p.batch * count;
    const long long g_images = op.grad_stride == 0 ? p.batch : p.batch * count;
    const cuuint32_t channels = kGroupedLanes * stream_channels(sizeof(T));
    const cuuint32_t x_channels = kMultiplied ? channels / cuuint32_t(p.out_c / p.groups) : channels;
    const cuuint32_t x_box[4] = {x_channels, cuuint32_t(plan.x_cols), 1, 1};
    const cuuint32_t g_box[4] = {channels, cuuint32_t(plan.out_cols), 1, 1};
    const CUtensorMapSwizzle swizzle =
        kMath != StreamMath::kFma ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE;
    if (encode_boxes(&maps.x, input, sizeof(T), x_images, p.in_h, p.in_w, p.in_c, x_box, swizzle) &&
        encode_boxes(&maps.g, out_grad, sizeof(T), g_images, p.out_h, p.out_w, p.out_c, g_box, swizzle))
      kernel = grouped_streaming_kernel<T, TW, true, kMultiplied, kMath, kStride, kSequence>;
  }
  // Rings of 4x4 and 5x5 tiles take more than the 48 KiB a launch gets without asking.
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem_bytes));
      e != cudaSuccess)
    return e;
  return cudaLaunchKernelEx(&config, kernel, p, plan, input, out_grad, filter_grad, workspace,
                            static_cast<long long>(op.input_stride), static_cast<long long>(op.grad_stride),
                            maps);
}

// Stacked problems [first, first + count) in one launch (count x splits <= gridDim.z's 65535).
template <typename T>
cudaError_t launch_storage(const GroupedOp& op, const void* input, const void* out_grad, float* filter_grad,
                           float* workspace, long long first, long long count, cudaStream_t stream) {
  const GroupedProblem& p = op.problem;
  const GroupedPlan& plan = op.plan;
  const bool streaming = plan.streams;
  const bool pipelined = !streaming && pipelines<T>(op, input, out_grad);
  const T* const x = static_cast<const T*>(input) + first * op.input_stride;
  const T* const dy = static_cast<const T*>(out_grad) + first * op.grad_stride;
  filter_grad += first * p.filter_elems();
  workspace += first * plan.workspace_elems;
  return dispatch_grouped(p, plan, [&](auto tile_w, auto unit) {
    constexpr int TW = decltype(tile_w)::value;
    constexpr bool U = decltype(unit)::value;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(plan.channel_blocks), unsigned(plan.units), unsigned(count * plan.splits));
    config.blockDim = dim3(kGroupedLanes, kGroupedSlots);
    config.dynamicSmemBytes = size_t(plan.smem_bytes);
    config.stream = stream;
    if constexpr (U && streamable_tile(TW) && sizeof(T) == 2) {
      if (plan.band)
        return launch_streaming<T, TW, false, StreamMath::kBandMma>(op, x, dy, filter_grad, workspace, count,
                                                                    config);
    }
    if constexpr (U && TW == kMmaTileW && sizeof(T) == 2) {
      if (plan.tensor_cores) {
        config.gridDim.y = 1;  // a block takes all taps and input channels of its groups
        return launch_streaming<T, TW, false, StreamMath::kGroupMma>(op, x, dy, filter_grad, workspace, count,
                                                                     config);
      }
    }
    if (plan.tensor_cores) return cudaErrorInvalidValue;  // the planner's tensor-core layers: 16-bit, 3x3
    if constexpr (!U && streamable_strided_tile(TW)) {
      if (streaming)  // the planner streams strided layers at stride 2 in both directions
        return launch_streaming<T, TW, false, StreamMath::kFma, 2>(op, x, dy, filter_grad, workspace, count,
                                                                   config);
    }
    if constexpr (U && streamable_sequence_tile(TW)) {
      if (plan.sequence)
        return launch_streaming<T, TW, false, StreamMath::kFma, 1, true>(op, x, dy, filter_grad, workspace,
                                                                         count, config);
    }
    if (plan.sequence) return cudaErrorInvalidValue;  // the planner's 1D tiles: unit steps, 2 to 8 taps
    if constexpr (U && streamable_tile(TW)) {
      if (streaming)
        return p.out_c == p.groups
                   ? launch_streaming<T, TW, false>(op, x, dy, filter_grad, workspace, count, config)
                   : launch_streaming<T, TW, true>(op, x, dy, filter_grad, workspace, count, config);
    } else if (streaming) {
      return cudaErrorInvalidValue;  // the planner streams unit columns and streamable tiles only
    }
    auto* kernel = pipelined ? grouped_kernel<T, TW, U, sizeof(T) == 2> : grouped_kernel<T, TW, U, false>;
    return cudaLaunchKernelEx(&config, kernel, p, plan, x, dy, filter_grad, workspace,
                              static_cast<long long>(op.input_stride),
                              static_cast<long long>(op.grad_stride));
  });
}

template <typename T>
cudaError_t launch_all(const GroupedOp& op, const void* input, const void* out_grad, float* filter_grad,
                       float* workspace, cudaStream_t stream) {
  const long long per_launch = 65535 / op.plan.splits;
  for (long long first = 0; first < op.stacked; first += per_launch)
    if (cudaError_t e = launch_storage<T>(op, input, out_grad, filter_grad, workspace, first,
                                          std::min(per_launch, op.stacked - first), stream);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

}  // namespace

cudaError_t run_grouped(const GroupedOp& op, const void* input, const void* out_grad, float* filter_grad,
                        float* workspace, cudaStream_t stream, const char** stage) {
  *stage = "grouped kernel launch";
  if (op.plan.streams && !stream_aligned(input, out_grad)) {
    *stage = "grouped kernel launch (the streaming kernel needs 16-byte aligned X and dY)";
    return cudaErrorMisalignedAddress;
  }
  if (op.plan.atomic) {
    *stage = "filter gradient reset";  // the splits add into it as they finish
    if (cudaError_t e = cudaMemsetAsync(
            filter_grad, 0, sizeof(float) * size_t(op.stacked * op.problem.filter_elems()), stream);
        e != cudaSuccess)
      return e;
  }
  cudaError_t e = cudaSuccess;
  switch (path_info(op.plan.path).storage) {
    case Storage::kBF16:
      e = launch_all<__nv_bfloat16>(op, input, out_grad, filter_grad, workspace, stream);
      break;
    case Storage::kF16:
      e = launch_all<__half>(op, input, out_grad, filter_grad, workspace, stream);
      break;
    default:
      e = launch_all<float>(op, input, out_grad, filter_grad, workspace, stream);
  }
  if (e != cudaSuccess || op.plan.splits == 1 || op.plan.atomic) return e;
  *stage = "split reduction launch";
  return launch_split_sum(op, filter_grad, workspace, stream);
}

}  // namespace winrs::cuda
