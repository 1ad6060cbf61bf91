// Decoding of one "winrs_grouped_filter_grad" FFI call (the direct grouped kernels, winrs/grouped.h), shared
// by the CPU and CUDA handlers. As for WinRS, the attributes are the planner's inputs and the handler derives
// the plan from them and the buffer shapes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "ffi/launch.h"
#include "winrs/grouped.h"
#include "xla/ffi/api/ffi.h"

namespace winrs::ffi_glue {

// winrs_jax.Plan.ffi_attributes of a direct grouped plan in Python.
struct GroupedAttrs {
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t stride_h, stride_w, dilation_h, dilation_w;
  int64_t groups;
  int64_t path;      // winrs::Path: fp32, bf16 or fp16 (the storage type; arithmetic is FP32)
  int64_t sm_count;  // the planner's target GPU
  int64_t splits;    // > 0 forces the split count
};

// Buffers: input N x H x W x C and out_grad N x OH x OW x K in the path's storage type, filter_grad
// K x FH x FW x C_g (float32), each behind the same leading (stacked) axes, of which X or dY may have all
// size 1 (shared), and a float32 workspace of op->workspace_elems(). Returns an error message, empty on
// success.
template <typename Ret>
std::string decode_grouped_call(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                                Ret& filter_grad, Ret& workspace, const GroupedAttrs& a, GroupedOp* op) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (!valid_path(int(a.path))) return "unknown arithmetic path";
  if (a.sm_count < 1 || a.sm_count > kIntMax || a.splits < 0 || a.splits > kIntMax)
    return "planner attribute out of range";
  const Path path = static_cast<Path>(a.path);
  if (input.element_type() != storage_dtype(path) || out_grad.element_type() != storage_dtype(path))
    return std::string("input and output gradient must be stored as the element type of path ") +
           path_info(path).name;
  const auto x = input.dimensions(), dy = out_grad.dimensions(), dw = filter_grad->dimensions();
  if (x.size() < 4 || x.size() != dy.size() || x.size() != dw.size())
    return "input, output gradient and filter gradient need rank 4 plus the same number of leading axes";
  const size_t lead = x.size() - 4;
  GroupedShapes s;
  s.input_shared = s.grad_shared = lead > 0;
  for (size_t d = 0; d < lead; ++d) {
    s.input_shared = s.input_shared && x[d] == 1;
    s.grad_shared = s.grad_shared && dy[d] == 1;
    s.stacked *= dw[d];
  }
  for (size_t d = 0; d < lead; ++d)
    if ((x[d] != dw[d] && !s.input_shared) || (dy[d] != dw[d] && !s.grad_shared))
      return "leading (stacked) axes of the input and output gradient must equal the filter gradient's, or "
             "all be 1";
  std::copy_n(x.begin() + lead, 4, s.input);
  std::copy_n(dy.begin() + lead, 4, s.out_grad);
  std::copy_n(dw.begin() + lead, 4, s.filter_grad);
  const int64_t pads[4] = {a.pad_top, a.pad_bottom, a.pad_left, a.pad_right};
  std::copy_n(pads, 4, s.pads);
  s.strides[0] = a.stride_h;
  s.strides[1] = a.stride_w;
  s.dilation[0] = a.dilation_h;
  s.dilation[1] = a.dilation_w;
  s.groups = a.groups;
  const GroupedOptions options{path, int(a.sm_count), a.splits};
  if (std::string error = make_grouped(s, options, op); !error.empty()) return error;
  if (int64_t(workspace->element_count()) != op->workspace_elems())
    return "workspace size does not match the plan's (splits - 1) x filter size";
  return {};
}

}  // namespace winrs::ffi_glue

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    winrs::ffi_glue::GroupedAttrs, ::xla::ffi::StructMember<int64_t>("pad_top"),
    ::xla::ffi::StructMember<int64_t>("pad_bottom"), ::xla::ffi::StructMember<int64_t>("pad_left"),
    ::xla::ffi::StructMember<int64_t>("pad_right"), ::xla::ffi::StructMember<int64_t>("stride_h"),
    ::xla::ffi::StructMember<int64_t>("stride_w"), ::xla::ffi::StructMember<int64_t>("dilation_h"),
    ::xla::ffi::StructMember<int64_t>("dilation_w"), ::xla::ffi::StructMember<int64_t>("groups"),
    ::xla::ffi::StructMember<int64_t>("path"), ::xla::ffi::StructMember<int64_t>("sm_count"),
    ::xla::ffi::StructMember<int64_t>("splits"));
