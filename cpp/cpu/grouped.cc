#include "cpu/grouped.h"

#include <algorithm>
#include <cstring>

#include "winrs/numeric.h"
#include "winrs/reduction.h"

namespace winrs::cpu {
namespace {

template <Storage S>
struct HostElem {
  using T = std::conditional_t<S == Storage::kF32, float, uint16_t>;
  static float get(const T* p, int64_t i) {
    if constexpr (S == Storage::kF32) {
      return p[i];
    } else {
      return S == Storage::kBF16 ? bf16_bits_to_float(p[i]) : f16_bits_to_float(p[i]);
    }
  }
};

template <Storage S, int TW, bool kUnitColumns>
void run(const GroupedOp& op, const GroupedBuffers& b, const ParallelFor& parallel_for) {
  using Elem = HostElem<S>;
  using T = typename Elem::T;
  constexpr int TH = grouped_tile_rows(TW);
  const GroupedProblem& p = op.problem;
  const GroupedPlan& plan = op.plan;
  const int64_t dw_elems = p.filter_elems();
  // One task: a stacked problem, a split and a unit, for every output channel (the kernel's blocks).
  parallel_for(op.stacked * plan.splits * plan.units, [&](int64_t task) {
    const int64_t unit = task % plan.units, split = (task / plan.units) % plan.splits;
    const int64_t problem = task / (plan.units * plan.splits);
    const T* x = static_cast<const T*>(b.input) + problem * op.input_stride;
    const T* dy = static_cast<const T*>(b.out_grad) + problem * op.grad_stride;
    float* out = split == 0 ? b.filter_grad + problem * dw_elems
                            : b.workspace + problem * plan.workspace_elems + (split - 1) * dw_elems;
    for (int64_t k = 0; k < p.out_c; ++k) {
      const GroupedTask t = grouped_task(p, plan, k, unit);
      float total[TH][TW] = {};
      for (int slot = 0; slot < kGroupedSlots; ++slot) {  // the kernel's warps, summed in the same order
        float acc[TH][TW] = {};
        grouped_sum<TW, kUnitColumns, Elem>(p, plan, x, dy, t, split * kGroupedSlots + slot, acc);
        for (int r = 0; r < TH; ++r)
          for (int j = 0; j < TW; ++j) total[r][j] = slot == 0 ? acc[r][j] : total[r][j] + acc[r][j];
      }
      grouped_store<TW>(p, t, total, out);
    }
  });
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
