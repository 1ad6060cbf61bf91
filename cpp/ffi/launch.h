// Decoding of one FFI call into the backward-filter operator, shared by the CPU and CUDA handlers. The
// attributes are the planner's inputs; the handler derives the plan from them and the buffer shapes
// (winrs/operator.h), so nothing inconsistent reaches a kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <type_traits>

#include "winrs/operator.h"
#include "xla/ffi/api/ffi.h"

namespace winrs::ffi_glue {

// winrs_jax.Plan.ffi_attributes in Python.
struct PlanAttrs {
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t stride_h, stride_w;  // read in place by the direct kernel's filter-row tile only (problem.h)
  int64_t path;                // winrs::Path
  int64_t reference;           // winrs::Path whose accuracy the kernels must keep
  int64_t sm_count;            // the planner's target GPU
  int64_t segments;            // > 0 forces Z^
  int64_t buckets;             // > 0 caps the bucket count
  int64_t variant0, variant1;  // >= 0 force the kernel pair
  int64_t atomic;              // 1: segments add into dW atomically, in any order
  int64_t smem_per_block;      // the planner's target GPU's opt-in shared memory per block (winrs/smem.h)
};

// The attributes of the targets before the GPU's shared memory ("winrs_backward_filter_v2",
// "winrs_backward_filter_3d_v2") and before the strides ("winrs_backward_filter",
// "winrs_backward_filter_3d"), still registered so that programs exported with them keep running: planned for
// an H100, and strides 1.
struct PlanAttrsV2 {
  int64_t pad_top, pad_bottom, pad_left, pad_right, stride_h, stride_w, path, reference, sm_count, segments,
      buckets, variant0, variant1, atomic;
};
struct PlanAttrsV1 {
  int64_t pad_top, pad_bottom, pad_left, pad_right, path, reference, sm_count, segments, buckets, variant0,
      variant1, atomic;
};
inline PlanAttrs upgrade(const PlanAttrsV2& a) {
  return {a.pad_top,  a.pad_bottom, a.pad_left,  a.pad_right, a.stride_h,
          a.stride_w, a.path,       a.reference, a.sm_count,  a.segments,
          a.buckets,  a.variant0,   a.variant1,  a.atomic,    kHopperSmemPerBlock};
}
inline PlanAttrs upgrade(const PlanAttrsV1& a) {
  return upgrade(PlanAttrsV2{a.pad_top, a.pad_bottom, a.pad_left, a.pad_right, 1, 1, a.path, a.reference,
                             a.sm_count, a.segments, a.buckets, a.variant0, a.variant1, a.atomic});
}
inline const PlanAttrs& upgrade(const PlanAttrs& a) { return a; }

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

// The stacked problems of one call, shared by both targets: X, dY and dW are each a rank-4 problem behind
// the same leading (vmapped) axes, of which X or dY may have all size 1 (shared by every problem, no copies).
struct StackedBuffers {
  int64_t input[4], out_grad[4], filter_grad[4];  // one problem's dimensions
  int64_t count = 1;                              // stacked problems
  bool input_shared = false, grad_shared = false;
};

// That X and dY are stored as `path`'s storage type: an error message, empty if they are.
inline std::string check_storage(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                                 Path path) {
  if (input.element_type() != storage_dtype(path) || out_grad.element_type() != storage_dtype(path))
    return std::string("input and output gradient must be stored as the element type of path ") +
           path_info(path).name;
  return {};
}

// Checks that X and dY are stored as `path`'s storage type and reads the stacking. Returns an error message,
// empty on success.
template <typename Ret>
std::string decode_stacked(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                           Ret& filter_grad, Path path, StackedBuffers* out) {
  if (std::string error = check_storage(input, out_grad, path); !error.empty()) return error;
  const auto x = input.dimensions(), dy = out_grad.dimensions(), dw = filter_grad->dimensions();
  if (x.size() < 4 || x.size() != dy.size() || x.size() != dw.size())
    return "input, output gradient and filter gradient need rank 4 plus the same number of leading axes";
  const size_t lead = x.size() - 4;
  out->input_shared = out->grad_shared = lead > 0;
  for (size_t d = 0; d < lead; ++d) {
    out->input_shared = out->input_shared && x[d] == 1;
    out->grad_shared = out->grad_shared && dy[d] == 1;
    out->count *= dw[d];
  }
  for (size_t d = 0; d < lead; ++d)
    if ((x[d] != dw[d] && !out->input_shared) || (dy[d] != dw[d] && !out->grad_shared))
      return "leading (vmapped) axes of the input and output gradient must equal the filter gradient's, or "
             "all be 1";
  std::copy_n(x.begin() + lead, 4, out->input);
  std::copy_n(dy.begin() + lead, 4, out->out_grad);
  std::copy_n(dw.begin() + lead, 4, out->filter_grad);
  return {};
}

// The planner's options from the attributes; an error message, empty on success.
inline std::string decode_options(const PlanAttrs& a, PlanOptions* options) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (!valid_path(int(a.path)) || !valid_path(int(a.reference))) return "unknown arithmetic path";
  if (a.sm_count < 1 || a.sm_count > kIntMax || a.segments < 0 || a.segments > kIntMax || a.buckets < 0 ||
      a.buckets > kIntMax)
    return "planner attribute out of range";
  for (int64_t v : {a.variant0, a.variant1})
    if (v < -1 || v > kIntMax) return "kernel variant index out of range";
  if (a.atomic != 0 && a.atomic != 1) return "atomic must be 0 or 1";
  if (a.stride_h < 1 || a.stride_h > kIntMax || a.stride_w < 1 || a.stride_w > kIntMax)
    return "strides must be from 1 to 2^31 - 1";
  if (a.smem_per_block < 1 || a.smem_per_block > kIntMax)
    return "shared memory per block must be from 1 to 2^31 - 1 bytes";
  options->path = static_cast<Path>(a.path);
  options->reference = static_cast<Path>(a.reference);
  options->sm_count = int(a.sm_count);
  options->segments = int(a.segments);
  options->buckets = int(a.buckets);
  options->variant0 = int(a.variant0);
  options->variant1 = int(a.variant1);
  options->atomic = a.atomic == 1;
  options->smem_per_block = a.smem_per_block;
  return {};
}

// That the workspace buffer holds the plan's workspace: an error message, empty if it does.
template <typename Ret>
std::string check_workspace(Ret& workspace, const BackwardFilterOp& op) {
  if (int64_t(workspace->element_count()) != op.workspace_elems())
    return "workspace size does not match the plan's (buckets 1..B-1 and semaphores)";
  return {};
}

// Buffers: input N x I_H x I_W x I_C and out_grad N x O_H x O_W x O_C in the path's storage type, filter_grad
// O_C x F_H x F_W x I_C (float32), stacked as decode_stacked reads them, and a float32 workspace of
// op->workspace_elems() (buckets and semaphores, plan.h). Returns an error message, empty on success.
template <typename Ret>
std::string decode_call(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                        Ret& filter_grad, Ret& workspace, const PlanAttrs& a, BackwardFilterOp* op) {
  PlanOptions options;
  if (std::string error = decode_options(a, &options); !error.empty()) return error;
  StackedBuffers b;
  if (std::string error = decode_stacked(input, out_grad, filter_grad, options.path, &b); !error.empty())
    return error;
  Shapes shapes;
  std::copy_n(b.input, 4, shapes.input);
  std::copy_n(b.out_grad, 4, shapes.out_grad);
  std::copy_n(b.filter_grad, 4, shapes.filter_grad);
  const int64_t pads[4] = {a.pad_top, a.pad_bottom, a.pad_left, a.pad_right};
  std::copy_n(pads, 4, shapes.pads);
  shapes.strides[0] = a.stride_h;
  shapes.strides[1] = a.stride_w;
  shapes.groups = b.count;
  shapes.input_shared = b.input_shared;
  shapes.grad_shared = b.grad_shared;
  if (std::string error = make_backward_filter(shapes, options, op); !error.empty()) return error;
  return check_workspace(workspace, *op);
}

// winrs_jax.Plan.ffi_attributes of a 3D layer read in place (the winrs_backward_filter_3d_v2 target): the
// plan's attributes, then the depth geometry (DepthView).
struct DepthAttrs {
  PlanAttrs plan;
  int64_t in_depth, out_depth, depth_stride, depth_dilation, depth_pad;
  int64_t filter_depth;  // the layer's depth taps (a packed call's last problem may hold fewer)
};

struct DepthAttrsV2 {
  PlanAttrsV2 plan;
  int64_t in_depth, out_depth, depth_stride, depth_dilation, depth_pad, filter_depth;
};
struct DepthAttrsV1 {
  PlanAttrsV1 plan;
  int64_t in_depth, out_depth, depth_stride, depth_dilation, depth_pad, filter_depth;
};
template <class OldDepthAttrs>
DepthAttrs upgrade_depth(const OldDepthAttrs& a) {
  return {upgrade(a.plan),  a.in_depth,  a.out_depth,   a.depth_stride,
          a.depth_dilation, a.depth_pad, a.filter_depth};
}
inline DepthAttrs upgrade(const DepthAttrsV2& a) { return upgrade_depth(a); }
inline DepthAttrs upgrade(const DepthAttrsV1& a) { return upgrade_depth(a); }
inline const DepthAttrs& upgrade(const DepthAttrs& a) { return a; }

// Buffers: input N x D x I_H x I_W x I_C and out_grad N x OD x O_H x O_W x O_C in the path's storage type,
// filter_grad G x O_C x F_H x F_W x (P I_C) (float32: G problems of P filter depth taps each, P = 1 or, for
// layers of 16 or 32 channels, 64 / I_C taps packed into the input channels; G P >= FD > (G - 1) P) and the
// float32 workspace of op->workspace_elems(). The problem is the 2D one of N x OD images (paper section 3,
// Level 2); only plans whose kernels read X by depth slice take it (reads_depth_in_place). An error message,
// empty on success.
template <typename Ret>
std::string decode_depth_call(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                              Ret& filter_grad, Ret& workspace, const DepthAttrs& a, BackwardFilterOp* op) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  PlanOptions options;
  if (std::string error = decode_options(a.plan, &options); !error.empty()) return error;
  if (std::string error = check_storage(input, out_grad, options.path); !error.empty()) return error;
  const auto x = input.dimensions(), dy = out_grad.dimensions(), dw = filter_grad->dimensions();
  if (x.size() != 5 || dy.size() != 5 || dw.size() != 5)
    return "a 3D layer's input, output gradient and filter gradient need rank 5";
  if (a.in_depth < 1 || a.in_depth > kIntMax || a.out_depth < 1 || a.out_depth > kIntMax ||
      a.depth_stride < 1 || a.depth_stride > kIntMax || a.depth_dilation < 1 || a.depth_dilation > kIntMax ||
      a.depth_pad < -kIntMax || a.depth_pad > kIntMax)
    return "depth attribute out of range";
  if (x[1] != a.in_depth || dy[1] != a.out_depth)
    return "input and output gradient depths do not match in_depth and out_depth";
  if (x[0] != dy[0]) return "input and output gradient have different batch sizes";
  if (dw[0] < 1 || dw[0] > kIntMax) return "the filter gradient needs 1 to 2^31 - 1 depth taps";
  options.problems = int(dw[0]);  // the depth taps share the launch
  // Taps packed into the input channels: P = dW's / X's channels, X's channels a multiple of 16 (a CPU lane
  // group, two 16-byte GPU pieces: one tap's).
  const int64_t packed = dw[4] / std::max<int64_t>(x[4], 1);
  if (dw[4] != x[4] && (x[4] < 1 || x[4] % 16 != 0 || dw[4] % x[4] != 0))
    return "packed depth taps need input channels a multiple of 16 dividing the filter gradient's";
  if (a.filter_depth < 1 || a.filter_depth > dw[0] * packed || a.filter_depth <= (dw[0] - 1) * packed)
    return "filter_depth does not match the filter gradient's problems and packing";
  // The kernels take a launch's problems from blockIdx.y (at most 65535: no second launch of taps), and
  // compute depth slices in 32 bits.
  if (dw[0] > 65535) return "a 3D layer read in place takes at most 65535 problems (depth taps)";
  const int64_t last_slice = (a.out_depth - 1) * a.depth_stride + (a.filter_depth - 1) * a.depth_dilation;
  if (last_slice + (a.depth_pad < 0 ? -a.depth_pad : a.depth_pad) > kIntMax)
    return "depth slices of 2^31 or more are not supported";
  // The kernels count images and X's elements in 32 bits (the flat problem's are checked by the planner).
  if (x[0] * x[1] > kIntMax || dy[0] * dy[1] > kIntMax || x[0] * x[1] * x[2] * x[3] * x[4] > kIntMax)
    return "tensors of 2^31 or more elements are not supported";
  Shapes shapes{{dy[0] * dy[1], x[2], x[3], dw[4]},
                {dy[0] * dy[1], dy[2], dy[3], dy[4]},
                {dw[1], dw[2], dw[3], dw[4]},
                {a.plan.pad_top, a.plan.pad_bottom, a.plan.pad_left, a.plan.pad_right},
                {a.plan.stride_h, a.plan.stride_w},
                dw[0],
                true,
                true};
  if (std::string error = make_backward_filter(shapes, options, op); !error.empty()) return error;
  if (!reads_depth_in_place(op->problem, op->plan))
    return "the plan's kernels cannot read a 3D layer's input in place (winrs_jax copies its depth slices "
           "then)";
  op->depth =
      DepthView{int(a.in_depth),  int(a.out_depth),    int(a.depth_stride),       int(a.depth_dilation),
                int(a.depth_pad), int(a.filter_depth), packed > 1 ? int(x[4]) : 0};
  return check_workspace(workspace, *op);
}

// The call of any backward-filter target from its attributes (PlanAttrs or DepthAttrs, or the V1 ones of the
// targets before the strides, upgraded): decode_call or decode_depth_call.
template <typename Ret, class Attrs>
std::string decode_target(const xla::ffi::AnyBuffer& input, const xla::ffi::AnyBuffer& out_grad,
                          Ret& filter_grad, Ret& workspace, const Attrs& attrs, BackwardFilterOp* op) {
  const auto& a = upgrade(attrs);
  if constexpr (std::is_same_v<std::decay_t<decltype(a)>, DepthAttrs>) {
    return decode_depth_call(input, out_grad, filter_grad, workspace, a, op);
  } else {
    return decode_call(input, out_grad, filter_grad, workspace, a, op);
  }
}

// One FFI call of `target`, the frame of every handler: decode(&op) says what is wrong with the call
// (InvalidArgument), run(op) what failed while running it (Internal); both "" on success. No C++ exception
// leaves it: one becomes an Internal error naming the target.
template <typename Op, typename Decode, typename Run>
xla::ffi::Error run_call(const char* target, Decode&& decode, Run&& run) noexcept {
  try {
    Op op;
    if (std::string error = decode(&op); !error.empty())
      return xla::ffi::Error::InvalidArgument(std::string(target) + ": " + error);
    if (std::string error = run(op); !error.empty())
      return xla::ffi::Error::Internal(std::string(target) + ": " + error);
  } catch (const std::exception& e) {
    return xla::ffi::Error::Internal(std::string(target) + ": " + e.what());
  } catch (...) {
    return xla::ffi::Error::Internal(std::string(target) + ": unknown error");
  }
  return xla::ffi::Error::Success();
}

}  // namespace winrs::ffi_glue

// The attribute names of PlanAttrsV2, in its order (PlanAttrs: then smem_per_block).
#define WINRS_PLAN_ATTR_V2_MEMBERS                                                                   \
  ::xla::ffi::StructMember<int64_t>("pad_top"), ::xla::ffi::StructMember<int64_t>("pad_bottom"),     \
      ::xla::ffi::StructMember<int64_t>("pad_left"), ::xla::ffi::StructMember<int64_t>("pad_right"), \
      ::xla::ffi::StructMember<int64_t>("stride_h"), ::xla::ffi::StructMember<int64_t>("stride_w"),  \
      ::xla::ffi::StructMember<int64_t>("path"), ::xla::ffi::StructMember<int64_t>("reference"),     \
      ::xla::ffi::StructMember<int64_t>("sm_count"), ::xla::ffi::StructMember<int64_t>("segments"),  \
      ::xla::ffi::StructMember<int64_t>("buckets"), ::xla::ffi::StructMember<int64_t>("variant0"),   \
      ::xla::ffi::StructMember<int64_t>("variant1"), ::xla::ffi::StructMember<int64_t>("atomic")

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(winrs::ffi_glue::PlanAttrs, WINRS_PLAN_ATTR_V2_MEMBERS,
                                      ::xla::ffi::StructMember<int64_t>("smem_per_block"));
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(winrs::ffi_glue::PlanAttrsV2, WINRS_PLAN_ATTR_V2_MEMBERS);

// PlanAttrsV1: the same without the strides.
#define WINRS_PLAN_ATTR_V1_MEMBERS                                                                   \
  ::xla::ffi::StructMember<int64_t>("pad_top"), ::xla::ffi::StructMember<int64_t>("pad_bottom"),     \
      ::xla::ffi::StructMember<int64_t>("pad_left"), ::xla::ffi::StructMember<int64_t>("pad_right"), \
      ::xla::ffi::StructMember<int64_t>("path"), ::xla::ffi::StructMember<int64_t>("reference"),     \
      ::xla::ffi::StructMember<int64_t>("sm_count"), ::xla::ffi::StructMember<int64_t>("segments"),  \
      ::xla::ffi::StructMember<int64_t>("buckets"), ::xla::ffi::StructMember<int64_t>("variant0"),   \
      ::xla::ffi::StructMember<int64_t>("variant1"), ::xla::ffi::StructMember<int64_t>("atomic")

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(winrs::ffi_glue::PlanAttrsV1, WINRS_PLAN_ATTR_V1_MEMBERS);

// DepthAttrs (and DepthAttrsV1): the plan's members (brace elision fills DepthAttrs::plan), then the depth's.
#define WINRS_DEPTH_ATTR_MEMBERS                                                                           \
  ::xla::ffi::StructMember<int64_t>("in_depth"), ::xla::ffi::StructMember<int64_t>("out_depth"),           \
      ::xla::ffi::StructMember<int64_t>("depth_stride"),                                                   \
      ::xla::ffi::StructMember<int64_t>("depth_dilation"), ::xla::ffi::StructMember<int64_t>("depth_pad"), \
      ::xla::ffi::StructMember<int64_t>("filter_depth")

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(winrs::ffi_glue::DepthAttrs, WINRS_PLAN_ATTR_V2_MEMBERS,
                                      ::xla::ffi::StructMember<int64_t>("smem_per_block"),
                                      WINRS_DEPTH_ATTR_MEMBERS);
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(winrs::ffi_glue::DepthAttrsV2, WINRS_PLAN_ATTR_V2_MEMBERS,
                                      WINRS_DEPTH_ATTR_MEMBERS);
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(winrs::ffi_glue::DepthAttrsV1, WINRS_PLAN_ATTR_V1_MEMBERS,
                                      WINRS_DEPTH_ATTR_MEMBERS);
