// The steps of the persistent block's T-tap tiles (wgmma_persistent.cuh, T = 2 or 3): which TMA boxes of dY
// and X fill a step's buffer, and where a K-block's X lies for each tap.
//
// A one-tap tile stages, for every 64 dY units, the 64 X positions of its one filter column
// (pixel_steps.cuh). A tile of T consecutive filter columns f0 .. f0 + T - 1 walks runs of consecutive
// positions of one dY row (for one box of images), so that tap j of unit ow meets X at ow + f0 + j: the X
// that tap 0 of unit ow + j meets. A step copies dY for its units and X for T - 1 positions further on, and
// its taps read X from that step and the `reach` steps before it; a run opens with `reach` steps of X alone.
// Against the one-tap tile on 128 x 256 channels, X is copied once for T taps: 0.0052 bytes per FLOP from L2
// at T = 3 instead of 0.0117 (docs/benchmarks.md, thirty-first stop).
//
// A step is 64 units: one position of 64 images (batches that are multiples of 64, a run per box of 64
// images), or 64 / batch positions of the whole batch (32); units past the run's end read dY as zeros (an
// image past the batch), and X there is any finite value. Boxes are 64 channels of one position of `images`
// images (encode_pixel_boxes), two dY panels and two X panels per step.
#pragma once

#include <cstdint>

#include "cuda/omega.h"
#include "cuda/tma.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

// Steps of T-tap runs over a batch: positions per step (64 / images per box) and steps of X alone at the top
// of a run (T - 1 positions, in whole steps).
struct TapRunShape {
  int images, positions, chunks, reach;
};
__host__ __device__ inline TapRunShape tap_run_shape(long long batch, int taps, int units = 64) {
  const int images = batch < units ? int(batch) : units, positions = units / images;
  return TapRunShape{images, positions, int(batch) / images, (taps - 1 + positions - 1) / positions};
}

template <class C>
struct TapRuns {
  int images;     // per box
  int positions;  // per step: 64 / images
  int chunks;     // boxes of images per position
  int reach;      // steps of X alone at the top of a run: (T - 1) / positions, rounded up
  int width, run_steps, steps;
  int row_offset, col_offset;
  int taps;     // filter columns of this tile (fewer than T in the filter's last tile)
  int outside;  // an image past the batch: dY boxes there read as zeros

  __device__ TapRuns(const Problem& p, const WorkTile& work, const UnitWalk& walk) {
    const TapRunShape shape = tap_run_shape(walk.batch, C::taps, C::copy_units);
    images = shape.images;
    positions = shape.positions;
    chunks = shape.chunks;
    reach = shape.reach;
    width = walk.units_per_row;
    run_steps = reach + (width + positions - 1) / positions;
    steps = walk.rows * chunks * run_steps;
    row_offset = work.fh - int(p.pad_top);
    col_offset = work.f0 - int(p.pad_left);
    taps = int(p.filter_w) - work.f0 < C::taps ? int(p.filter_w) - work.f0 : C::taps;
    outside = int(p.batch);
  }

  // Whether step s has dY (and MMAs), and the bytes that complete its `full` barrier (boxes outside the
  // tensor count whole, as zeros).
  __device__ bool computes(int s) const { return s % run_steps >= reach; }
  __device__ uint32_t bytes(int s) const {
    return uint32_t(computes(s) ? C::grad_panels + C::input_panels : C::input_panels) * C::panel_bytes;
  }

  // Issues step s's boxes into `stage`, completing on `bar` (whose expected bytes the caller has set). Step k
  // of a run holds X positions k P .. k P + P - 1 of the run (P = positions) and, from k = reach on, dY units
  // (k - reach) P .. + P - 1.
  __device__ void issue(const OmegaArgs& args, const WorkTile& work, const UnitWalk& walk,
                        typename C::Smem* stage, uint64_t* bar, int s) const {
    const int run = s / run_steps, k = s % run_steps;
    const int oh = walk.row_begin + run / chunks, image = walk.image0 + run % chunks * images;
    for (int q = 0; q < positions; ++q) {
      const int row = q * images * C::panel_channels;  // the box's first row (unit) in a panel
      const int x_col = walk.w_begin + k * positions + q + col_offset;
#pragma unroll
      for (int panel = 0; panel < C::input_panels; ++panel)
        tma_load_4d(stage + C::input_base + panel * C::panel_elems + row, &args.input_map, bar,
                    work.ic0 + panel * C::panel_channels, x_col, oh + row_offset, image);
      if (k < reach) continue;
      const int unit = (k - reach) * positions + q;
      const int grad_image = unit < width ? image : outside;  // past the run: zeros
#pragma unroll
      for (int panel = 0; panel < C::grad_panels; ++panel)
        tma_load_4d(stage + panel * C::panel_elems + row, &args.grad_map, bar,
                    work.oc0 + panel * C::panel_channels, walk.w_begin + unit, oh, grad_image);
    }
  }

  // Where tap j of K-block `sub` (units 16 sub .. 16 sub + 15 of a step) finds its X, for steps of Positions
  // positions: `back` steps before the step, at row `row` of that step's X. Unit 16 sub is image i of
  // position q of the step; its tap j is run position q + j after the step's first unit, reach - (q + j) / P
  // steps back. Constants for the MMAs' addresses (a division per MMA made the consumers issue-bound).
  struct XPlace {
    int back, row;
  };
  template <int Positions>
  __device__ static constexpr XPlace x_of(int sub, int j) {
    constexpr int images = C::copy_units / Positions, reach = (C::taps - 1 + Positions - 1) / Positions;
    const int first = sub * C::K, q = first / images, shift = q + j;
    return XPlace{reach - shift / Positions, shift % Positions * images + first % images};
  }
};

// Host: the segments that the T-tap tiles run an atomic plan's kernel (0: the primary columns, 1: the
// residual column) on, in place of the plan's. The planner cuts the one-tap kernel's layers into columns a
// position or two wide (one-tap tiles do not care), where a T-tap run would copy T - 1 positions of X alone
// for every one or two it computes; atomic adds let any cut of dY into segments sum into dW, and each tap's
// sum keeps its terms. So: bands of rows, columns, and parts of the batch (boxes of 64 images each), the cut
// that takes the fewest waves of `sms` tiles times a tile's steps (and kOverheadSteps for its start and its
// output). Columns (up to 8; a 1D layer's up to 8 per SM) and parts go up to 8 each.
inline SegmentGrid tap_run_grid(const Problem& p, const SegmentGrid& planned, int kernel, int taps, int sms) {
  constexpr int kChannels = 128, kOverheadSteps = 4, kMaxCuts = 8;
  const TapRunShape shape = tap_run_shape(p.batch, taps);
  const int positions = shape.positions, chunks = shape.chunks, reach = shape.reach;
  const long long per_segment = p.filter_h * ((p.filter_w + taps - 1) / taps) *
                                ((p.out_c + kChannels - 1) / kChannels) *
                                ((p.in_c + kChannels - 1) / kChannels);
  const int out_h = planned.out_h, region = kernel == 0 ? planned.width0 : planned.out_w - planned.width0;
  const int most_cols = kernel == 1 ? 1 : out_h == 1 ? kMaxCuts * sms : kMaxCuts;
  SegmentGrid best = planned;
  best.bucket_count = 1;
  double best_cost = -1.0;
  for (int parts = 1; parts <= chunks && parts <= kMaxCuts; ++parts) {
    if (chunks % parts != 0) continue;
    for (int cut = 1; cut <= most_cols && cut <= region; ++cut) {
      // Whole steps of positions (persistent_taps takes even regions only at two positions a step).
      const int share = (region + cut - 1) / cut, seg_w = (share + positions - 1) / positions * positions;
      const int cols = (region + seg_w - 1) / seg_w;
      // Bands of seg_h rows, the bottom one cut at the last row (fewer); more bands than 4 waves of tiles
      // cannot shorten the work (and would cost host time on tall maps).
      for (int band_cut = 1; band_cut <= out_h && band_cut <= 4 * sms; ++band_cut) {
        const int seg_h = (out_h + band_cut - 1) / band_cut, bands = (out_h + seg_h - 1) / seg_h;
        const long long tiles = (long long)parts * bands * cols * per_segment;
        const double steps = double(seg_h) * (chunks / parts) * ((seg_w + positions - 1) / positions + reach);
        const double cost = double((tiles + sms - 1) / sms) * (steps + kOverheadSteps);
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

}  // namespace winrs::cuda
