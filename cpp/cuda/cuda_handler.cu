// XLA FFI handler "winrs_backward_filter" for platform "CUDA": the two Omega kernels of the pair over their
// segments, then the bucket reduction, all on XLA's stream. No allocation (the workspace is an output buffer
// of the call) and no synchronisation, so XLA may capture it in a CUDA graph.
#include <cuda_runtime.h>

#include <string>

#include "cuda/omega.h"
#include "ffi/grouped_call.h"
#include "ffi/handlers.h"
#include "ffi/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace winrs::ffi_glue {
namespace {

// "" on success, else the failed stage and CUDA's message.
std::string cuda_error(cudaError_t e, const char* stage) {
  return e == cudaSuccess ? std::string() : std::string(stage) + ": " + cudaGetErrorString(e);
}

// Both WinRS targets: the operator that `decode` makes of the call, launched on XLA's stream.
template <typename Decode>
ffi::Error backward_filter_on_gpu(const char* target, cudaStream_t stream, ffi::AnyBuffer& input,
                                  ffi::AnyBuffer& out_grad, ffi::ResultBuffer<ffi::F32>& filter_grad,
                                  ffi::ResultBuffer<ffi::F32>& workspace, Decode&& decode) {
  return run_call<BackwardFilterOp>(target, decode, [&](const BackwardFilterOp& op) {
    const char* stage = "";
    const cudaError_t e =
        cuda::run_backward_filter(op, input.untyped_data(), out_grad.untyped_data(),
                                  filter_grad->typed_data(), workspace->typed_data(), stream, &stage);
    return cuda_error(e, stage);
  });
}

// One target's handler: Attrs (PlanAttrs, or PlanAttrsV1 of the target before strides) upgraded to PlanAttrs.
template <class Attrs>
ffi::Error backward_filter_cuda(const char* target, cudaStream_t stream, ffi::AnyBuffer input,
                                ffi::AnyBuffer out_grad, ffi::ResultBuffer<ffi::F32> filter_grad,
                                ffi::ResultBuffer<ffi::F32> workspace, const Attrs& attrs) {
  return backward_filter_on_gpu(
      target, stream, input, out_grad, filter_grad, workspace, [&](BackwardFilterOp* op) {
        return decode_call(input, out_grad, filter_grad, workspace, upgrade(attrs), op);
      });
}

// A 3D layer read in place (launch.h, decode_depth_call): the kernels address X by depth slice.
template <class Attrs>
ffi::Error backward_filter_3d_cuda(const char* target, cudaStream_t stream, ffi::AnyBuffer input,
                                   ffi::AnyBuffer out_grad, ffi::ResultBuffer<ffi::F32> filter_grad,
                                   ffi::ResultBuffer<ffi::F32> workspace, const Attrs& attrs) {
  return backward_filter_on_gpu(
      target, stream, input, out_grad, filter_grad, workspace, [&](BackwardFilterOp* op) {
        return decode_depth_call(input, out_grad, filter_grad, workspace, upgrade(attrs), op);
      });
}

ffi::Error backward_filter_v2_cuda(cudaStream_t stream, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                   ffi::ResultBuffer<ffi::F32> filter_grad,
                                   ffi::ResultBuffer<ffi::F32> workspace, PlanAttrs attrs) {
  return backward_filter_cuda(kTarget, stream, input, out_grad, filter_grad, workspace, attrs);
}
ffi::Error backward_filter_v1_cuda(cudaStream_t stream, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                   ffi::ResultBuffer<ffi::F32> filter_grad,
                                   ffi::ResultBuffer<ffi::F32> workspace, PlanAttrsV1 attrs) {
  return backward_filter_cuda(kTargetV1, stream, input, out_grad, filter_grad, workspace, attrs);
}
ffi::Error backward_filter_3d_v2_cuda(cudaStream_t stream, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                      ffi::ResultBuffer<ffi::F32> filter_grad,
                                      ffi::ResultBuffer<ffi::F32> workspace, DepthAttrs attrs) {
  return backward_filter_3d_cuda(kDepthTarget, stream, input, out_grad, filter_grad, workspace, attrs);
}
ffi::Error backward_filter_3d_v1_cuda(cudaStream_t stream, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                      ffi::ResultBuffer<ffi::F32> filter_grad,
                                      ffi::ResultBuffer<ffi::F32> workspace, DepthAttrsV1 attrs) {
  return backward_filter_3d_cuda(kDepthTargetV1, stream, input, out_grad, filter_grad, workspace, attrs);
}

ffi::Error grouped_filter_grad_cuda(cudaStream_t stream, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                    ffi::ResultBuffer<ffi::F32> filter_grad,
                                    ffi::ResultBuffer<ffi::F32> workspace, GroupedAttrs attrs) {
  return run_call<GroupedOp>(
      "winrs_grouped_filter_grad",
      [&](GroupedOp* op) { return decode_grouped_call(input, out_grad, filter_grad, workspace, attrs, op); },
      [&](const GroupedOp& op) {
        const char* stage = "";
        const cudaError_t e =
            cuda::run_grouped(op, input.untyped_data(), out_grad.untyped_data(), filter_grad->typed_data(),
                              workspace->typed_data(), stream, &stage);
        return cuda_error(e, stage);
      });
}

}  // namespace
}  // namespace winrs::ffi_glue

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsBackwardFilterCuda, winrs::ffi_glue::backward_filter_v2_cuda,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::PlanAttrs>()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsBackwardFilterV1Cuda, winrs::ffi_glue::backward_filter_v1_cuda,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::PlanAttrsV1>()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsBackwardFilter3dCuda, winrs::ffi_glue::backward_filter_3d_v2_cuda,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::DepthAttrs>()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsBackwardFilter3dV1Cuda, winrs::ffi_glue::backward_filter_3d_v1_cuda,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::DepthAttrsV1>()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsGroupedFilterGradCuda, winrs::ffi_glue::grouped_filter_grad_cuda,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::GroupedAttrs>()),
                              {ffi::Traits::kCmdBufferCompatible});
