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

// Every WinRS target (handlers.h: the current ones and those before the strides, Attrs their attributes):
// the operator decode_target makes of the call, launched on XLA's stream.
template <const char* Target, class Attrs>
ffi::Error backward_filter_cuda(cudaStream_t stream, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                ffi::ResultBuffer<ffi::F32> filter_grad,
                                ffi::ResultBuffer<ffi::F32> workspace, Attrs attrs) {
  return run_call<BackwardFilterOp>(
      Target,
      [&](BackwardFilterOp* op) { return decode_target(input, out_grad, filter_grad, workspace, attrs, op); },
      [&](const BackwardFilterOp& op) {
        const char* stage = "";
        const cudaError_t e =
            cuda::run_backward_filter(op, input.untyped_data(), out_grad.untyped_data(),
                                      filter_grad->typed_data(), workspace->typed_data(), stream, &stage);
        return cuda_error(e, stage);
      });
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

// The handler symbol of one WinRS target (module.cc registers each under its name).
#define WINRS_BACKWARD_FILTER_SYMBOL(symbol, target, attrs)                                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                                        \
      symbol, (winrs::ffi_glue::backward_filter_cuda<winrs::ffi_glue::target, winrs::ffi_glue::attrs>), \
      (ffi::Ffi::Bind()                                                                                 \
           .Ctx<ffi::PlatformStream<cudaStream_t>>()                                                    \
           .Arg<ffi::AnyBuffer>()                                                                       \
           .Arg<ffi::AnyBuffer>()                                                                       \
           .Ret<ffi::Buffer<ffi::F32>>()                                                                \
           .Ret<ffi::Buffer<ffi::F32>>()                                                                \
           .Attrs<winrs::ffi_glue::attrs>()),                                                           \
      {ffi::Traits::kCmdBufferCompatible})

WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilterCuda, kTarget, PlanAttrs);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilter3dCuda, kDepthTarget, DepthAttrs);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilterV2Cuda, kTargetV2, PlanAttrsV2);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilter3dV2Cuda, kDepthTargetV2, DepthAttrsV2);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilterV1Cuda, kTargetV1, PlanAttrsV1);
WINRS_BACKWARD_FILTER_SYMBOL(WinrsBackwardFilter3dV1Cuda, kDepthTargetV1, DepthAttrsV1);

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsGroupedFilterGradCuda, winrs::ffi_glue::grouped_filter_grad_cuda,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::GroupedAttrs>()),
                              {ffi::Traits::kCmdBufferCompatible});
