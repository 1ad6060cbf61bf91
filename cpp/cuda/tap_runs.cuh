// The TMA boxes of the persistent block's T-tap tiles (wgmma_persistent.cuh, T = 2 or 3): a step's buffer
// holds dY's two 64-channel panels and X's two, each box 64 channels of one position of `images` images
// (encode_pixel_boxes). Which units and positions a step holds, and where a K-block's X lies for each tap:
// winrs/tap_runs.h (its index math is checked on the host by tests/cpp/tap_runs_check.cc).
#pragma once

#include <cstdint>

#include "cuda/omega.h"
#include "cuda/tma.cuh"
#include "winrs/tap_runs.h"

namespace winrs::cuda {

template <class C>
struct TapRuns : TapRunWalk {
  static_assert(C::copy_units == kTapRunUnits && C::K == kTapRunBlock);

  __device__ TapRuns(const Problem& p, const WorkTile& work, const UnitWalk& walk)
      : TapRunWalk(p, work, walk, C::taps, C::max_images) {}

  // The bytes that complete step s's `full` barrier (boxes outside the tensor count whole, as zeros).
  __device__ uint32_t bytes(int s) const {
    return uint32_t(computes(s) ? C::grad_panels + C::input_panels : C::input_panels) * C::panel_bytes;
  }

  // Issues step s's boxes into `stage`, completing on `bar` (whose expected bytes the caller has set).
  __device__ void issue(const OmegaArgs& args, const WorkTile& work, const UnitWalk& walk,
                        typename C::Smem* stage, uint64_t* bar, int s) const {
    boxes(work, walk, s, C::input_panels, C::grad_panels, C::panel_channels,
          [&](bool grad, int panel, int q, int c0, int c1, int c2, int c3) {
            const int row = q * images * C::panel_channels;  // the box's first row (unit) in a panel
            tma_load_4d(stage + (grad ? 0 : C::input_base) + panel * C::panel_elems + row,
                        grad ? &args.grad_map : &args.input_map, bar, c0, c1, c2, c3);
          });
  }

  // Tap j of K-block `sub` at Positions positions a step (winrs/tap_runs.h, tap_x_place): a constant.
  using XPlace = TapXPlace;
  template <int Positions>
  __device__ static constexpr XPlace x_of(int sub, int j) {
    return tap_x_place(C::taps, Positions, sub, j);
  }
};

}  // namespace winrs::cuda
