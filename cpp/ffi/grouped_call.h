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
  int64_t atomic;    // 1: the splits add into dW as they finish (in any order on the GPU)
};

// Buffers: input N x H x W x C and out_grad N x OH x OW x K in the path's storage type, filter_grad
// K x FH x FW x C_g (float32), stacked as decode_stacked (launch.h) reads them, and a float32 workspace of
// op->workspace_elems(). Returns an error message, empty on success.
template <typename Ret>
std::string decode_grouped_call(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                                Ret& filter_grad, Ret& workspace, const GroupedAttrs& a, GroupedOp* op) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (!valid_path(int(a.path))) return "unknown arithmetic path";
  if (a.sm_count < 1 || a.sm_count > kIntMax || a.splits < 0 || a.splits > kIntMax)
    return "planner attribute out of range";
  if (a.atomic != 0 && a.atomic != 1) return "atomic must be 0 or 1";
  const Path path = static_cast<Path>(a.path);
  StackedBuffers b;
  if (std::string error = decode_stacked(input, out_grad, filter_grad, path, &b); !error.empty())
    return error;
  GroupedShapes s;
  std::copy_n(b.input, 4, s.input);
  std::copy_n(b.out_grad, 4, s.out_grad);
  std::copy_n(b.filter_grad, 4, s.filter_grad);
  s.stacked = b.count;
  s.input_shared = b.input_shared;
  s.grad_shared = b.grad_shared;
  const int64_t pads[4] = {a.pad_top, a.pad_bottom, a.pad_left, a.pad_right};
  std::copy_n(pads, 4, s.pads);
  s.strides[0] = a.stride_h;
  s.strides[1] = a.stride_w;
  s.dilation[0] = a.dilation_h;
  s.dilation[1] = a.dilation_w;
  s.groups = a.groups;
  const GroupedOptions options{path, int(a.sm_count), a.splits, a.atomic == 1};
  if (std::string error = make_grouped(s, options, op); !error.empty()) return error;
  if (int64_t(workspace->element_count()) != op->workspace_elems())
    return "workspace size does not match the plan's (splits - 1) x filter size (0 with atomic adds)";
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
    ::xla::ffi::StructMember<int64_t>("splits"), ::xla::ffi::StructMember<int64_t>("atomic"));
