// The filter gradient of grouped and depthwise layers by direct summation (issue 9): a layer with few input
// channels per group has no GEMM across channels worth transforming, so each output channel's taps are summed
// directly over the batch, rows and columns in FP32 registers, with strides, dilation and padding read in
// place (no copies of X or dY). Written once for the CPU executor and the CUDA kernel: the problem, the plan
// (which thread sums what), and the per-thread summation.
//
// dW[k, i, j, c] = sum over n, oh, ow of X_padded[n, oh s_h + i d_h, ow s_w + j d_w, g C_g + c] dY[n, oh, ow,
// k], g = k / K_g, for K output channels in G groups of K_g, C_g input channels per group.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "config.h"
#include "paths.h"

namespace winrs {

struct GroupedProblem {
  int64_t batch, in_h, in_w, in_c;      // X: N x H x W x C (storage type)
  int64_t out_h, out_w, out_c;          // dY: N x OH x OW x K (storage type)
  int64_t filter_h, filter_w, group_c;  // dW: K x FH x FW x C_g (float32)
  int64_t groups;                       // G; K_g = K / G output channels share one group's C_g inputs
  int64_t pad_top, pad_left;            // may be negative (lax crops then)
  int64_t stride_h, stride_w, dilation_h, dilation_w;

  WINRS_HD int64_t filter_elems() const { return out_c * filter_h * filter_w * group_c; }
  WINRS_HD int64_t input_elems() const { return batch * in_h * in_w * in_c; }
  WINRS_HD int64_t grad_elems() const { return batch * out_h * out_w * out_c; }
};

// Compile-time shape of one thread's work: it sums a tile of kTileRows(TW) x TW filter taps of one output
// channel and one input channel of its group, over output columns in chunks of kGroupedChunk (the dY values
// of a chunk stay in registers for every tap of the tile; with unit column stride and dilation, so does the
// window of X the chunk meets).
inline constexpr int kGroupedChunk = 8;
inline constexpr int kGroupedMaxTileW = 8;
WINRS_HD constexpr int grouped_tile_rows(int tile_w) {
  return tile_w <= 2 ? 8 : tile_w == 6 || tile_w == 8 ? 4 : tile_w;  // square tiles for 3x3, 5x5 and 7x7
}
// CUDA block: 32 consecutive output channels (one warp, coalesced NHWC loads) x kGroupedSlots warps that take
// interleaved chunks of the same rows and sum their partial taps in a fixed order.
inline constexpr int kGroupedLanes = 32, kGroupedSlots = 4;

// Plain numbers only: the kernel takes it by value.
struct GroupedPlan {
  Path path = Path::kFp32;     // storage type of X and dY; the arithmetic is always FP32 FMA
  int tile_w = 0, tile_h = 0;  // taps per thread (the kernel instance: tile_w)
  int64_t tiles_h = 0, tiles_w = 0;
  int64_t units = 0;           // tiles_h x tiles_w x C_g thread tasks per output channel
  int64_t channel_blocks = 0;  // ceil(K / kGroupedLanes)
  int64_t chunks_w = 0;        // ceil(OW / kGroupedChunk)
  int64_t items = 0;           // N x OH x chunks_w column chunks to sum over
  int64_t splits = 0;  // the items are split into this many parts, each its own partial dW: the first is
                       // dW itself, the others the workspace, summed like WinRS's buckets (reduction.h)
  int64_t workspace_elems = 0;  // per stacked problem: (splits - 1) x |dW|
  double predicted_seconds = 0;

  WINRS_HD int64_t workers() const { return splits * kGroupedSlots; }
};

struct GroupedOp {
  GroupedProblem problem;
  GroupedPlan plan;
  int64_t stacked = 1;  // independent problems on leading axes (vmap), as BackwardFilterOp's groups
  int64_t input_stride = 0, grad_stride = 0;  // elements between stacked problems' X and dY; 0 when shared

  int64_t workspace_elems() const { return stacked * plan.workspace_elems; }
};

struct GroupedShapes {
  int64_t input[4];        // N x H x W x C
  int64_t out_grad[4];     // N x OH x OW x K
  int64_t filter_grad[4];  // K x FH x FW x C_g
  int64_t pads[4];         // top, bottom, left, right
  int64_t strides[2], dilation[2];
  int64_t groups = 1;
  int64_t stacked = 1;
  bool input_shared = false, grad_shared = false;
};

struct GroupedOptions {
  Path path = Path::kFp32;
  int sm_count = 132;
  int64_t splits = 0;  // > 0 forces the split count (tests)
};

// can_implement and initialise in one: "" when the direct kernels can run the problem, else the reason.
std::string make_grouped(const GroupedShapes& shapes, const GroupedOptions& options, GroupedOp* op);

// Where one thread's task starts: output channel k's taps (kh0.., kw0..) with input channel c of its group.
struct GroupedTask {
  int64_t k, c;  // output channel, input channel within the group
  int64_t kh0, kw0;
};

WINRS_HD inline GroupedTask grouped_task(const GroupedProblem& p, const GroupedPlan& plan, int64_t k,
                                         int64_t unit) {
  const int64_t c = unit % p.group_c, tile = unit / p.group_c;
  return {k, c, (tile / plan.tiles_w) * plan.tile_h, (tile % plan.tiles_w) * plan.tile_w};
}

// Adds to acc the products of task t over the worker's share of the column chunks: a contiguous range of
// plan.items, walked row by row (so that one warp meets the same X rows again while they are in L1). Loads
// are bounds-checked only where a chunk's window crosses the padding or the edge. Elem::get(pointer, index)
// reads one storage element as a float; the CPU and the kernel supply their own. Taps beyond the filter (the
// last tile's) are summed too and never written.
template <int TW, bool kUnitColumns, typename Elem, typename T>
WINRS_HD void grouped_sum(const GroupedProblem& p, const GroupedPlan& plan, const T* x, const T* dy,
                          const GroupedTask& t, int64_t worker, float (&acc)[grouped_tile_rows(TW)][TW]) {
  constexpr int TH = grouped_tile_rows(TW), C = kGroupedChunk, U = C + TW - 1;
  const int64_t x_channel = (t.k / (p.out_c / p.groups)) * p.group_c + t.c;
  const int64_t begin = worker * plan.items / plan.workers(),
                end = (worker + 1) * plan.items / plan.workers();
  int64_t chunk = begin % plan.chunks_w, oh = (begin / plan.chunks_w) % p.out_h;
  int64_t n = begin / plan.chunks_w / p.out_h;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t ow0 = chunk * C;
    const T* dy_row = dy + ((n * p.out_h + oh) * p.out_w) * p.out_c + t.k;
    float g[C];
    if (ow0 + C <= p.out_w) {
      WINRS_UNROLL
      for (int i = 0; i < C; ++i) g[i] = Elem::get(dy_row, (ow0 + i) * p.out_c);
    } else {
      WINRS_UNROLL
      for (int i = 0; i < C; ++i) g[i] = ow0 + i < p.out_w ? Elem::get(dy_row, (ow0 + i) * p.out_c) : 0.0f;
    }
    WINRS_UNROLL
    for (int r = 0; r < TH; ++r) {
      const int64_t kh = t.kh0 + r, ih = oh * p.stride_h + kh * p.dilation_h - p.pad_top;
      if (kh >= p.filter_h || ih < 0 || ih >= p.in_h) continue;
      const T* x_row = x + ((n * p.in_h + ih) * p.in_w) * p.in_c + x_channel;
      if constexpr (kUnitColumns) {
        // X columns first + u, u < C + TW - 1: tap j meets X[first + i + j] with dY[ow0 + i].
        const int64_t first = ow0 + t.kw0 - p.pad_left;
        float w[U];
        if (first >= 0 && first + U <= p.in_w) {
          WINRS_UNROLL
          for (int u = 0; u < U; ++u) w[u] = Elem::get(x_row, (first + u) * p.in_c);
        } else {
          WINRS_UNROLL
          for (int u = 0; u < U; ++u)
            w[u] = first + u >= 0 && first + u < p.in_w ? Elem::get(x_row, (first + u) * p.in_c) : 0.0f;
        }
        WINRS_UNROLL
        for (int j = 0; j < TW; ++j) {
          WINRS_UNROLL
          for (int i = 0; i < C; ++i) acc[r][j] = fmaf(w[i + j], g[i], acc[r][j]);
        }
      } else {
        // Tap j meets X[(ow0 + i) s_w + (kw0 + j) d_w - pad_left] with dY[ow0 + i].
        const int64_t first = ow0 * p.stride_w + t.kw0 * p.dilation_w - p.pad_left;
        const int64_t last = first + (C - 1) * p.stride_w + (TW - 1) * p.dilation_w;
        const bool inside = first >= 0 && last < p.in_w;
        WINRS_UNROLL
        for (int j = 0; j < TW; ++j) {
          WINRS_UNROLL
          for (int i = 0; i < C; ++i) {
            const int64_t iw = first + i * p.stride_w + j * p.dilation_w;
            const float v = inside || (iw >= 0 && iw < p.in_w) ? Elem::get(x_row, iw * p.in_c) : 0.0f;
            acc[r][j] = fmaf(v, g[i], acc[r][j]);
          }
        }
      }
    }
    if (++chunk == plan.chunks_w) {
      chunk = 0;
      if (++oh == p.out_h) {
        oh = 0;
        ++n;
      }
    }
  }
}

// Stores a task's summed taps at dW (K x FH x FW x C_g) or at a split's partial dW of the same layout.
template <int TW>
WINRS_HD void grouped_store(const GroupedProblem& p, const GroupedTask& t,
                            const float (&acc)[grouped_tile_rows(TW)][TW], float* dw) {
  WINRS_UNROLL
  for (int r = 0; r < grouped_tile_rows(TW); ++r) {
    WINRS_UNROLL
    for (int j = 0; j < TW; ++j) {
      const int64_t kh = t.kh0 + r, kw = t.kw0 + j;
      if (kh < p.filter_h && kw < p.filter_w)
        dw[((t.k * p.filter_h + kh) * p.filter_w + kw) * p.group_c + t.c] = acc[r][j];
    }
  }
}

// Calls f(std::integral_constant<int, TW>, std::bool_constant<kUnitColumns>) with the plan's kernel instance:
// the CPU executor and the CUDA launcher instantiate the same set.
template <typename F>
auto dispatch_grouped(const GroupedProblem& p, const GroupedPlan& plan, F&& f) {
  const bool unit = p.stride_w == 1 && p.dilation_w == 1;
  auto with_tile = [&](auto tile_w) {
    return unit ? f(tile_w, std::true_type{}) : f(tile_w, std::false_type{});
  };
  switch (plan.tile_w) {
    case 1:
      return with_tile(std::integral_constant<int, 1>{});
    case 2:
      return with_tile(std::integral_constant<int, 2>{});
    case 3:
      return with_tile(std::integral_constant<int, 3>{});
    case 4:
      return with_tile(std::integral_constant<int, 4>{});
    case 5:
      return with_tile(std::integral_constant<int, 5>{});
    case 6:
      return with_tile(std::integral_constant<int, 6>{});
    case 7:
      return with_tile(std::integral_constant<int, 7>{});
    default:
      return with_tile(std::integral_constant<int, 8>{});
  }
}

}  // namespace winrs
