#include "operator.h"

#include <limits>

#include "variants.h"

namespace winrs {

std::string make_backward_filter(const Shapes& s, const PlanOptions& options, BackwardFilterOp* op) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (s.input[0] != s.out_grad[0]) return "input and output gradient have different batch sizes";
  if (s.filter_grad[0] != s.out_grad[3])
    return "filter gradient and output gradient have different output channels";
  if (s.filter_grad[3] != s.input[3]) return "filter gradient and input have different input channels";
  if (s.groups < 1 || s.groups > kIntMax) return "number of stacked problems out of range";
  op->problem = Problem{s.input[0],       s.input[1],    s.input[2],    s.input[3],
                        s.out_grad[1],    s.out_grad[2], s.out_grad[3], s.filter_grad[1],
                        s.filter_grad[2], s.pads[0],     s.pads[1],     s.pads[2],
                        s.pads[3],        s.strides[0],  s.strides[1],  options.smem_per_block};
  const Problem& p = op->problem;
  for (int64_t d : {p.in_h, p.in_w, p.out_h, p.out_w, p.filter_h, p.filter_w, p.stride_h, p.stride_w})
    if (d > kIntMax) return "spatial dimension too large";
  op->groups = s.groups;
  op->input_group_stride = s.input_shared ? 0 : p.input_elems();
  op->grad_group_stride = s.grad_shared ? 0 : p.grad_elems();
  op->plan = make_plan(p, options);
  return op->plan.supported ? std::string() : op->plan.reason;
}

bool reads_depth_in_place(const Problem& p, const Plan& plan) {
  return plan.supported && path_info(plan.path).tensor_cores && plan.variant0 == 0 &&
         tile_shape(0, plan.path, p).columns == kDirectTaps && plan.grid.width0 == plan.grid.out_w;
}

}  // namespace winrs
