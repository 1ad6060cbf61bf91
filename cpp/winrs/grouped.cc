#include "grouped.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace winrs {
namespace {

constexpr int64_t kMaxGrid = 65535;  // gridDim.y and gridDim.z (the launcher splits stacked problems)
// Blocks per SM the split count aims for (16 resident blocks of 128 threads fill an SM; registers and shared
// memory allow fewer), and the least spatial tiles a split should sum.
constexpr int64_t kBlocksPerSm = 12, kMinTilesPerSplit = 2;
// Least dW elements per split whose splits add into dW atomically (below: the fixed-order sum).
constexpr int64_t kAtomicElemsPerSplit = 16;
// Workspace cap: the partial dWs of all splits, in float32 elements (64 MiB).
constexpr int64_t kMaxWorkspaceElems = int64_t(16) << 20;
// Throughputs of the cost model (H100 SXM, 132 SMs): FP32 FMA at about half of the 67 TFLOP/s peak (the
// kernel issues a load per 2 to 8 FMAs), and HBM.
constexpr double kFlops = 30e12, kBytesPerSecond = 3.0e12;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string make_grouped(const GroupedShapes& s, const GroupedOptions& options, GroupedOp* op) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (options.path != Path::kFp32 && options.path != Path::kBf16 && options.path != Path::kFp16)
    return "the direct grouped kernels read float32, bfloat16 or float16 (paths fp32, bf16, fp16)";
  for (int i = 0; i < 4; ++i)
    if (s.input[i] < 1 || s.out_grad[i] < 1 || s.filter_grad[i] < 1 || s.input[i] > kIntMax ||
        s.out_grad[i] > kIntMax || s.filter_grad[i] > kIntMax)
      return "every dimension must be between 1 and 2^31 - 1";
  if (s.groups < 1 || s.input[3] % s.groups != 0 || s.out_grad[3] % s.groups != 0)
    return "input and output channels must be multiples of the group count";
  if (s.filter_grad[3] * s.groups != s.input[3])
    return "filter gradient's input channels times the groups must equal the input's channels";
  if (s.input[0] != s.out_grad[0]) return "input and output gradient have different batch sizes";
  if (s.filter_grad[0] != s.out_grad[3])
    return "filter gradient and output gradient have different output channels";
  for (int64_t v : {s.strides[0], s.strides[1], s.dilation[0], s.dilation[1]})
    if (v < 1 || v > kIntMax) return "strides and dilations must be positive";
  for (int64_t v : s.pads)
    if (v < -kIntMax || v > kIntMax) return "padding out of range";
  for (int d = 0; d < 2; ++d) {
    const int64_t size =
        s.input[1 + d] + s.pads[2 * d] + s.pads[2 * d + 1] - (s.filter_grad[1 + d] - 1) * s.dilation[d];
    if (size < 1 || (size - 1) / s.strides[d] + 1 != s.out_grad[1 + d])
      return "output gradient's spatial size does not match input, filter, padding, stride and dilation";
  }
  if (s.stacked < 1) return "number of stacked problems out of range";

  GroupedProblem& p = op->problem;
  p = GroupedProblem{s.input[0],    s.input[1],    s.input[2],       s.input[3],       s.out_grad[1],
                     s.out_grad[2], s.out_grad[3], s.filter_grad[1], s.filter_grad[2], s.filter_grad[3],
                     s.groups,      s.pads[0],     s.pads[2],        s.strides[0],     s.strides[1],
                     s.dilation[0], s.dilation[1]};
  op->stacked = s.stacked;
  op->input_stride = s.input_shared ? 0 : p.input_elems();
  op->grad_stride = s.grad_shared ? 0 : p.grad_elems();

  GroupedPlan& plan = op->plan;
  plan = GroupedPlan{};
  plan.path = options.path;
  plan.tiles_w = ceil_div(p.filter_w, kGroupedMaxTileW);
  plan.tile_w = int(ceil_div(p.filter_w, plan.tiles_w));
  plan.tile_h = grouped_tile_rows(plan.tile_w);
  plan.tiles_h = ceil_div(p.filter_h, plan.tile_h);
  plan.units = plan.tiles_h * plan.tiles_w * p.group_c;
  if (plan.units > kMaxGrid) return "too many filter taps and input channels per group for one launch";

  // Spatial tiles: 4 output rows x 32 columns (1D layers: 1 x 64), fewer where the staged window would not
  // fit kGroupedMaxSmemBytes.
  const int64_t taps_h = std::min<int64_t>(plan.tile_h, p.filter_h);
  const int64_t width8 = ceil_div(p.out_w, kGroupedChunk) * kGroupedChunk;
  plan.out_rows = std::min<int64_t>(4, p.out_h);
  plan.out_cols = std::min<int64_t>(p.out_h == 1 ? 64 : 32, width8);
  auto fit = [&] {
    plan.x_rows = (plan.out_rows - 1) * p.stride_h + (taps_h - 1) * p.dilation_h + 1;
    plan.x_cols = (plan.out_cols - 1) * p.stride_w + (plan.tile_w - 1) * p.dilation_w + 1;
    // The same memory adds the warps' partial taps at the end.
    plan.smem_bytes = std::max(plan.x_rows * plan.x_cols + plan.out_rows * plan.out_cols,
                               int64_t(kGroupedSlots - 1) * plan.tile_h * plan.tile_w) *
                      kGroupedLanes * 4;
    return plan.smem_bytes <= kGroupedMaxSmemBytes;
  };
  while (!fit() && plan.out_rows > 1) plan.out_rows = (plan.out_rows + 1) / 2;
  while (!fit() && plan.out_cols > kGroupedChunk) plan.out_cols -= kGroupedChunk;
  if (!fit()) return "dilation or stride too large for one tile of the direct grouped kernels";
  // The streaming kernel (grouped.h): depthwise layers of the multipliers streamable_multiplier takes, at
  // least a warp's channels (at 32 bf16 channels half its lanes idle: 0.75x the staging kernel) in 16-byte
  // runs; stride and dilation 1; the whole filter in one tap tile of 3x3 to 7x7; images whose offsets
  // (padding rows too) fit 32 bits. Its tiles are taller (the filter's first rows are read again at each
  // tile) and take 32 columns of one image or 16 or 8 of 2 or 4 images (stream_tile_cols).
  const int element_bytes = storage_bytes(options.path);
  const int64_t per_thread = stream_channels(element_bytes);
  const int64_t multiplier = p.out_c / p.groups;
  const bool offsets_fit =
      (p.in_h + p.filter_h) * p.in_w * p.in_c <= kIntMax && p.out_h * p.out_w * p.out_c <= kIntMax;
  const bool undilated = p.dilation_h == 1 && p.dilation_w == 1;
  const bool unit_steps = p.stride_h == 1 && p.stride_w == 1 && undilated && offsets_fit;
  // ... or at stride 2 in both directions (multiplier 1, 3x3 or 5x5: downsampling layers).
  const bool stride_two = p.stride_h == 2 && p.stride_w == 2 && undilated && offsets_fit && multiplier == 1 &&
                          streamable_strided_tile(plan.tile_w);
  // ... or a 1D layer at unit steps, multiplier 1: its rows follow each other (grouped.h); wider than 8 taps
  // (Conformer's 31), each of its tap tiles a unit of blocks of its own.
  const bool sequence = p.out_h == 1 && p.filter_h == 1 && multiplier == 1 && unit_steps &&
                        streamable_sequence_tile(plan.tile_w);
  const bool streamed_channels = p.group_c == 1 && streamable_multiplier(multiplier, per_thread) &&
                                 p.in_c % stream_piece_channels(element_bytes) == 0 &&
                                 p.out_c % stream_piece_channels(element_bytes) == 0 &&
                                 p.out_c >= kGroupedLanes * per_thread;
  plan.streams =
      streamed_channels && (sequence || ((unit_steps || stride_two) && plan.tiles_h == 1 &&
                                         plan.tile_h == p.filter_h && streamable_tile(plan.tile_w)));
  plan.sequence = sequence && plan.streams;
  if (plan.sequence) plan.tile_h = 1;  // its one row of taps (grouped_task then sums one row)
  // On tensor cores: 16-bit groups of 2 to 16 channels, as many out as in, 3x3 (grouped.h).
  plan.tensor_cores = element_bytes == 2 && mma_group_channels(p.group_c) && multiplier == p.group_c &&
                      p.in_c % stream_piece_channels(element_bytes) == 0 && unit_steps &&
                      p.filter_h == kMmaTileW && p.filter_w == kMmaTileW;
  // 16-bit 7x7 depthwise layers on tensor cores (the band kernel, grouped.h: 1.4-1.5x the CUDA-core streaming
  // kernel on ConvNeXt's layers, which sums 5x5 and smaller faster, 0.86-1.0x; H100, 2026-11-25);
  // WINRS_JAX_DEPTHWISE_MMA=0 keeps them on CUDA cores (A/B of the two).
  const char* band_flag = std::getenv("WINRS_JAX_DEPTHWISE_MMA");
  const bool band_layer =
      !(band_flag && band_flag[0] == '0') && element_bytes == 2 && multiplier == 1 && unit_steps;
  plan.band = band_layer && plan.streams && !plan.sequence && plan.tile_w == kBandTile;
  // ... and depthwise filters taller or wider than 7 (at least 3 either way: a tile's 7 rows and columns are
  // summed whatever the filter's) in tap tiles of 7x7, each a unit of blocks of its own (RepLKNet's
  // 31x31 2.2x, 13x13 2.3x, 9x9 1.7x the CUDA cores' staging kernel; H100, 2026-11-25).
  const int64_t band_tiles_h = ceil_div(p.filter_h, kBandTile),
                band_tiles_w = ceil_div(p.filter_w, kBandTile);
  if (!plan.streams && band_layer && streamed_channels && p.out_h > 1 && p.filter_h >= 3 && p.filter_w >= 3 &&
      (p.filter_h > kBandTile || p.filter_w > kBandTile) && band_tiles_h * band_tiles_w <= kMaxGrid) {
    plan.band = true;
    plan.tile_h = plan.tile_w = kBandTile;
    plan.tiles_h = band_tiles_h;
    plan.tiles_w = band_tiles_w;
    plan.units = band_tiles_h * band_tiles_w;
  }
  plan.tensor_cores = plan.tensor_cores || plan.band;
  plan.streams = plan.streams || plan.tensor_cores;  // its tap tile and units are the plan's above
  if (plan.streams) {
    plan.out_rows = plan.sequence ? kSequenceRows : std::min<int64_t>(kStreamRows, p.out_h);
    plan.out_cols = plan.sequence ? kGroupedChunk * kGroupedSlots : stream_tile_cols(p.out_w);
    plan.tile_images = kGroupedChunk * kGroupedSlots / plan.out_cols;
    // The X window of a tap tile (the band kernel's units), else of the whole filter.
    plan.x_rows =
        plan.sequence ? 1 : (plan.out_rows - 1) * p.stride_h + (plan.band ? plan.tile_h : p.filter_h);
    plan.x_cols = (plan.out_cols - 1) * p.stride_w + (plan.band ? plan.tile_w : p.filter_w);
    const int64_t ring =
        (stream_ring_rows(plan.tile_h) * plan.x_cols + stream_depth(plan.tile_h) * plan.out_cols) *
        plan.tile_images * kStreamBytes;
    const int64_t partial = int64_t(kGroupedSlots - 1) * plan.tile_h * plan.tile_w * per_thread * 4;
    plan.smem_bytes =
        std::max(ring, partial) * kGroupedLanes + stream_ring_rows(plan.tile_h) * 8;  // barriers
    if (plan.tensor_cores)  // rows of 128-byte swizzled pixels, each image's from a 1024-byte boundary
      plan.smem_bytes = plan.band ? band_ring_bytes(plan.x_cols, plan.out_cols, plan.tile_images, plan.tile_h)
                                  : mma_ring_bytes(plan.x_cols, plan.out_cols, plan.tile_images);
  }
  plan.channel_blocks = ceil_div(p.out_c, kGroupedLanes * (plan.streams ? per_thread : 1));
  plan.tiles_oh = plan.sequence ? 1 : ceil_div(p.out_h, plan.out_rows);
  plan.tiles_ow = ceil_div(p.out_w, plan.out_cols * (plan.sequence ? plan.out_rows : 1));
  plan.tiles = ceil_div(p.batch, plan.tile_images) * plan.tiles_oh * plan.tiles_ow;
  if (plan.tiles > kIntMax)
    return "too many spatial tiles for one launch";  // the kernels count them in 32 bits

  const int64_t sm_count = std::max(1, options.sm_count);
  // (grouped layers on tensor cores: a block takes all taps and input channels of its groups)
  const int64_t blocks =
      plan.channel_blocks * (plan.tensor_cores && !plan.band ? 1 : plan.units) * op->stacked;
  int64_t splits = options.splits > 0 ? options.splits : ceil_div(sm_count * kBlocksPerSm, blocks);
  if (options.splits <= 0) {
    if (plan.streams) {
      // The streaming kernel: the fewest rounds of tiles, counting the waves of blocks that the registers and
      // rings let the SMs hold (a part-filled second wave costs a whole round: 1.34x on a 5x5 layer), each
      // split at least kMinTilesPerSplit tiles (one tile per block ran 1.09-1.10x slower) unless that leaves
      // SMs without a block (the tensor-core layer 3x3 64:14:512 g32: 128 blocks of two tiles 0.034 ms, 256
      // of one 0.030 in four runs); on a tie, more splits (H100, 2026-11-25).
      const int64_t min_tiles =
          blocks * ceil_div(plan.tiles, kMinTilesPerSplit) < sm_count ? 1 : kMinTilesPerSplit;
      const int64_t resident =
          std::min<int64_t>(plan.band           ? kBandBlocksPerSm
                            : plan.tensor_cores ? kMmaBlocksPerSm
                                                : stream_blocks_per_sm(plan.tile_h, plan.tile_w),
                            kStreamSmemPerSm / (plan.smem_bytes + kStreamSmemPerBlock));
      const int64_t slots = sm_count * std::max<int64_t>(1, resident);
      int64_t best_rounds = 0;
      for (int64_t per_split = min_tiles;; ++per_split) {
        const int64_t count = ceil_div(plan.tiles, per_split);
        const int64_t rounds = ceil_div(blocks * count, slots) * per_split;
        if (best_rounds == 0 || rounds < best_rounds) best_rounds = rounds, splits = count;
        if (count == 1) break;
      }
    } else {
      splits = std::min(splits, std::max<int64_t>(1, plan.tiles / kMinTilesPerSplit));
    }
  }
  plan.splits = std::max<int64_t>(1, std::min({splits, plan.tiles, kMaxGrid}));
  // Atomic adds of the same dW element queue in L2: where many splits meet few elements (256 splits into the
  // 1,152 of 3x3 depthwise 64:56:128, 1,792 into MobileNetV2's stride-2 864) they ran 0.79x and 0.92x the
  // fixed-order sum, which is kept there; at 27 elements a split and more 0.95x-1.32x (H100, 2026-11-25).
  plan.atomic = options.atomic && plan.splits > 1 && p.filter_elems() >= kAtomicElemsPerSplit * plan.splits;
  if (!plan.atomic && options.splits <= 0)  // the workspace holds the partial dW of all splits but the first
    plan.splits = std::min(plan.splits, 1 + kMaxWorkspaceElems / (op->stacked * p.filter_elems()));
  plan.workspace_elems = plan.atomic ? 0 : (plan.splits - 1) * p.filter_elems();

  const double element = storage_bytes(plan.path);
  const double flops = 2.0 * double(plan.tiles) * double(plan.chunks_per_tile()) * kGroupedChunk *
                       double(p.out_c) * double(plan.units) * plan.tile_h * plan.tile_w * double(op->stacked);
  const double bytes = element * double(op->stacked) * double(p.input_elems() + p.grad_elems());
  plan.predicted_seconds = std::max(flops / kFlops, bytes / kBytesPerSecond) * 132.0 / double(sm_count);
  return {};
}

}  // namespace winrs
