// Decoding of the FFI attributes that carry a plan, shared by the CPU and CUDA handlers. Every attribute is
// checked against the buffer shapes so that nothing inconsistent reaches a kernel.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "winrs/plan.h"

namespace winrs::ffi_glue {

struct Launch {
  Problem problem;
  int variant0, variant1;
  SegmentGrid grid;
};

// Shapes: input N x I_H x I_W x I_C, out_grad N x O_H x O_W x O_C, filter_grad O_C x F_H x F_W x I_C,
// workspace of workspace_elems floats. Returns an error message, empty on success.
std::string make_launch(const int64_t (&input)[4], const int64_t (&out_grad)[4],
                        const int64_t (&filter_grad)[4], int64_t workspace_elems, const int64_t (&pads)[4],
                        int64_t variant0, int64_t variant1, int64_t seg_rows, int64_t seg_h, int64_t seg_w,
                        int64_t width0, Launch* launch);

// Binds the plan attributes, in the order make_launch takes them, onto an XLA FFI binding.
template <typename Binding>
auto bind_plan_attributes(Binding binding) {
  return std::move(binding)
      .template Attr<int64_t>("pad_top")
      .template Attr<int64_t>("pad_bottom")
      .template Attr<int64_t>("pad_left")
      .template Attr<int64_t>("pad_right")
      .template Attr<int64_t>("variant0")
      .template Attr<int64_t>("variant1")
      .template Attr<int64_t>("seg_rows")
      .template Attr<int64_t>("seg_h")
      .template Attr<int64_t>("seg_w")
      .template Attr<int64_t>("width0");
}

}  // namespace winrs::ffi_glue
