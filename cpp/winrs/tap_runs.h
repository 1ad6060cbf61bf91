// The work of the persistent block's T-tap tiles (cuda/tap_runs.cuh, cuda/wgmma_persistent.cuh; T = 2 or 3),
// written once for the kernel and for its host check (tests/cpp/tap_runs_check.cc): which dY units and X
// positions a step holds, where a K-block's X lies for each tap, the segments the tiles take, and where they
// run.
//
// A one-tap tile stages, for every 64 dY units, the 64 X positions of its one filter column. A tile of T
// consecutive filter columns f0 .. f0 + T - 1 walks runs of consecutive positions of one dY row (for one box
// of images), so that tap j of unit ow meets X at ow + f0 + j: the X that tap 0 of unit ow + j meets. Step k
// of a run holds X for run positions k P .. k P + P - 1 (P positions a step) and, from k = reach on, dY for
// units (k - reach) P .. (k - reach) P + P - 1, so a unit's taps read X from its own step and the `reach`
// steps before it (a run opens with `reach` steps of X alone). Against the one-tap tile on 128 x 256
// channels, X is copied once for T taps: 0.0053 bytes per FLOP from L2 at T = 3 instead of 0.0117
// (docs/benchmarks.md, thirty-first stop).
//
// A step is 64 units: one position of 64 images (batches that are multiples of 64, a run per box of 64
// images), or two positions of 32 images (a batch of 32, and boxes of 32 at any batch where a config asks:
// TapRunRules::max_images); units past the run's end read dY as zeros (an image past the batch).
#pragma once

#include <cstdlib>

#include "config.h"
#include "problem.h"
#include "schedule.h"
#include "segments.h"
#include "tf32_layout.h"
#include "variants.h"

namespace winrs {

inline constexpr int kTapRunUnits = 64;  // units per step
inline constexpr int kTapRunBlock = 16;  // units per K-block (k16)

// A T-tap tile's filter columns: 3, or 2 for filters two wide.
WINRS_HD constexpr int tap_run_taps(int filter_w) { return filter_w == 2 ? 2 : 3; }

// Steps of T-tap runs over a batch: images per box, positions per step, boxes of images per position, and
// steps of X alone at the top of a run (T - 1 positions, in whole steps).
struct TapRunShape {
  int images, positions, chunks, reach;
};
// At most `max_images` images a box: the TF32 tiles take 32 (two positions a step at every batch: their ring
// of K-major buffers holds the step and one before, cuda/wgmma_tf32_taps.cuh).
WINRS_HD inline TapRunShape tap_run_shape(long long batch, int taps, int max_images = kTapRunUnits) {
  const int images = batch < max_images ? int(batch) : max_images, positions = kTapRunUnits / images;
  return TapRunShape{images, positions, int(batch) / images, (taps - 1 + positions - 1) / positions};
}

// One tile's runs: its steps, and the boxes of each.
struct TapRunWalk : TapRunShape {
  int width, run_steps, steps;
  int row_offset, col_offset;
  int taps;     // filter columns of this tile (fewer than T in the filter's last tile, or in a balanced cut)
  int outside;  // an image past the batch: dY boxes there read as zeros

  WINRS_HD TapRunWalk(const Problem& p, const WorkTile& work, const UnitWalk& walk, int tile_taps,
                      int max_images = kTapRunUnits)
      : TapRunShape(tap_run_shape(walk.batch, tile_taps, max_images)) {
    width = walk.units_per_row;
    run_steps = reach + (width + positions - 1) / positions;
    steps = walk.rows * chunks * run_steps;
    row_offset = work.fh - int(p.pad_top);
    col_offset = work.f0 - int(p.pad_left);
    taps = int(p.filter_w) - work.f0 < work.columns ? int(p.filter_w) - work.f0 : work.columns;
    outside = int(p.batch);
  }

  // Whether step s has dY (and MMAs).
  WINRS_HD bool computes(int s) const { return s % run_steps >= reach; }

  // Step s: its dY row, its run's first image and its place k in the run.
  struct Step {
    int oh, image, k;
  };
  WINRS_HD Step step(int s, const UnitWalk& walk) const {
    const int run = s / run_steps;
    return Step{walk.row_begin + run / chunks, walk.image0 + run % chunks * images, s % run_steps};
  }
  // X's box of the step's position q: column and row (its images from the step's image).
  WINRS_HD int x_col(const Step& st, int q, const UnitWalk& walk) const {
    return walk.w_begin + st.k * positions + q + col_offset;
  }
  WINRS_HD int x_row(const Step& st) const { return st.oh + row_offset; }
  // dY's box of the step's unit position q (from k = reach): column, and its first image, `outside` past the
  // run's end.
  WINRS_HD int grad_unit(const Step& st, int q) const { return (st.k - reach) * positions + q; }
  WINRS_HD int grad_col(const Step& st, int q, const UnitWalk& walk) const {
    return walk.w_begin + grad_unit(st, q);
  }
  WINRS_HD int grad_image(const Step& st, int q) const {
    return grad_unit(st, q) < width ? st.image : outside;
  }

  // The boxes of step s, in the order the copies issue them: for each position q, X's `input_panels` panels,
  // then (from k = reach on) dY's `grad_panels`, each of `panel_channels` channels: fn(grad, panel, q,
  // channel, column, row, image), the box's coordinates innermost first.
  template <class Fn>
  WINRS_HD_INLINE void boxes(const WorkTile& work, const UnitWalk& walk, int s, int input_panels,
                             int grad_panels, int panel_channels, Fn&& fn) const {
    const Step st = step(s, walk);
    for (int q = 0; q < positions; ++q) {
      WINRS_UNROLL
      for (int panel = 0; panel < input_panels; ++panel)
        fn(false, panel, q, work.ic0 + panel * panel_channels, x_col(st, q, walk), x_row(st), st.image);
      if (st.k < reach) continue;
      WINRS_UNROLL
      for (int panel = 0; panel < grad_panels; ++panel)
        fn(true, panel, q, work.oc0 + panel * panel_channels, grad_col(st, q, walk), st.oh,
           grad_image(st, q));
    }
  }
};

// A persistent block's tiles in order: b, b + G, ... below the launch's count (block b of G).
struct BlockTiles {
  long long at = 0;
  WINRS_HD_INLINE bool next(long long blocks, long long tiles, long long* tile) {
    if (at >= tiles) return false;
    *tile = at;
    at += blocks;
    return true;
  }
};

// A persistent block's steps in order across its tiles (BlockTiles): step s of tile `tile`, of `end` steps,
// or past the walk's end (valid false). Tiles without steps (a filter row whose rows all fall outside X) are
// passed over: a producer that walks one step ahead of its loop (cuda/wgmma_tf32_taps.cuh) meets every step
// its consumers' nested loops over tiles and steps meet, and no other. next_tile(tiles, &tile) takes the
// block's next tile; steps_of(tile) gives a tile's steps.
struct BlockStepCursor {
  BlockTiles tiles;
  long long tile = 0;
  int s = 0, end = 0;
  bool valid = false;
  template <class NextTile, class StepsOf>
  WINRS_HD_INLINE void seek(const NextTile& next_tile, const StepsOf& steps_of) {
    while ((valid = next_tile(tiles, &tile))) {
      end = steps_of(tile);
      if ((s = 0) < end) return;
    }
  }
  template <class NextTile, class StepsOf>
  WINRS_HD_INLINE void advance(const NextTile& next_tile, const StepsOf& steps_of) {
    if (++s == end) seek(next_tile, steps_of);
  }
};

// Where tap j of K-block `sub` (units 16 sub .. 16 sub + 15 of a step of `positions` positions) finds its X:
// `back` steps before the step, at row `row` of that step's X (position row / images, image row % images).
// Unit 16 sub is image i of position q of the step; its tap j is run position q + j after the step's first
// unit, reach - (q + j) / P steps back. Constants of the kernel's code (a division per MMA had made the
// consumers issue-bound).
struct TapXPlace {
  int back, row;
};
WINRS_HD constexpr TapXPlace tap_x_place(int taps, int positions, int sub, int j) {
  const int images = kTapRunUnits / positions, reach = (taps - 1 + positions - 1) / positions;
  const int first = sub * kTapRunBlock, q = first / images, shift = q + j;
  return TapXPlace{reach - shift / positions, shift % positions * images + first % images};
}

// Filters 3k + 1 wide, whose row cut into tiles of three taps ends in a tile of one tap (3 + 1, 3 + 3 + 1):
// that tile copies a full step for a third of the MMAs. By default their rows are cut evenly instead (4 = 2 +
// 2, 7 = 3 + 2 + 2; TileScheduler::balanced_width): against 3 + 1, 4x4 64:56:128 0.220 -> 0.176 ms and
// 128:28:256 0.434 -> 0.330; 1D k=7 32:8192:512 1.494 -> 1.514 (bf16, H200, thirty-fifth stop). One rule
// for both: the 7-wide cut's 1.3% is within two runs' noise.
WINRS_HD constexpr bool tap_run_ends_in_one_tap(int filter_w, int taps) {
  return taps == 3 && filter_w % 3 == 1;
}

// The rules that pick where the T-tap tiles run, as shipped; experiments' switches set them otherwise
// (cuda/wgmma_persistent.cuh, tap_run_rules): `length_rule` false drops the row length
// (WINRS_JAX_TAP_RUNS=2), `balanced` false cuts rows 3 + 1 (WINRS_JAX_TAP_BALANCED=0).
struct TapRunRules {
  bool length_rule = true;
  bool balanced = true;
  int max_images = kTapRunUnits;  // images a box (tap_run_shape)
};
// Whether a tile scheduler cuts a row's taps evenly (TileScheduler::balanced_width).
constexpr bool tap_run_balanced_cut(int filter_w, int taps, TapRunRules rules) {
  return rules.balanced && tap_run_ends_in_one_tap(filter_w, taps);
}

// How many steps a run needs per step of X alone at its top for the T-tap tiles to pay: 7, or 8 for filters
// 3k + 1 wide. Against one tap, T = 3 ran 1.17-2.6x faster on nine bf16 layers of rows from 17 to 16000
// positions (thirty-second stop), and at 7-7.5 steps per step of X alone 1.45x (3x3 32:14:1024), 1.32x (3x3
// 128:15:256) and 0.98x (3x3 128:14:256), where a 7x7 filter (64:14:256) ran 0.92x cut 3 + 3 + 1
// (thirty-third stop) and 0.93x cut 3 + 2 + 2 (thirty-fifth), and at 3.5 (3x3 128:7:512) 0.92x (H200,
// 2026-11-28; docs/benchmarks.md).
inline int tap_run_steps_per_x_step(int filter_w, int taps) {
  return tap_run_ends_in_one_tap(filter_w, taps) ? 8 : 7;
}

// Whether the T-tap tiles take kernel `kernel` (0: the primary columns, 1: the residual column) of a plan:
// atomic sums (the tiles cut segments of their own: tap_run_grid), unstrided, filters at least two wide, and
// rows long enough (tap_run_steps_per_x_step, unless `rules` drop the length); at a batch of 32 (two
// positions a step), rows of an even width (else a run's last unit, past its end, meets real X with zero dY,
// and an infinite X makes NaN where the true sum is finite).
inline bool tap_runs_fit(const Problem& p, const SegmentGrid& grid, int kernel, int taps,
                         TapRunRules rules = {}) {
  const TapRunShape shape = tap_run_shape(p.batch, taps, rules.max_images);
  const int width = kernel == 0 ? grid.width0 : grid.out_w - grid.width0;
  const int run_steps = (width + shape.positions - 1) / shape.positions;
  const int steps_per_x_step = rules.length_rule ? tap_run_steps_per_x_step(int(p.filter_w), taps) : 0;
  return p.filter_w >= 2 && !p.strided() && grid.atomic && steps_per_x_step * shape.reach <= run_steps &&
         width > 0 && width % shape.positions == 0;
}

// At a batch of 32 (two positions a step) the T-tap tiles take rows of an even width only (tap_runs_fit).
// Where kernel 0 covers every column of an odd width, the grid with its last column split off as a residual
// column (kernel 1, one-tap tiles in a launch of their own) if the T-tap tiles then take the rest; else the
// grid as planned. Measured against one tap (bf16, H200): the paper's 2x2 32:128:128 (rows of 127) 0.185 vs
// 0.280 ms, 6x6 32:64:256 (63) 0.831 vs 1.130, 8x8 32:32:256 (31) 0.495 vs 0.504 (thirty-fourth stop); 4x4
// 32:64:256 (63) 0.516 vs 0.633 cut 2 + 2 (thirty-fifth), but 0.623 vs 0.582 cut 3 + 1 (thirty-fourth), so
// rows cut so keep one tap.
inline SegmentGrid tap_run_even_split(const Problem& p, const SegmentGrid& grid, int taps,
                                      TapRunRules rules = {}) {
  SegmentGrid split = grid;
  if (grid.width0 == grid.out_w && grid.out_w % 2 == 1 && grid.out_w > 1 &&
      tap_run_shape(p.batch, taps, rules.max_images).positions == 2 &&
      !(tap_run_ends_in_one_tap(int(p.filter_w), taps) && !rules.balanced))
    split.width0 = grid.out_w - 1;
  return tap_runs_fit(p, split, 0, taps, rules) ? split : grid;
}

// The layers whose data the TF32 T-tap tiles take (cuda/wgmma_tf32_taps.cuh): batches of whole boxes of 32
// images, channels in 16-byte pieces. Their launch asks it beside what only it knows (the switch, the sm_90a
// code loaded, the buffers' alignment).
WINRS_HD inline bool tf32_tap_tile_data(const Problem& p) {
  return p.batch % kTf32Images == 0 && p.in_c % 4 == 0 && p.out_c % 4 == 0;
}
// The split-TF32 tiles' X side is 64 channels (kTf32SplitXChannels), so they also fill layers of at most 64
// input channels against more than 64 output channels, which the direct kernel runs as its filter-row tile
// where the filter width is a multiple of 3 (variants.h, direct_taps): by the planner's rate 1.6-1.7x faster
// than the split-TF32 Winograd kernels on the real suite's 3x3 32:112:64->128 and 128:35:64->96. An
// experiment's switch until measured: WINRS_JAX_TF32X3_ROW_TILE_LAYERS=1, read when a plan is made
// (make_plan) and at each launch (cuda/omega_kernel.cuh, launch_direct), so both see the same rule.
inline bool tf32x3_row_tile_layers_enabled() {
  const char* v = std::getenv("WINRS_JAX_TF32X3_ROW_TILE_LAYERS");
  return v && v[0] == '1';
}
// Whether the split-TF32 tiles take a layer whose direct kernel tile is `tile` in place of the filter-row
// tile (its T-tap rows and data aside: tf32_tap_tiles_fit): more than 32 input channels, as the launch takes
// them wherever they fit and a tile's X side of fewer would be mostly channels computed and dropped.
inline bool tf32x3_takes_row_tile_layer(const Problem& p, Path path, const TileShape& tile) {
  return path == Path::kTf32x3 && tile.columns == kDirectTaps && !p.strided() &&
         p.in_c > kTf32SplitXChannels / 2 && p.in_c <= kTf32SplitXChannels && p.out_c > kNarrowBlock &&
         tf32x3_row_tile_layers_enabled();
}

// Whether the TF32 (or, on `path` tf32x3, split-TF32) T-tap tiles take the place of the direct kernel's tile
// `tile` on `path`: its one-column tile of 128 x 128 channels (not the filter-row tile or the 64-channel
// block, variants.h), and the filter-row tile's layers of tf32x3_takes_row_tile_layer. Asked by the launch
// (cuda/omega_kernel.cuh, launch_direct) and by the planner (tf32_tap_tiles_fit).
inline bool tf32_tiles_take_shape(const Problem& p, Path path, const TileShape& tile) {
  return (tile.columns == 1 && tile.block_oc == kWideBlock) || tf32x3_takes_row_tile_layer(p, path, tile);
}

// Whether the TF32 (or, on `path` tf32x3, split-TF32) T-tap tiles take a plan on the direct kernel alone (its
// grid `grid`, `problems` stacked problems) as its launch would (cuda/omega_kernel.cuh, launch_direct), under
// the shipped rules: the tile of tf32_tiles_take_shape, one problem and one image part, and T-tap rows on the
// grid that the launch splits (tap_run_even_split, tap_runs_fit: atomic sums, long enough rows). The planner
// weighs them by their own rate where they do (planner.py, TF32_TAP_TILES_TFLOPS, TF32X3_TAP_TILES_TFLOPS).
inline bool tf32_tap_tiles_fit(const Problem& p, const SegmentGrid& grid, int problems,
                               Path path = Path::kTf32) {
  const TapRunRules rules{true, true, kTf32Images};
  const int taps = tap_run_taps(int(p.filter_w));
  return tf32_tiles_take_shape(p, path, tile_shape(0, path, p)) && problems == 1 && grid.image_parts == 1 &&
         tf32_tap_tile_data(p) && tap_runs_fit(p, tap_run_even_split(p, grid, taps, rules), 0, taps, rules);
}

// The segments that the T-tap tiles run an atomic plan's kernel on, in place of the plan's. The planner cuts
// the one-tap kernel's layers into columns a position or two wide (one-tap tiles do not care), where a T-tap
// run would copy T - 1 positions of X alone for every one or two it computes; atomic adds let any cut of dY
// into segments sum into dW, and each tap's sum keeps its terms. So: bands of rows, columns of whole steps,
// and parts of the batch (boxes of max_images images each, 64 unless a config asks fewer), the cut that takes
// the fewest waves of `sms` tiles of out_channels x in_channels blocks times a tile's steps (and
// overhead_steps for its start and its output). Columns (up to 8; a 1D layer's up to 8 per SM) and parts go
// up to 8 each, bands up to 4 x sms. `overhead_steps` (kTapRunOverheadSteps) may be set otherwise by an
// experiment (WINRS_JAX_TAP_RUN_OVERHEAD). 12 measured (bf16, H200, thirty-fourth stop) against 4: 3x3
// 128:16:256 0.097 -> 0.086 ms, 5x5 32:32:256 0.214 -> 0.196, 9x9 32:32:256 0.523 -> 0.500, 32:64:128 0.528
// -> 0.519; 7x7 32:16:512 and 3x3 32:28:512 even. A tile's fixed cost (start, output atomics) is about 11
// steps: 3x3 128:16:256's 384 tiles of 18 steps took 0.097 ms, 128:15:256's 120 of 51 0.069.
inline constexpr int kTapRunOverheadSteps = 12;
inline SegmentGrid tap_run_grid(const Problem& p, const SegmentGrid& planned, int kernel, int taps, int sms,
                                int out_channels = 128, int in_channels = 128,
                                int overhead_steps = kTapRunOverheadSteps, int max_images = kTapRunUnits) {
  constexpr int kMaxCuts = 8;
  const TapRunShape shape = tap_run_shape(p.batch, taps, max_images);
  const int positions = shape.positions, chunks = shape.chunks, reach = shape.reach;
  const long long per_segment = p.filter_h * ((p.filter_w + taps - 1) / taps) *
                                ((p.out_c + out_channels - 1) / out_channels) *
                                ((p.in_c + in_channels - 1) / in_channels);
  const int out_h = planned.out_h, region = kernel == 0 ? planned.width0 : planned.out_w - planned.width0;
  const int most_cols = kernel == 1 ? 1 : out_h == 1 ? kMaxCuts * sms : kMaxCuts;
  SegmentGrid best = planned;
  best.bucket_count = 1;
  double best_cost = -1.0;
  for (int parts = 1; parts <= chunks && parts <= kMaxCuts; ++parts) {
    if (chunks % parts != 0) continue;
    for (int cut = 1; cut <= most_cols && cut <= region; ++cut) {
      // Whole steps of positions (tap_runs_fit takes even regions only at two positions a step).
      const int share = (region + cut - 1) / cut, seg_w = (share + positions - 1) / positions * positions;
      const int cols = (region + seg_w - 1) / seg_w;
      // Bands of seg_h rows, the bottom one cut at the last row (fewer); more bands than 4 waves of tiles
      // cannot shorten the work (and would cost host time on tall maps).
      for (int band_cut = 1; band_cut <= out_h && band_cut <= 4 * sms; ++band_cut) {
        const int seg_h = (out_h + band_cut - 1) / band_cut, bands = (out_h + seg_h - 1) / seg_h;
        const long long tiles = (long long)parts * bands * cols * per_segment;
        const double steps = double(seg_h) * (chunks / parts) * ((seg_w + positions - 1) / positions + reach);
        const double cost = double((tiles + sms - 1) / sms) * (steps + overhead_steps);
        if (best_cost < 0 || cost < best_cost) {
          best_cost = cost;
          best.seg_rows = bands;
          best.seg_h = seg_h;
          best.image_parts = parts;
          if (kernel == 0) best.seg_w = seg_w;
        }
      }
    }
  }
  return best;
}

}  // namespace winrs
