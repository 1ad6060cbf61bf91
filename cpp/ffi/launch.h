// Decoding of one FFI call (buffer shapes and the plan attributes), shared by the CPU and CUDA handlers.
// Every attribute is checked against the buffer shapes so that nothing inconsistent reaches a kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "winrs/plan.h"
#include "xla/ffi/api/ffi.h"

namespace winrs::ffi_glue {

// The plan as FFI attributes (winrs_jax.Plan.ffi_attributes in Python).
struct PlanAttrs {
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t variant0, variant1;
  int64_t seg_rows, seg_h, seg_w, width0;
};

struct Launch {
  Problem problem;
  int variant0, variant1;
  SegmentGrid grid;
  // Independent problems of the same shape stacked on leading axes (vmap with vmap_method="broadcast_all").
  int64_t groups = 1;
};

// Shapes: input N x I_H x I_W x I_C, out_grad N x O_H x O_W x O_C, filter_grad O_C x F_H x F_W x I_C, each
// behind `groups` stacked problems, and a workspace of workspace_elems floats. Returns an error message,
// empty on success.
std::string make_launch(const int64_t (&input)[4], const int64_t (&out_grad)[4],
                        const int64_t (&filter_grad)[4], int64_t groups, int64_t workspace_elems,
                        const PlanAttrs& attrs, Launch* launch);

// The same from the handler's buffers (results by reference: their accessors are not const). Buffers have
// rank 4, plus the same leading axes on all three when vmap stacked several problems.
template <typename Arg, typename Ret, typename Ws>
std::string decode_launch(const Arg& input, const Arg& out_grad, Ret& filter_grad, Ws& workspace,
                          const PlanAttrs& attrs, Launch* launch) {
  const auto x = input.dimensions(), dy = out_grad.dimensions(), dw = filter_grad->dimensions();
  if (x.size() < 4 || x.size() != dy.size() || x.size() != dw.size())
    return "input, output gradient and filter gradient need rank 4 plus the same number of leading axes";
  const size_t lead = x.size() - 4;
  int64_t groups = 1;
  for (size_t d = 0; d < lead; ++d) {
    if (x[d] != dy[d] || x[d] != dw[d]) return "leading (vmapped) axes differ between the buffers";
    groups *= x[d];
  }
  int64_t xs[4], dys[4], dws[4];
  std::copy_n(x.begin() + lead, 4, xs);
  std::copy_n(dy.begin() + lead, 4, dys);
  std::copy_n(dw.begin() + lead, 4, dws);
  return make_launch(xs, dys, dws, groups, int64_t(workspace->element_count()), attrs, launch);
}

}  // namespace winrs::ffi_glue

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    winrs::ffi_glue::PlanAttrs, ::xla::ffi::StructMember<int64_t>("pad_top"),
    ::xla::ffi::StructMember<int64_t>("pad_bottom"), ::xla::ffi::StructMember<int64_t>("pad_left"),
    ::xla::ffi::StructMember<int64_t>("pad_right"), ::xla::ffi::StructMember<int64_t>("variant0"),
    ::xla::ffi::StructMember<int64_t>("variant1"), ::xla::ffi::StructMember<int64_t>("seg_rows"),
    ::xla::ffi::StructMember<int64_t>("seg_h"), ::xla::ffi::StructMember<int64_t>("seg_w"),
    ::xla::ffi::StructMember<int64_t>("width0"));
