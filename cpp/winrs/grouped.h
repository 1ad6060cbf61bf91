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

// Compile-time shape of one thread's work: it sums a tile of grouped_tile_rows(TW) x TW filter taps of one
// output channel and one input channel of its group, over output columns in chunks of kGroupedChunk (the dY
// values of a chunk stay in registers for every tap of the tile; with unit column stride and dilation, so
// does the window of X the chunk meets).
inline constexpr int kGroupedChunk = 8;
inline constexpr int kGroupedMaxTileW = 8;
WINRS_HD constexpr int grouped_tile_rows(int tile_w) {
  return tile_w <= 2 ? 8 : tile_w == 6 || tile_w == 8 ? 4 : tile_w;  // square tiles for 3x3, 5x5 and 7x7
}
// CUDA block: 32 consecutive output channels (one warp) x kGroupedSlots warps. The block walks a range of
// spatial tiles (out_rows x out_cols outputs of one image); for each it stages the tile's dY and the X window
// its taps meet in shared memory (each element read from memory once, zeros for padding), and its warps share
// the tile's column chunks. The warps' partial taps are added in a fixed order.
inline constexpr int kGroupedLanes = 32, kGroupedSlots = 4;
inline constexpr int64_t kGroupedMaxSmemBytes = 48 * 1024;

// The streaming CUDA kernel (depthwise layers, streamable_multiplier below): a thread takes
// kStreamBytes / sizeof(storage) consecutive channels, so that a warp reads one 128-byte line of a pixel's
// channels; a warp walks a column of 8 outputs down tiles of kStreamRows rows (stream_tile_cols). The block
// copies the tiles' X and dY rows (16-byte channel runs) into a ring of stream_ring_rows shared-memory rows,
// kStreamDepth - 1 rows ahead of the one its warps add, so each X and dY row is read from memory once per
// tile.
//
// 1D layers (a row of 1 x TW taps, plan.sequence) stream too: a tile's rows follow each other along the one
// row, out_cols positions apart (tile_offset), so that a tile is out_rows x out_cols consecutive positions
// and each stage one X row of out_cols + TW - 1 positions and one dY row of out_cols. Their stages are small
// (about 8 KB) and memory bound: the ring keeps kSequenceDepth - 1 of them in flight.
inline constexpr int kStreamBytes = 4, kStreamRows = 16, kStreamDepth = 3;
inline constexpr int kSequenceRows = 8, kSequenceDepth = 5;
WINRS_HD constexpr int stream_channels(int storage_bytes) { return kStreamBytes / storage_bytes; }
// Channels of one 16-byte copy: the streaming kernel's layers have a multiple of it.
WINRS_HD constexpr int stream_piece_channels(int storage_bytes) { return 16 / storage_bytes; }
// Stages in the ring (tile_h 1: a 1D layer's; 2D layers stream 3x3 to 7x7 tap tiles).
WINRS_HD constexpr int stream_depth(int tile_h) { return tile_h == 1 ? kSequenceDepth : kStreamDepth; }
// X ring rows: the TH X rows a row of outputs meets, and those of the stream_depth - 1 rows in flight (dY's
// ring: stream_depth rows).
WINRS_HD constexpr int stream_ring_rows(int tile_h) { return tile_h + stream_depth(tile_h) - 1; }
// Resident blocks per SM its registers allow (the kernel's launch bounds), and the shared memory an H100 SM
// gives blocks (228 KiB, 1 KiB of it reserved per block).
WINRS_HD constexpr int stream_blocks_per_sm(int tile_h, int tile_w) {
  return tile_h == 1 ? 6 : tile_w == 3 ? 6 : tile_w == 4 ? 4 : 3;
}
inline constexpr int64_t kStreamSmemPerSm = 228 * 1024, kStreamSmemPerBlock = 1024;
// Channel multipliers it takes: 1, or a power of two up to 8 that keeps a thread's channels on one input
// channel (so a block's input channels still come in 16-byte runs); X ring rows are padded to 128 bytes, as
// TMA's destinations must be.
WINRS_HD constexpr bool streamable_multiplier(int64_t multiplier, int64_t per_thread) {
  return multiplier == 1 ||
         (multiplier >= per_thread && multiplier <= 8 && (multiplier & (multiplier - 1)) == 0);
}
// Tap tiles it takes: square, 3x3 to 7x7 (its lanes keep the tile's sums in registers).
WINRS_HD constexpr bool streamable_tile(int tile_w) {
  return tile_w >= 3 && tile_w <= 7 && grouped_tile_rows(tile_w) == tile_w;
}
// ... and 1D layers in tap tiles of 2 to 8 (Mamba's causal k = 4 in one; Conformer's 31 in four of 8).
WINRS_HD constexpr bool streamable_sequence_tile(int tile_w) {
  return tile_w >= 2 && tile_w <= kGroupedMaxTileW;
}
// Tap tiles it takes at stride 2 (in both directions, multiplier 1): 3x3 and 5x5.
WINRS_HD constexpr bool streamable_strided_tile(int tile_w) { return tile_w == 3 || tile_w == 5; }
// The streaming kernel on tensor cores (grouped layers of 2 to 16 channels per group, as many in as out, in
// 16-bit, 3x3 filters: ResNeXt's and RegNet's): each warp takes 16 of the block's 64 channels and adds, per
// tap, the 16 x 16 product of their dY and X over a ring row's 32 pixels by mma.sync (m16n8k16, float32
// accumulators), keeping the entries whose channels share a group (all of them at 16 per group, half at 8).
// Its copies run kMmaDepth - 1 rows ahead (2, 4: alike on the H100; its warps' chains of loads and MMAs bound
// it, not the copies' latency).
inline constexpr int kMmaSliceChannels = 16, kMmaTileW = 3, kMmaBlocksPerSm = 3, kMmaDepth = 5;
inline constexpr int kMmaBlockChannels = kMmaSliceChannels * kGroupedSlots;  // a block's slices
WINRS_HD constexpr bool mma_group_channels(int64_t group_c) {
  return group_c == 2 || group_c == 4 || group_c == 8 || group_c == 16;
}
// Its ring rows: each image's X pixels from a 1024-byte boundary (the period of the 128-byte swizzle that
// makes ldmatrix's reads of 8 pixels' channels hit distinct banks); and its shared memory: the rows, 1024
// bytes to align them, and the barriers.
WINRS_HD constexpr int64_t mma_x_image_bytes(int64_t x_cols) { return (x_cols * 128 + 1023) / 1024 * 1024; }
WINRS_HD constexpr int64_t mma_ring_bytes(int64_t x_cols, int64_t out_cols, int64_t images) {
  return images * kMmaDepth * (mma_x_image_bytes(x_cols) + out_cols * 128) + 1024 + kMmaDepth * 16;
}
// The block's span of dW in float32, which the rings' memory takes at the end (64 channels x 3 x 3 x 16 at
// most): below the barriers for every tile of 32 pixel slots (8, 16 or 32 columns an image).
inline constexpr int64_t kMmaSpanBytes = int64_t(kMmaBlockChannels) * kMmaTileW * kMmaTileW * 16 * 4;
static_assert(mma_ring_bytes(10, 8, 4) > kMmaSpanBytes + 1024 &&
              mma_ring_bytes(18, 16, 2) > kMmaSpanBytes + 1024 &&
              mma_ring_bytes(34, 32, 1) > kMmaSpanBytes + 1024);
// Depthwise layers on tensor cores (the band kernel: 16-bit, multiplier 1, unit steps, square tap tiles of up
// to 7x7; the planner takes it for 7x7 filters, where it is faster than CUDA cores, and for larger ones in
// tap tiles of 7x7, each a unit of blocks). Per channel, dW[kh][kw] sums the products of X row x and dY row y
// = x - kh, their columns kw apart: the row pairs of a tile form a band kh in [0, TH). One mma.sync m16n8k16
// takes 2 X rows x 8 column shifts (M) against 2 channels x 4 dY rows (N) over 8 dY columns (K, each register
// one pixel's two 16-bit channels): X's words go in as they are and dY's are masked to one channel per N
// column, so half of K's products are zeros (7x7: 38% of the MMA's products are taps, and no transposes of
// the NHWC rows). Stage j of a tile copies X row j and dY row j (dY leads, unlike the other streaming forms);
// X rows (j - 1, j) are added at odd j against dY rows j - 4 w - i, i < 4, of band_windows windows w. A warp
// takes 16 of the block's 64 channels (8 pairs) over every column of the tile. Three blocks per SM (72 KiB of
// rings at 7x7): on 7x7 64:28:256 the kernel is bound by its shared-memory loads (each dY row is loaded for 4
// pairs of X rows; L1 51% busy) and their latency at 8 to 12 warps per SM; copies 6 rows ahead timed alike.
inline constexpr int kBandDepth = 4, kBandPairs = 8, kBandBlocksPerSm = 3;
inline constexpr int kBandTile = 7;  // the tap tile it takes (7x7; up to 8 columns would fit the MMA's rows)
WINRS_HD constexpr int band_windows(int tile_h) { return (tile_h + 4) / 4; }  // 4 w >= TH + 1 dY rows
// Ring rows: X's pair and dY's windows, each with the kBandDepth - 1 rows in flight.
WINRS_HD constexpr int band_x_rows() { return kBandDepth + 1; }
WINRS_HD constexpr int band_g_rows(int tile_h) { return 4 * band_windows(tile_h) + kBandDepth - 1; }
WINRS_HD constexpr int64_t band_ring_bytes(int64_t x_cols, int64_t out_cols, int64_t images, int tile_h) {
  return images * (band_x_rows() * mma_x_image_bytes(x_cols) + band_g_rows(tile_h) * out_cols * 128) + 1024 +
         band_x_rows() * 16;
}
// Its tiles' columns: every warp a column of 8 outputs, so maps of 16 columns or less put 32 / out_cols
// images side by side in a tile (14x14 and 7x7 maps: 2 and 4 images), rather than leave warps idle.
WINRS_HD constexpr int64_t stream_tile_cols(int64_t out_w) { return out_w > 16 ? 32 : out_w > 8 ? 16 : 8; }

// Plain numbers only: the kernel takes it by value.
struct GroupedPlan {
  Path path = Path::kFp32;     // storage type of X and dY; the arithmetic is always FP32 FMA
  int tile_w = 0, tile_h = 0;  // taps per thread (the kernel instance: tile_w)
  int64_t tiles_h = 0, tiles_w = 0;
  int64_t units = 0;           // tiles_h x tiles_w x C_g thread tasks per output channel
  bool streams = false;        // the GPU runs the streaming kernel (above)
  bool sequence = false;       // ... along a 1D layer's row (tile_offset; implies streams)
  bool tensor_cores = false;   // ... on tensor cores (implies streams)
  bool band = false;           // ... depthwise, by the band kernel (implies tensor_cores; 7x7 tap tiles)
  int64_t channel_blocks = 0;  // ceil(K / (kGroupedLanes x channels per thread))
  // Spatial tiles: out_rows x out_cols outputs (out_cols a multiple of kGroupedChunk) of each of tile_images
  // consecutive images (more than one only when streaming) meet x_rows x x_cols inputs of each; tiles_oh x
  // tiles_ow of them per image, `tiles` in all.
  int64_t out_rows = 0, out_cols = 0, x_rows = 0, x_cols = 0;
  int64_t tile_images = 1;
  int64_t tiles_oh = 0, tiles_ow = 0, tiles = 0;
  int64_t splits = 0;  // the tiles are split into this many ranges, each its own partial dW: the first is dW
                       // itself, the others the workspace, added at the end (reduction.h); or, atomic, each
                       // added into dW as it finishes
  // Splits add into a zeroed dW (GPU: atomic adds, in any order; CPU: in split order) where the options ask
  // and dW has kAtomicElemsPerSplit elements a split (grouped.cc).
  bool atomic = false;
  int64_t workspace_elems = 0;  // per stacked problem: (splits - 1) x |dW|, 0 when atomic
  int64_t smem_bytes = 0;       // float32 staging of one tile's X window and dY, kGroupedLanes channels (the
                                // streaming kernel: its ring of X and dY rows, or its warps' partial taps)
  double predicted_seconds = 0;

  WINRS_HD int64_t chunks_per_tile() const { return out_rows * tile_images * (out_cols / kGroupedChunk); }
  // Where split `split` of stacked problem `problem` puts its sums: dW itself (the first split, or every
  // split when atomic), else its partial dW in the workspace.
  WINRS_HD float* split_output(float* dw, float* workspace, int64_t dw_elems, int64_t problem,
                               int64_t split) const {
    return split == 0 || atomic ? dw + problem * dw_elems
                                : workspace + problem * workspace_elems + (split - 1) * dw_elems;
  }
  // Split s's first tile: the first tiles % splits splits take one tile more. Index: int64_t, or int in the
  // kernels (the planner keeps tiles in 32 bits: 64-bit divisions were a fifth of a one-tile block's
  // instructions).
  template <typename Index = int64_t>
  WINRS_HD Index first_tile(Index split) const {
    const Index per = Index(tiles) / Index(splits), more = Index(tiles) % Index(splits);
    return split * per + (split < more ? split : more);
  }
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
  int64_t splits = 0;   // > 0 forces the split count (tests)
  bool atomic = false;  // splits may add into dW as they finish (GroupedPlan::atomic), not in a fixed order
};

// can_implement and initialise in one: "" when the direct kernels can run the problem, else the reason.
std::string make_grouped(const GroupedShapes& shapes, const GroupedOptions& options, GroupedOp* op);

// Where one thread's task starts: output channel k's taps (kh0.., kw0..) with input channel c of its group.
struct GroupedTask {
  int64_t k, c;  // output channel, input channel within the group
  int64_t kh0, kw0;
  int taps_h;  // rows of the tile inside the filter
};

// (Index: as GroupedPlan::first_tile's.)
template <typename Index = int64_t>
WINRS_HD GroupedTask grouped_task(const GroupedProblem& p, const GroupedPlan& plan, Index k, Index unit) {
  const Index c = unit % Index(p.group_c), tile = unit / Index(p.group_c);
  const Index tiles_w = Index(plan.tiles_w), kh0 = (tile / tiles_w) * plan.tile_h;
  const int64_t taps_h = p.filter_h - kh0 < plan.tile_h ? p.filter_h - kh0 : plan.tile_h;
  return {k, c, kh0, (tile % tiles_w) * plan.tile_w, int(taps_h)};
}

WINRS_HD inline int64_t grouped_x_channel(const GroupedProblem& p, const GroupedTask& t) {
  return (t.k / (p.out_c / p.groups)) * p.group_c + t.c;
}

// Where spatial tile `tile` starts: its first image, first output row and column, and the first X row and
// column of the window that task t's taps meet (may lie in the padding).
struct GroupedTileOrigin {
  int64_t n, oh, ow, ih, iw;
};

// (Index: as GroupedPlan::first_tile's.)
template <typename Index = int64_t>
WINRS_HD GroupedTileOrigin grouped_tile_origin(const GroupedProblem& p, const GroupedPlan& plan,
                                               const GroupedTask& t, Index tile) {
  const Index tiles_ow = Index(plan.tiles_ow), tiles_oh = Index(plan.tiles_oh);
  const int64_t ow = (tile % tiles_ow) * plan.out_cols * (plan.sequence ? plan.out_rows : 1);
  const Index rows = tile / tiles_ow;
  const int64_t oh = (rows % tiles_oh) * plan.out_rows, n = rows / tiles_oh * plan.tile_images;
  return {n, oh, ow, oh * p.stride_h + t.kh0 * p.dilation_h - p.pad_top,
          ow * p.stride_w + t.kw0 * p.dilation_w - p.pad_left};
}

// Where row `row`, column `col` of a spatial tile (its outputs, or the X window they meet at unit steps) lies
// from the tile's origin: on 2D maps where it says; on a streamed 1D layer (plan.sequence) the tile's rows
// follow each other along the one row, out_cols apart.
struct TileOffset {
  int64_t row, col;
};
WINRS_HD inline TileOffset tile_offset(const GroupedPlan& plan, int64_t row, int64_t col) {
  return plan.sequence ? TileOffset{0, row * plan.out_cols + col} : TileOffset{row, col};
}

// The sums of V consecutive output channels, each as one float would be summed.
template <int V>
struct ChannelSums {
  float v[V];
};
WINRS_HD inline void fma_into(float& acc, float x, float g) { acc = fmaf(x, g, acc); }
template <int V>
WINRS_HD void fma_into(ChannelSums<V>& acc, const ChannelSums<V>& x, const ChannelSums<V>& g) {
  WINRS_UNROLL
  for (int i = 0; i < V; ++i) acc.v[i] = fmaf(x.v[i], g.v[i], acc.v[i]);
}

// One filter row's taps over one chunk at unit column stride and dilation: tap j meets X column q C + i + j
// (w[i + j]) with dY column q C + i (g[i]), added in order of i.
template <int TW, typename Value>
WINRS_HD void grouped_row_products(const Value (&w)[kGroupedChunk + TW - 1], const Value (&g)[kGroupedChunk],
                                   Value (&acc)[TW]) {
  WINRS_UNROLL
  for (int j = 0; j < TW; ++j) {
    WINRS_UNROLL
    for (int i = 0; i < kGroupedChunk; ++i) fma_into(acc[j], w[i + j], g[i]);
  }
}

// Adds to acc the products of one column chunk of a spatial tile: output row r and columns q C .. q C + C - 1
// of the tile, with every tap of task t. x_at(row, col) reads the tile's X window and g_at(row, col) its dY,
// both zero outside the arrays; the CPU reads memory, the staging kernels shared memory, the streaming kernel
// memory (Value: float, or ChannelSums for its channels).
template <int TW, bool kUnitColumns, typename Value, typename XAt, typename GAt>
WINRS_HD void grouped_chunk(const GroupedProblem& p, const GroupedTask& t, int64_t r, int64_t q,
                            const XAt& x_at, const GAt& g_at, Value (&acc)[grouped_tile_rows(TW)][TW]) {
  constexpr int TH = grouped_tile_rows(TW), C = kGroupedChunk, U = C + TW - 1;
  Value g[C];
  WINRS_UNROLL
  for (int i = 0; i < C; ++i) g[i] = g_at(r, q * C + i);
  WINRS_UNROLL
  for (int a = 0; a < TH; ++a) {
    if (a >= t.taps_h) break;
    const int64_t row = r * p.stride_h + a * p.dilation_h;
    if constexpr (kUnitColumns) {
      Value w[U];
      WINRS_UNROLL
      for (int u = 0; u < U; ++u) w[u] = x_at(row, q * C + u);
      grouped_row_products(w, g, acc[a]);
    } else {
      WINRS_UNROLL
      for (int j = 0; j < TW; ++j) {
        WINRS_UNROLL
        for (int i = 0; i < C; ++i)
          fma_into(acc[a][j], x_at(row, (q * C + i) * p.stride_w + j * p.dilation_w), g[i]);
      }
    }
  }
}

// The chunks of a spatial tile that warp `slot` adds, in order: slot, slot + kGroupedSlots, ..., a row of
// chunks being each image's out_cols / kGroupedChunk in turn; f(image, r, q) for image `image` of the tile,
// output row r, column chunk q, skipping those wholly outside the output (rows stepped, not divided: the
// kernels call it per chunk).
template <typename F>
WINRS_HD void for_slot_chunks(const GroupedProblem& p, const GroupedPlan& plan, const GroupedTileOrigin& o,
                              int slot, F&& f) {
  const int per_image = int(plan.out_cols / kGroupedChunk), per_row = per_image * int(plan.tile_images);
  const int rows = int(plan.out_rows);
  int r = slot / per_row, q = slot % per_row;
  for (; r < rows; q += kGroupedSlots) {
    while (q >= per_row) q -= per_row, ++r;
    const int image = q / per_image, column = q % per_image;
    const TileOffset at = tile_offset(plan, r, column * kGroupedChunk);
    if (r < rows && o.n + image < p.batch && o.oh + at.row < p.out_h && o.ow + at.col < p.out_w)
      f(image, r, column);
  }
}

// Puts a task's summed taps into dW (K x FH x FW x C_g) or a split's partial dW of the same layout:
// put(address, value) stores, or adds for splits that add into dW (plan.atomic).
template <int TW, int TH = grouped_tile_rows(TW), typename Put>
WINRS_HD void grouped_store(const GroupedProblem& p, const GroupedTask& t, const float (&acc)[TH][TW],
                            float* dw, const Put& put) {
  WINRS_UNROLL
  for (int r = 0; r < TH; ++r) {
    WINRS_UNROLL
    for (int j = 0; j < TW; ++j) {
      const int64_t kh = t.kh0 + r, kw = t.kw0 + j;
      if (kh < p.filter_h && kw < p.filter_w)
        put(dw + ((t.k * p.filter_h + kh) * p.filter_w + kw) * p.group_c + t.c, acc[r][j]);
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
