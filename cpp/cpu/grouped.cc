#include "cpu/grouped.h"

#include <algorithm>

#include "winrs/numeric.h"
#include "winrs/reduction.h"

namespace winrs::cpu {
namespace {

template <Storage S, int TW, bool kUnitColumns>
void run(const GroupedOp& op, const GroupedBuffers& b, const ParallelFor& parallel_for) {
  constexpr int TH = grouped_tile_rows(TW);
  const GroupedProblem& p = op.problem;
  const GroupedPlan& plan = op.plan;
  const int64_t dw_elems = p.filter_elems();
  // One task: a stacked problem, a split, a unit and kGroupedLanes output channels (the kernel's blocks).
  const int64_t channel_blocks = (p.out_c + kGroupedLanes - 1) / kGroupedLanes;
  auto task = [&](int64_t problem, int64_t split, int64_t unit, int64_t channel_block) {
    const int64_t x0 = problem * op.input_stride, dy0 = problem * op.grad_stride;
    float* const out = plan.split_output(b.filter_grad, b.workspace, dw_elems, problem, split);
    const bool add = plan.atomic && split > 0;
    const int64_t k_end = std::min(p.out_c, (channel_block + 1) * kGroupedLanes);
    for (int64_t k = channel_block * kGroupedLanes; k < k_end; ++k) {
      const GroupedTask t = grouped_task(p, plan, k, unit);
      const int64_t channel = grouped_x_channel(p, t);
      float total[TH][TW] = {};
      for (int slot = 0; slot < kGroupedSlots; ++slot) {  // the kernel's warps, added in the same order
        float acc[TH][TW] = {};
        for (int64_t tile = plan.first_tile(split); tile < plan.first_tile(split + 1); ++tile) {
          const GroupedTileOrigin o = grouped_tile_origin(p, plan, t, tile);
          for_slot_chunks(p, plan, o, slot, [&](int64_t image, int64_t r, int64_t q) {
            // The image's X window and dY as the kernels copy them: zero outside the arrays.
            const int64_t n = o.n + image;
            auto x_at = [&](int64_t row, int64_t col) {
              const TileOffset at = tile_offset(plan, row, col);
              const int64_t ih = o.ih + at.row, iw = o.iw + at.col;
              if (ih < 0 || ih >= p.in_h || iw < 0 || iw >= p.in_w) return 0.0f;
              return load_storage<S>(b.input, x0 + ((n * p.in_h + ih) * p.in_w + iw) * p.in_c + channel);
            };
            auto g_at = [&](int64_t row, int64_t col) {
              const TileOffset at = tile_offset(plan, row, col);
              const int64_t oh = o.oh + at.row, ow = o.ow + at.col;
              if (oh >= p.out_h || ow >= p.out_w) return 0.0f;
              return load_storage<S>(b.out_grad, dy0 + ((n * p.out_h + oh) * p.out_w + ow) * p.out_c + k);
            };
            grouped_chunk<TW, kUnitColumns>(p, t, r, q, x_at, g_at, acc);
          });
        }
        for (int r = 0; r < TH; ++r)
          for (int j = 0; j < TW; ++j) total[r][j] = slot == 0 ? acc[r][j] : total[r][j] + acc[r][j];
      }
      grouped_store<TW>(p, t, total, out, [add](float* at, float v) { *at = add ? *at + v : v; });
    }
  };
  const int64_t per_split = op.stacked * plan.units * channel_blocks;
  auto run_tasks = [&](int64_t split, int64_t splits) {
    parallel_for(splits * per_split, [&](int64_t index) {
      const int64_t channel_block = index % channel_blocks, unit = index / channel_blocks % plan.units;
      const int64_t problem = index / (channel_blocks * plan.units) % op.stacked;
      task(problem, split + index / per_split, unit, channel_block);
    });
  };
  if (plan.atomic) {  // the splits add into dW one after another (the GPU's atomic adds: in any order)
    for (int64_t split = 0; split < plan.splits; ++split) run_tasks(split, 1);
    return;
  }
  run_tasks(0, plan.splits);
  if (plan.splits == 1) return;
  // The splits' sum, as the CUDA split reduction adds them (winrs/reduction.h): same lanes, same tree.
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (dw_elems + kBlock - 1) / kBlock;
  const int lanes = split_sum_lanes(plan.splits);
  parallel_for(op.stacked * blocks, [&](int64_t task) {
    const int64_t problem = task / blocks, first = (task % blocks) * kBlock;
    float* dw = b.filter_grad + problem * dw_elems;
    const float* ws = b.workspace + problem * plan.workspace_elems;
    for (int64_t e = first; e < std::min(first + kBlock, dw_elems); ++e) {
      auto partial = [&](int64_t s) { return s == 0 ? dw[e] : ws[(s - 1) * dw_elems + e]; };
      Compensated sums[32];
      for (int lane = 0; lane < lanes; ++lane) sums[lane] = lane_sum(partial, plan.splits, lane, lanes);
      for (int offset = lanes / 2; offset > 0; offset /= 2)
        for (int lane = 0; lane < offset; ++lane) sums[lane] = merge(sums[lane], sums[lane + offset]);
      dw[e] = sums[0].value();
    }
  });
}

template <Storage S>
void run_storage(const GroupedOp& op, const GroupedBuffers& b, const ParallelFor& parallel_for) {
  dispatch_grouped(op.problem, op.plan, [&](auto tile_w, auto unit) {
    run<S, decltype(tile_w)::value, decltype(unit)::value>(op, b, parallel_for);
  });
}

}  // namespace

void grouped_filter_grad(const GroupedOp& op, const GroupedBuffers& b, const ParallelFor& parallel_for) {
  switch (path_info(op.plan.path).storage) {
    case Storage::kBF16:
      return run_storage<Storage::kBF16>(op, b, parallel_for);
    case Storage::kF16:
      return run_storage<Storage::kF16>(op, b, parallel_for);
    default:
      return run_storage<Storage::kF32>(op, b, parallel_for);
  }
}

}  // namespace winrs::cpu
