// The steps of the one-tap blocks staged by the TMA: which boxes of dY and X fill a step's buffer. Shared by
// the 128 x 128 block of one work tile (WgmmaConfig with Tma; omega_kernel.cuh, tma_main_loop) and the
// persistent 128 x 256 block that walks many (wgmma_persistent.cuh).
//
// A step is one pixel of 64 images (batches that are multiples of 64), or the whole batch of 64 / batch
// consecutive pixels of the walk (batches of 32; 16 and 8 work too, which the launch leaves to cp.async);
// past the walk's end, boxes outside the tensor that read as zeros. Each box is 64 channels (one 128-byte
// swizzle row) of one pixel of `images` images; a step holds dY's 64-channel panels (two) and X's (two, or
// four in the 128 x 256 block).
#pragma once

#include "cuda/omega.h"
#include "cuda/tma.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

template <class C>
struct PixelSteps {
  int images;     // per box
  int boxes;      // pixels per step (1 for batches of 64 and more)
  int per_pixel;  // steps per pixel (1 for smaller batches)
  int pixels, steps, row_offset, col_offset;

  __device__ PixelSteps(const Problem& p, const WorkTile& work, const UnitWalk& walk) {
    images = walk.batch < C::copy_units ? walk.batch : C::copy_units;
    boxes = C::copy_units / images;
    per_pixel = walk.batch / images;
    pixels = walk.rows * walk.units_per_row;
    steps = per_pixel > 1 ? pixels * per_pixel : (pixels + boxes - 1) / boxes;
    row_offset = work.fh - int(p.pad_top);
    col_offset = work.f0 - int(p.pad_left);
  }

  // Bytes that complete a step's `full` barrier (boxes outside the tensor count whole, as zeros).
  static constexpr uint32_t step_bytes = (C::grad_panels + C::input_panels) * C::panel_bytes;
  // As TapRuns's (tap_runs.cuh) for the persistent block: one tap, every step with MMAs, X of its own.
  static constexpr int taps = 1, reach = 0;
  __device__ bool computes(int) const { return true; }
  __device__ uint32_t bytes(int) const { return step_bytes; }

  // Issues step s's boxes into `stage`, completing on `bar` (whose expected bytes the caller has set).
  __device__ void issue(const OmegaArgs& args, const WorkTile& work, const UnitWalk& walk,
                        typename C::Smem* stage, uint64_t* bar, int s) const {
    for (int b = 0; b < boxes; ++b) {
      const int pixel = per_pixel > 1 ? s / per_pixel : s * boxes + b;
      // Whole batches only (the launch leaves image parts to the window): past the walk's end, an image past
      // the batch, which reads as zeros.
      const int image = per_pixel > 1 ? s % per_pixel * images : pixel < pixels ? 0 : walk.batch;
      const int oh = walk.row_begin + pixel / walk.units_per_row,
                ow = walk.w_begin + pixel % walk.units_per_row;
      const int row = b * images * C::panel_channels;  // the box's first row (unit) in a panel
#pragma unroll
      for (int panel = 0; panel < C::grad_panels; ++panel)
        tma_load_4d(stage + panel * C::panel_elems + row, &args.grad_map, bar,
                    work.oc0 + panel * C::panel_channels, ow, oh, image);
#pragma unroll
      for (int panel = 0; panel < C::input_panels; ++panel)
        tma_load_4d(stage + C::input_base + panel * C::panel_elems + row, &args.input_map, bar,
                    work.ic0 + panel * C::panel_channels, ow + col_offset, oh + row_offset, image);
    }
  }
};

}  // namespace winrs::cuda
