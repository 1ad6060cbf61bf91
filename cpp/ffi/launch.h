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
};

// Shapes: input N x I_H x I_W x I_C, out_grad N x O_H x O_W x O_C, filter_grad O_C x F_H x F_W x I_C,
// workspace of workspace_elems floats. Returns an error message, empty on success.
std::string make_launch(const int64_t (&input)[4], const int64_t (&out_grad)[4],
                        const int64_t (&filter_grad)[4], int64_t workspace_elems, const PlanAttrs& attrs,
                        Launch* launch);

// The same from the handler's buffers (results by reference: their accessors are not const).
template <typename Arg, typename Ret4, typename Ret1>
std::string decode_launch(const Arg& input, const Arg& out_grad, Ret4& filter_grad, Ret1& workspace,
                          const PlanAttrs& attrs, Launch* launch) {
  int64_t x[4], dy[4], dw[4];
  std::copy_n(input.dimensions().begin(), 4, x);
  std::copy_n(out_grad.dimensions().begin(), 4, dy);
  std::copy_n(filter_grad->dimensions().begin(), 4, dw);
  return make_launch(x, dy, dw, int64_t(workspace->element_count()), attrs, launch);
}

}  // namespace winrs::ffi_glue

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    winrs::ffi_glue::PlanAttrs, ::xla::ffi::StructMember<int64_t>("pad_top"),
    ::xla::ffi::StructMember<int64_t>("pad_bottom"), ::xla::ffi::StructMember<int64_t>("pad_left"),
    ::xla::ffi::StructMember<int64_t>("pad_right"), ::xla::ffi::StructMember<int64_t>("variant0"),
    ::xla::ffi::StructMember<int64_t>("variant1"), ::xla::ffi::StructMember<int64_t>("seg_rows"),
    ::xla::ffi::StructMember<int64_t>("seg_h"), ::xla::ffi::StructMember<int64_t>("seg_w"),
    ::xla::ffi::StructMember<int64_t>("width0"));
