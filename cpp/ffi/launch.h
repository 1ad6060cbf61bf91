// Decoding of one FFI call into the backward-filter operator, shared by the CPU and CUDA handlers. The
// attributes are the planner's inputs; the handler derives the plan from them and the buffer shapes
// (winrs/operator.h), so nothing inconsistent reaches a kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "winrs/operator.h"
#include "xla/ffi/api/ffi.h"

namespace winrs::ffi_glue {

// winrs_jax.Plan.ffi_attributes in Python.
struct PlanAttrs {
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t path;                // winrs::Path
  int64_t reference;           // winrs::Path whose accuracy the kernels must keep
  int64_t sm_count;            // the planner's target GPU
  int64_t segments;            // > 0 forces Z^
  int64_t variant0, variant1;  // >= 0 force the kernel pair
};

inline xla::ffi::DataType storage_dtype(Path path) {
  switch (path_info(path).storage) {
    case Storage::kBF16:
      return xla::ffi::DataType::BF16;
    case Storage::kF16:
      return xla::ffi::DataType::F16;
    default:
      return xla::ffi::DataType::F32;
  }
}

// Buffers: input N x I_H x I_W x I_C and out_grad N x O_H x O_W x O_C in the path's storage type, filter_grad
// O_C x F_H x F_W x I_C (float32), each behind the same leading (vmapped) axes, and a float32 workspace of
// op->workspace_elems(). An input or output gradient whose leading axes all have size 1 is shared by every
// stacked problem (vmap's expand_dims: no copies). Returns an error message, empty on success.
template <typename Ret>
std::string decode_call(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                        Ret& filter_grad, Ret& workspace, const PlanAttrs& a, BackwardFilterOp* op) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (!valid_path(int(a.path)) || !valid_path(int(a.reference))) return "unknown arithmetic path";
  if (a.sm_count < 1 || a.sm_count > kIntMax || a.segments < 0 || a.segments > kIntMax)
    return "planner attribute out of range";
  for (int64_t v : {a.variant0, a.variant1})
    if (v < -1 || v > kIntMax) return "kernel variant index out of range";
  const PlanOptions options{static_cast<Path>(a.path), static_cast<Path>(a.reference),
                            int(a.sm_count),           int(a.segments),
                            int(a.variant0),           int(a.variant1)};
  if (input.element_type() != storage_dtype(options.path) ||
      out_grad.element_type() != storage_dtype(options.path))
    return std::string("input and output gradient must be stored as the element type of path ") +
           path_info(options.path).name;

  const auto x = input.dimensions(), dy = out_grad.dimensions(), dw = filter_grad->dimensions();
  if (x.size() < 4 || x.size() != dy.size() || x.size() != dw.size())
    return "input, output gradient and filter gradient need rank 4 plus the same number of leading axes";
  const size_t lead = x.size() - 4;
  Shapes shapes;
  shapes.input_shared = shapes.grad_shared = lead > 0;
  for (size_t d = 0; d < lead; ++d) {
    shapes.input_shared = shapes.input_shared && x[d] == 1;
    shapes.grad_shared = shapes.grad_shared && dy[d] == 1;
    shapes.groups *= dw[d];
  }
  for (size_t d = 0; d < lead; ++d)
    if ((x[d] != dw[d] && !shapes.input_shared) || (dy[d] != dw[d] && !shapes.grad_shared))
      return "leading (vmapped) axes of the input and output gradient must equal the filter gradient's, or "
             "all be 1";
  std::copy_n(x.begin() + lead, 4, shapes.input);
  std::copy_n(dy.begin() + lead, 4, shapes.out_grad);
  std::copy_n(dw.begin() + lead, 4, shapes.filter_grad);
  const int64_t pads[4] = {a.pad_top, a.pad_bottom, a.pad_left, a.pad_right};
  std::copy_n(pads, 4, shapes.pads);
  if (std::string error = make_backward_filter(shapes, options, op); !error.empty()) return error;
  if (int64_t(workspace->element_count()) != op->workspace_elems())
    return "workspace size does not match the plan's (buckets - 1) x filter size";
  return {};
}

}  // namespace winrs::ffi_glue

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    winrs::ffi_glue::PlanAttrs, ::xla::ffi::StructMember<int64_t>("pad_top"),
    ::xla::ffi::StructMember<int64_t>("pad_bottom"), ::xla::ffi::StructMember<int64_t>("pad_left"),
    ::xla::ffi::StructMember<int64_t>("pad_right"), ::xla::ffi::StructMember<int64_t>("path"),
    ::xla::ffi::StructMember<int64_t>("reference"), ::xla::ffi::StructMember<int64_t>("sm_count"),
    ::xla::ffi::StructMember<int64_t>("segments"), ::xla::ffi::StructMember<int64_t>("variant0"),
    ::xla::ffi::StructMember<int64_t>("variant1"));
