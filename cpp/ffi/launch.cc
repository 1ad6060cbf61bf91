#include "ffi/launch.h"

#include <limits>

namespace winrs::ffi_glue {

std::string make_launch(const int64_t (&input)[4], const int64_t (&out_grad)[4],
                        const int64_t (&filter_grad)[4], int64_t groups, int64_t workspace_elems,
                        const PlanAttrs& a, Launch* launch) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (input[0] != out_grad[0]) return "input and output gradient have different batch sizes";
  if (filter_grad[0] != out_grad[3])
    return "filter gradient and output gradient have different output channels";
  if (filter_grad[3] != input[3]) return "filter gradient and input have different input channels";
  for (int64_t v : {a.seg_rows, a.seg_h, a.seg_w, a.width0, a.variant0, a.variant1})
    if (v < 0 || v > kIntMax) return "plan attribute out of range";

  Problem& p = launch->problem;
  p = Problem{input[0],       input[1],       input[2],  input[3],     out_grad[1], out_grad[2], out_grad[3],
              filter_grad[1], filter_grad[2], a.pad_top, a.pad_bottom, a.pad_left,  a.pad_right};
  for (int64_t d : {p.in_h, p.in_w, p.out_h, p.out_w, p.filter_h, p.filter_w})
    if (d > kIntMax) return "spatial dimension too large";

  launch->variant0 = int(a.variant0);
  launch->variant1 = int(a.variant1);
  launch->grid =
      SegmentGrid{int(p.out_h), int(p.out_w), int(a.seg_rows), int(a.seg_h), int(a.seg_w), int(a.width0)};
  if (std::string error = validate_plan(p, launch->variant0, launch->variant1, launch->grid); !error.empty())
    return error;
  if (groups < 1 || groups > kIntMax) return "number of stacked problems out of range";
  launch->groups = groups;
  if (workspace_elems != groups * (launch->grid.buckets() - 1) * p.filter_elems())
    return "workspace size does not match (buckets - 1) x filter size";
  return {};
}

}  // namespace winrs::ffi_glue
