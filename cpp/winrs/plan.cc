#include "plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "schedule.h"
#include "variants.h"

namespace winrs {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Links a chain of segments may have where the workspace bound leaves too few buckets to fill the GPU (less
// than one wave of blocks), and the waves the chains then aim for. Measured on H100 (tools/tune.py buckets,
// 2026-11-23): a link costs 2-12 us of waiting, so chains of up to 8 links paid off on layers that one bucket
// per segment left with a partial wave (bf16 3x3 128:14:256, 2 segments: 0.53 ms; 28 segments sharing 4
// buckets: 0.27 ms), while longer chains lost (one bucket for 224 segments: 3.6x slower).
constexpr int64_t kMaxChain = 8;
constexpr double kChainWaves = 2;
// Waves of resident blocks Algorithm 1 aims for (line 4).
// Measured on H100 (tools/tune.py segments, 2026-11-22): 3x3 and 9x9 layers with 64-256 channels ran 6-8%
// faster with twice the segments of 4 waves; kWorkspaceShare below keeps the cost of that bounded.
constexpr double kWaves = 8;
// Atomic adds (segments.h): each segment adds its |dW| into dW in L2. Measured on H100 (tools/tune.py
// atomics, 2026-11-23, four channels per add on sm_90): past a few waves each segment more costs
// |dW| / (560-640 G/s) in bf16 and / (420 G/s) in TF32, its blocks' fixed work included (one channel per add:
// 390-490 and 180-350 G/s). Z is cut where those adds would take more than kAtomicShare of the layer's
// modelled time: bf16 3x3 128:28:128 ran 0.19 ms with 28 segments and 0.28 ms with Algorithm 1's 252, while
// TF32 3x3 128:28:128 still gained up to 140 segments.
constexpr double kAtomicAddsPerSecond = 5.5e11;
constexpr double kAtomicShare = 0.1;
// The kernels sum each segment's output positions in FP32 registers, so dW's error grows with the positions
// per segment. Measured on H100 at float32 HIGHEST (tools/tune.py sums, 2026-11-23, MARE on the paper's
// inputs): 7x7 32:32:256 on FP32 kernels 7.6e-7 with 2 segments (16384 positions each), 2.1e-7 with 8 (4096),
// 8.6e-8 with 32; 9x9 32:32:256 7.8e-7 -> 1.8e-7 from 2 to 6 segments, 5x5 32:16:512 5.9e-7 -> 3.0e-7 from 1
// to 2, at the same time within 2%. The budget is 7.6e-7 (4x a direct sum's).
constexpr int64_t kMaxSumPositions = 4096;
// Workspace bound in bytes: (buckets - 1) x |dW| float32 <= kWorkspaceShare x (|X| + |dY| + |dW|) in the
// input dtype (16-bit inputs allow half the buckets of float32 ones). The paper's average is 0.18; 0.15 keeps
// every layer of the baselines' suite under 5% of XLA's own temporaries.
constexpr double kWorkspaceShare = 0.15;

// The filter-window tile's segments (window_segments): time in steps of four K-blocks, a block's fixed work
// (zeroing its buffers, the copies' first latency, the output rounds) counted as kWindowBlockSteps steps and
// a step as kWindowStepSeconds, for the atomic adds' cost. A step measured 1.05 us on 3x3 128:56:64 (1850
// cycles at 1.755 GHz, the fifteenth stop's form, H100 Nsight Compute, 2026-11-24) and about 1.2 us in the
// row walk (3x3 32:224:64, 9x9 32:128:64: time over steps per block and waves); the fixed work is an estimate
// from the same profile. The model counts K-blocks, not copies: a step of pieces that do not fill their
// K-blocks copies a dY box per piece and costs more than it says.
constexpr double kWindowBlockSteps = 3;
constexpr double kWindowStepSeconds = 1.0e-6;
// The same model for the filter-row tile's segments where its blocks share the launch with other problems or
// read strides (taps_segments): a step of 64 positions x 3 taps x 64 x 64 channels is 1.6 MFLOP, about 2 us
// at the 200 TFLOP/s its strided form ran on 8:16x56x56:64->128 s2 (two blocks per SM; H100, 2026-11-25).
constexpr double kTapsStepSeconds = 2.0e-6;
constexpr int kTapsStepPositions = 64;

bool has_winograd_divisor(int64_t filter_w) {
  for (int d = 2; d <= 9; ++d)
    if (filter_w % d == 0) return true;
  return false;
}

// The grid of segments seg_h x seg_w over the primary region (whole row bands: seg_rows = out_h / seg_h) and
// `image_parts` parts of the batch; one bucket (make_plan sets the buckets).
SegmentGrid segment_grid(const Problem& p, const KernelPair& pair, int64_t seg_h, int64_t seg_w,
                         int64_t image_parts = 1) {
  SegmentGrid g;
  g.batch = int(p.batch);
  g.image_parts = int(image_parts);
  g.out_h = int(p.out_h);
  g.out_w = int(p.out_w);
  g.seg_h = int(seg_h);
  g.seg_rows = int(p.out_h / seg_h);
  g.seg_w = int(seg_w);
  g.width0 = int(pair.width0);
  g.bucket_count = 1;
  return g;
}

// Algorithm 2: segment height and width from the baseline count. The direct kernel's filter-row tile
// (variants.h, direct_taps and strided_taps) walks a segment's rows over its width plus the taps' halo, so
// that it cuts rows first and columns only where the rows run out: in segments one column wide (the
// algorithm's choice for Z^ >= W_max) two of its three positions would be halo, and 3x3 layers ran 3x slower
// (H100, 2026-11-23).
SegmentGrid segment_shape(const Problem& p, const KernelPair& pair, Path path, int64_t z_hat) {
  const int64_t r0 = kVariants[pair.variant0].r;
  const int64_t w_max = pair.width0 / r0;
  const int64_t pad_h = std::max<int64_t>({p.pad_top, p.pad_bottom, 1});
  const int64_t h_max = std::max<int64_t>(1, p.out_h / pad_h);
  z_hat = std::max<int64_t>(1, std::min(z_hat, h_max * w_max));
  const TileShape tile = tile_shape(pair.variant0, path, p);
  const bool rows_first = pair.variant0 == 0 && tile.columns > 1;

  int64_t seg_h = p.out_h, seg_w = pair.width0;
  if (z_hat == 1) {
    // one segment column over the primary region
  } else if (rows_first) {
    int64_t columns = ceil_div(z_hat, h_max);  // 1 while the rows suffice
    // The filter-window tile copies a segment's rows in pieces of a divisor of its width (cuda/
    // wgmma_window.cuh): columns of equal width, the divisor of W_max nearest to the count asked for (forced
    // segment counts; its own plans come from window_segments).
    if (tile.rows > 1 && w_max % columns != 0) {
      int64_t best = 1;
      for (int64_t c = 1; c <= w_max; ++c)
        if (w_max % c == 0 && std::abs(c - columns) <= std::abs(best - columns)) best = c;  // ties: more
      columns = best;
    }
    seg_w = ceil_div(w_max, columns) * r0;  // the last column takes fewer (segments.h)
    seg_h = p.out_h / ceil_div(z_hat, columns);
  } else if (z_hat >= w_max) {
    seg_h = p.out_h * w_max / z_hat;
    seg_w = r0;
  } else if (w_max % z_hat == 0) {
    seg_w = r0 * (w_max / z_hat);
  } else {
    const int64_t lo = std::max<int64_t>(1, w_max / z_hat), hi = h_max * w_max / z_hat;
    // The paper's search for a column width that divides W_max; without one (a 1D layer of 16000 columns and
    // Z^ = 176, say) it would leave one segment. Then the columns take ceil(W_max / Z^) units each, the last
    // one fewer (segments.h).
    seg_w = ceil_div(w_max, z_hat) * r0;
    for (int64_t x = lo; x <= hi; ++x) {
      if (w_max % x == 0) {
        seg_h = p.out_h * w_max / (z_hat * x);
        seg_w = x * r0;
        break;
      }
    }
  }
  return segment_grid(p, pair, std::clamp<int64_t>(seg_h, 1, p.out_h), seg_w);
}

// Blocks of a variant's kernel per segment on the GPU (its work tiles, schedule.h).
// `one_row`: as if its tiles took one filter row each, an upper bound for the launches that run the
// filter-row tile where the filter-window tile's staging does not apply (cuda/omega_kernel.cuh,
// launch_window).
int64_t blocks_per_segment(const Problem& p, int variant, Path path, bool one_row = false) {
  const TileShape t = tile_shape(variant, path, p);
  return ceil_div(p.out_c, t.block_oc) * ceil_div(p.in_c, t.block_ic) *
         ceil_div(p.filter_h, one_row ? 1 : t.rows) * ceil_div(p.filter_w, t.columns);
}

// 1, or more where `bound` segments of one bucket each would not fill the GPU once.
int64_t chain_limit(const Problem& p, const KernelPair& pair, const PlanOptions& options, int64_t bound) {
  const double blocks = double(blocks_per_segment(p, pair.variant0, options.path));
  const double resident = double(options.sm_count) * tile_shape(pair.variant0, options.path, p).blocks_per_sm;
  if (double(bound) * blocks >= resident) return 1;
  return std::clamp<int64_t>(int64_t(std::ceil(kChainWaves * resident / (blocks * double(bound)))), 1,
                             kMaxChain);
}

// The filter-window tile's segments (cuda/wgmma_window.cuh): one band of all the rows, so that a block walks
// each image's rows in turn and reads each X row about once, in columns of a width that a piece divides,
// and the batch cut into image parts for the GPU's blocks (segments.h). Columns and parts minimise the
// modelled time: whole waves of one block per SM, each block's steps (its images x rows x K-blocks of its
// pieces) and fixed work, and the atomic adds of each segment's |dW|; at most `z_limit` segments. No
// segment shape when no column width has pieces (the launch runs the filter-row tile then).
//
// The model's time, in steps of `step_seconds`, of `segments` segments of `tiles` blocks each (all problems')
// on `slots` resident blocks: whole waves of a block's `steps` and its fixed work, and with atomic adds each
// problem's and segment's |dW| added at kAtomicAddsPerSecond. window_segments and taps_segments minimise it.
double segments_cost(const Problem& p, const PlanOptions& options, double problems, double tiles,
                     double slots, int64_t segments, double steps, double step_seconds) {
  double cost = std::ceil(double(segments) * tiles / slots) * (steps + kWindowBlockSteps);
  if (options.atomic)
    cost += problems * double(segments) * double(p.filter_elems()) / kAtomicAddsPerSecond / step_seconds;
  return cost;
}

bool window_segments(const Problem& p, const KernelPair& pair, const PlanOptions& options, int64_t z_limit,
                     SegmentGrid* grid) {
  const double problems = double(std::max(1, options.problems));  // each with its own blocks and dW
  const double tiles = problems * double(blocks_per_segment(p, pair.variant0, options.path));
  const double slots = double(std::max(1, options.sm_count));
  double best = std::numeric_limits<double>::infinity();
  int64_t best_width = 0, best_parts = 0;
  for (int64_t cols = 1; cols <= p.out_w; ++cols) {
    if (p.out_w % cols != 0) continue;
    const int width = window_piece_width(int(p.out_w / cols));
    if (width == 0) continue;
    const double row_blocks = double(p.out_w / cols / width * window_piece_blocks(width));
    for (int64_t parts = 1; parts <= p.batch && parts * cols <= z_limit; ++parts) {
      const double steps = std::ceil(double(ceil_div(p.batch, parts) * p.out_h) * row_blocks / 4);
      const double cost =
          segments_cost(p, options, problems, tiles, slots, parts * cols, steps, kWindowStepSeconds);
      if (cost < best * (1 - 1e-9)) {
        best = cost;
        best_width = p.out_w / cols;
        best_parts = parts;
      }
    }
  }
  if (best_width == 0) return false;
  *grid = segment_grid(p, pair, p.out_h, best_width, best_parts);
  return true;
}

// The filter-row tile's segments where its tiles share the launch with a 3D layer's other depth taps
// (`problems`) or read strides: whole rows of dY (each block walks them with the taps' halo), in row bands
// and image parts that minimise the modelled time as window_segments does, in waves of the tile's resident
// blocks (Algorithm 1 counts one problem's blocks: 2:64^3:32->64 s2 got 32 row segments, 288 blocks for 264
// slots, a second wave of 24). From `z_min` (at float32 HIGHEST, kMaxSumPositions) to `z_limit` segments.
void taps_segments(const Problem& p, const KernelPair& pair, const PlanOptions& options, int64_t z_min,
                   int64_t z_limit, SegmentGrid* grid) {
  const TileShape tile = tile_shape(pair.variant0, options.path, p);
  const double problems = double(std::max(1, options.problems));
  const double tiles = problems * double(blocks_per_segment(p, pair.variant0, options.path));
  const double slots = double(std::max(1, options.sm_count)) * tile.blocks_per_sm;
  const int64_t reach = ceil_div(kDirectTaps, p.stride_w);  // halo positions a row walks: reach - 1
  const double row_positions = double(p.out_w + reach - 1);
  double best = std::numeric_limits<double>::infinity();
  int64_t best_h = p.out_h, best_parts = 1;
  for (int64_t parts = 1; parts <= p.batch && parts <= z_limit; ++parts) {
    for (int64_t bands = 1; bands <= p.out_h && parts * bands <= z_limit; ++bands) {
      const int64_t seg_h = p.out_h / bands, rows = seg_h + p.out_h % seg_h;  // the last band's rows
      const int64_t z = parts * (p.out_h / seg_h);  // (out_h 27 in 14 bands: 27 bands of one row)
      if (z > z_limit || (z < z_min && z < p.batch * p.out_h)) continue;
      const double steps =
          std::ceil(double(ceil_div(p.batch, parts) * rows) * row_positions / kTapsStepPositions);
      const double cost = segments_cost(p, options, problems, tiles, slots, z, steps, kTapsStepSeconds);
      if (cost < best * (1 - 1e-9)) {
        best = cost;
        best_h = seg_h;
        best_parts = parts;
      }
    }
  }
  *grid = segment_grid(p, pair, best_h, p.out_w, best_parts);
}

}  // namespace

int64_t max_buckets(const Problem& p, Path path) {
  const double data_bytes =
      double(storage_bytes(path)) * double(p.input_elems() + p.grad_elems() + p.filter_elems());
  const double bucket_bytes = double(sizeof(float)) * double(p.filter_elems());
  // At least one extra bucket: a second block group is worth it where one segment fills the GPU poorly.
  return std::max<int64_t>(2, 1 + int64_t(kWorkspaceShare * data_bytes / bucket_bytes));
}

std::string validate_problem(const Problem& p) {
  const int64_t dims[] = {p.batch, p.in_h, p.in_w, p.in_c, p.out_h, p.out_w, p.out_c, p.filter_h, p.filter_w};
  for (int64_t d : dims)
    if (d <= 0) return "all dimensions must be positive";
  if (p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0) return "padding must be >= 0";
  if (p.stride_h < 1 || p.stride_w < 1) return "strides must be >= 1";
  const int64_t span_h = p.in_h + p.pad_top + p.pad_bottom - p.filter_h,
                span_w = p.in_w + p.pad_left + p.pad_right - p.filter_w;
  if (span_h < 0 || p.out_h != span_h / p.stride_h + 1)
    return "output-gradient height does not match input height, padding, filter height and stride";
  if (span_w < 0 || p.out_w != span_w / p.stride_w + 1)
    return "output-gradient width does not match input width, padding, filter width and stride";
  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  if (p.input_elems() > int32_max || p.grad_elems() > int32_max || p.filter_elems() > int32_max)
    return "tensors of 2^31 or more elements are not supported";
  return {};
}

int64_t primary_width(int variant0, int variant1, int64_t out_w) {
  const int64_t r0 = kVariants[variant0].r, r1 = kVariants[variant1].r;
  for (int64_t k0 = out_w / r0; k0 >= 1; --k0)
    if ((out_w - k0 * r0) % r1 == 0) return k0 * r0;
  return 0;
}

// XLA's own filter-gradient error on zero-mean inputs where `reference` is the arithmetic it uses: the median
// over 20 layers of the paper suite on an H100 (jax 0.11.2, cuDNN; tools/accuracy.py --gpu, 2026-11-22).
// cuDNN's algorithms are often less accurate than a direct sum: at float32 HIGHEST from 1.7e-7 (7x7-9x9)
// to 8.5e-3 (5x5), at the default precision (TF32) 2.9e-4 to 2.2e-3. bfloat16 and float16 are the exact dW
// rounded once. Split TF32, which XLA never uses (a forced path is its own reference), counts as FP32.
double xla_signed_error(Path reference) {
  switch (reference) {  // no default: a new path must say what it stands for
    case Path::kFp32:
    case Path::kTf32x3:
      return 2.61e-6;
    case Path::kTf32:
      return 7.91e-4;
    case Path::kBf16:
      return 1.66e-3;
    case Path::kFp16:
      return 2.08e-4;
  }
  return 0;
}

AccuracyBudget accuracy_budget(Path reference) {
  // Issue 7 allows 4x XLA's error at float32 HIGHEST (the FP32-accurate paths) and 2x in the
  // reduced-precision types. XLA's error is at least that of a direct sum with the reference's operand
  // rounding (the direct kernel's, variants.h); on zero-mean data it is the larger of that and XLA's measured
  // median. The paper's protocol reads the direct kernel alone (on its [0, 1) inputs every kernel but alpha
  // 16 stays near it).
  const double factor = accuracy_factor(reference);
  const KernelShape& direct = kVariants[0].shape(reference);
  return {factor * direct.mare, factor * std::max(direct.signed_error, xla_signed_error(reference))};
}

KernelPair choose_kernel_pair(int64_t filter_w, int64_t out_w, Path path, const AccuracyBudget& budget,
                              int64_t smem_per_block) {
  KernelPair best;
  if (!has_winograd_divisor(filter_w)) return best;
  double best_cost = std::numeric_limits<double>::infinity();
  auto admitted = [&](int v) {
    return filter_w % kVariants[v].n == 0 && budget.admits(kVariants[v].shape(path)) &&
           omega_fits(v, path, smem_per_block);
  };
  for (int v0 = 0; v0 < kNumVariants; ++v0) {
    if (!admitted(v0)) continue;
    for (int v1 = 0; v1 < kNumVariants; ++v1) {
      if (!admitted(v1)) continue;
      // The largest share for kernel 0 such that kernel 1 covers the rest exactly (no zero padding).
      const int64_t width0 = primary_width(v0, v1, out_w);
      if (width0 == 0) continue;
      const int64_t rest = out_w - width0;
      const double cost = double(width0) / kVariants[v0].relative_speed(path) +
                          double(rest) / kVariants[v1].relative_speed(path);
      if (cost < best_cost * (1 - 1e-12)) {
        best_cost = cost;
        best.variant0 = v0;
        best.variant1 = rest == 0 ? v0 : v1;
        best.width0 = width0;
      }
    }
  }
  return best;
}

double baseline_segment_count(const Problem& p, const KernelPair& pair, const PlanOptions& options) {
  const TileShape tile = tile_shape(pair.variant0, options.path, p);
  const double sm = std::max(1, options.sm_count);
  // Line 1: block counts of forward (b0), backward-data (b1) and backward-filter (b2) convolutions.
  const double b0 = double(ceil_div(p.batch * p.out_h * p.out_w, 128) * ceil_div(p.out_c, 64));
  const double b1 = double(ceil_div(p.batch * p.in_h * p.in_w, 128) * ceil_div(p.in_c, 64));
  const double b2 = double(blocks_per_segment(p, pair.variant0, options.path));
  double z = (b0 + b1) / (1.45 * b2);
  // Line 2: one segment suffices with two waves of blocks. (The paper also caps Z by the workspace; here the
  // bound caps the buckets instead, and segments beyond it share buckets in chains.)
  const double b2_hat = 2 * sm;
  if (z < 2 && b2 >= b2_hat) return 1;  // line 3
  // Line 4: enough blocks for several waves of resident blocks, so that the last partial wave costs little.
  const double z1 = std::ceil(kWaves * sm * tile.blocks_per_sm / b2);
  // Line 5: at least 64 MFLOP of direct-convolution work per segment.
  const double z2 = std::max(1.0, std::floor(p.direct_flops() / (64.0 * 1024 * 1024)));
  // Line 6, with at least 512 output-gradient positions per segment.
  z = std::min({z, z1, z2, double(p.batch * p.out_h * p.out_w) / 512.0});
  z = std::max(1.0, std::floor(z));
  // Line 7: round up to a multiple of 2, 4 or 8.
  const double pad = std::min(std::exp2(std::ceil(std::log2(z))), 8.0);
  return std::max(1.0, pad * std::ceil(z / pad));
}

Plan make_plan(const Problem& p, const PlanOptions& options) {
  Plan plan;
  plan.path = options.path;
  if (std::string error = validate_problem(p); !error.empty()) {
    plan.reason = error;
    return plan;
  }
  if (options.sm_count < 1) {
    plan.reason = "the SM count must be positive";
    return plan;
  }
  if (p.strided() && !strided_taps(options.path, p)) {
    plan.reason =
        "strides (" + std::to_string(p.stride_h) + ", " + std::to_string(p.stride_w) +
        ") are read in place only by the direct kernel's filter-row tile: 16-bit types, column "
        "stride 1 or 2, filter widths of 3 or from 5, channels in 16-byte pieces (above 64 on both sides: "
        "column stride 2 and widths a multiple of 3)";
    return plan;
  }
  if (!p.strided() && !has_winograd_divisor(p.filter_w)) {
    plan.reason = "filter width " + std::to_string(p.filter_w) + " has no divisor in 2..9";
    return plan;
  }
  KernelPair pair;
  if (p.strided()) {  // the direct kernel's filter-row tile, over the whole width
    if (options.variant0 > 0 || options.variant1 > 0) {
      plan.reason = "a strided problem runs the direct kernel (variant 0) only";
      return plan;
    }
    pair = KernelPair{0, 0, p.out_w};
  } else if (options.variant0 >= 0 || options.variant1 >= 0) {  // forced (tests, tuning): no accuracy budget
    const int v0 = options.variant0, v1 = options.variant1 >= 0 ? options.variant1 : options.variant0;
    if (v0 < 0 || v0 >= kNumVariants || v1 >= kNumVariants) {
      plan.reason = "forced kernel variant index out of range";
      return plan;
    }
    pair = KernelPair{v0, v1, primary_width(v0, v1, p.out_w)};
    if (p.filter_w % kVariants[v0].n != 0 || p.filter_w % kVariants[v1].n != 0 || pair.width0 == 0) {
      plan.reason = "forced kernels cannot tile this filter width and output-gradient width";
      return plan;
    }
    if (!omega_fits(v0, options.path, p.smem_per_block) || !omega_fits(v1, options.path, p.smem_per_block)) {
      plan.reason = "forced kernels need more shared memory per block than the GPU gives (" +
                    std::to_string(p.smem_per_block) + " bytes)";
      return plan;
    }
    if (pair.width0 == p.out_w) pair.variant1 = v0;
  } else {
    pair = choose_kernel_pair(p.filter_w, p.out_w, options.path, accuracy_budget(options.reference),
                              p.smem_per_block);
    if (pair.variant0 < 0) {
      const bool accurate = choose_kernel_pair(p.filter_w, p.out_w, options.path,
                                               accuracy_budget(options.reference), kHopperSmemPerBlock)
                                .variant0 >= 0;
      plan.reason =
          std::string("no kernel on path ") + path_info(options.path).name +
          (accurate ? " that keeps the accuracy of the requested precision for this filter width fits "
                      "the GPU's " +
                          std::to_string(p.smem_per_block) + " bytes of shared memory per block"
                    : " keeps the accuracy of the requested precision for this filter width");
      return plan;
    }
  }
  if (options.atomic && options.buckets > 0) {
    plan.reason = "forced buckets and atomic adds exclude each other";
    return plan;
  }
  plan.baseline_segments =
      options.segments > 0 ? double(options.segments) : baseline_segment_count(p, pair, options);
  // The workspace bound caps Z at the buckets it allows (the paper's Algorithm 1, line 7), one bucket per
  // segment, unless that leaves the GPU idle: then the segments share the buckets in chains (segments.h).
  // Atomic adds need no buckets; their traffic caps Z instead (kAtomicShare).
  const double share0 = double(pair.width0) / double(p.out_w);
  plan.predicted_seconds = p.direct_flops() * 1e-12 *
                           (share0 / kVariants[pair.variant0].relative_speed(options.path) +
                            (1 - share0) / kVariants[pair.variant1].relative_speed(options.path));
  const int64_t bound = max_buckets(p, options.path);
  const int64_t z_max = options.atomic
                            ? std::max<int64_t>(1, int64_t(kAtomicShare * plan.predicted_seconds *
                                                           kAtomicAddsPerSecond / double(p.filter_elems())))
                            : bound * chain_limit(p, pair, options, bound);
  // At float32 HIGHEST, enough segments that each sums at most kMaxSumPositions output positions; atomic adds
  // take them whatever their traffic, buckets only within the workspace bound.
  const int64_t z_accurate =
      fp32_accurate(options.reference) ? ceil_div(p.batch * p.out_h * p.out_w, kMaxSumPositions) : 1;
  const int64_t z_limit = options.atomic ? std::max(z_max, z_accurate) : z_max;
  int64_t z = int64_t(plan.baseline_segments);
  if (options.segments <= 0) z = std::min(std::max(z, z_accurate), z_limit);
  // The filter-window tile cuts images, not rows (window_segments), and the filter-row tile sharing its
  // launch (taps_segments) both; with atomic adds their model weighs the adds' traffic itself, up to 8 waves
  // of blocks.
  const TileShape tile = tile_shape(pair.variant0, options.path, p);
  const int64_t window_limit =
      options.atomic ? std::max<int64_t>(1, 8 * int64_t(options.sm_count) /
                                                blocks_per_segment(p, pair.variant0, options.path))
                     : z_limit;
  const bool taps_alone = pair.variant0 == 0 && tile.rows == 1 && tile.columns == kDirectTaps &&
                          (p.strided() || (options.problems > 1 && tile.block_oc == kNarrowBlock));
  if (taps_alone && options.segments <= 0 && pair.width0 == p.out_w) {
    taps_segments(p, pair, options, z_accurate, std::max(window_limit, z_accurate), &plan.grid);
  } else if (!(tile.rows > 1 && options.segments <= 0 && pair.width0 == p.out_w &&
               window_segments(p, pair, options, window_limit, &plan.grid))) {
    plan.grid = segment_shape(p, pair, options.path, z);
    // Algorithm 2 can cut more segment columns than asked for (a prime W_max, say): shrink Z until they fit,
    // unless the caller forced the segment count.
    while (options.segments <= 0 && z > 1 && plan.grid.kernel_segments(0) > z_limit)
      plan.grid = segment_shape(p, pair, options.path, --z);
  }
  const int64_t primary = plan.grid.kernel_segments(0);
  int64_t buckets = options.segments > 0 ? primary : std::min(primary, bound);
  if (options.buckets > 0) buckets = std::min<int64_t>(primary, options.buckets);
  if (options.atomic) buckets = 1;
  plan.grid.bucket_count = int(buckets);
  plan.grid.atomic = options.atomic;
  plan.variant0 = pair.variant0;
  plan.variant1 = pair.variant1;
  plan.segments = plan.grid.count();
  plan.buckets = buckets;
  for (int kernel = 0; kernel < 2; ++kernel)
    if (plan.grid.chain(kernel) > 1 && !options.atomic)
      plan.semaphores[kernel] =
          buckets * blocks_per_segment(p, kernel == 0 ? pair.variant0 : pair.variant1, options.path, true);
  plan.workspace_elems = (buckets - 1) * p.filter_elems() + plan.semaphores[0] + plan.semaphores[1];
  plan.supported = true;
  return plan;
}

}  // namespace winrs
