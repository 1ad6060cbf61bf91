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

template <class C>
struct TapRuns {
  int images;     // per box
  int positions;  // per step: 64 / images
  int chunks;     // boxes of images per position
  int reach;      // steps of X alone at the top of a run: (T - 1) / positions, rounded up
  int width, run_steps, steps;
  int row_offset, col_offset;
  int taps;  // filter columns of this tile (fewer than T in the filter's last tile)

  __device__ TapRuns(const Problem& p, const WorkTile& work, const UnitWalk& walk) {
    images = walk.batch < C::copy_units ? walk.batch : C::copy_units;
    positions = C::copy_units / images;
    chunks = walk.batch / images;
    reach = (C::taps - 1 + positions - 1) / positions;
    width = walk.units_per_row;
    run_steps = reach + (width + positions - 1) / positions;
    steps = walk.rows * chunks * run_steps;
    row_offset = work.fh - int(p.pad_top);
    col_offset = work.f0 - int(p.pad_left);
    taps = int(p.filter_w) - work.f0 < C::taps ? int(p.filter_w) - work.f0 : C::taps;
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
    const int oh = walk.row_begin + run / chunks, image = run % chunks * images;
    for (int q = 0; q < positions; ++q) {
      const int row = q * images * C::panel_channels;  // the box's first row (unit) in a panel
      const int x_col = walk.w_begin + k * positions + q + col_offset;
#pragma unroll
      for (int panel = 0; panel < C::input_panels; ++panel)
        tma_load_4d(stage + C::input_base + panel * C::panel_elems + row, &args.input_map, bar,
                    work.ic0 + panel * C::panel_channels, x_col, oh + row_offset, image);
      if (k < reach) continue;
      const int unit = (k - reach) * positions + q;
      const int grad_image = unit < width ? image : walk.batch;  // past the run: zeros
#pragma unroll
      for (int panel = 0; panel < C::grad_panels; ++panel)
        tma_load_4d(stage + panel * C::panel_elems + row, &args.grad_map, bar,
                    work.oc0 + panel * C::panel_channels, walk.w_begin + unit, oh, grad_image);
    }
  }

  // Where tap j of K-block `sub` (units 16 sub .. 16 sub + 15 of a step) finds its X: `back` steps before the
  // step, at row `row` of that step's X. Unit 16 sub is image i of position q of the step; its tap j is run
  // position q + j after the step's first unit, reach - (q + j) / P steps back.
  __device__ void x_of(int sub, int j, int* back, int* row) const {
    const int first = sub * C::K, q = first / images, shift = q + j;
    *back = reach - shift / positions;
    *row = shift % positions * images + first % images;
  }
};

}  // namespace winrs::cuda
