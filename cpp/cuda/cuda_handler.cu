// XLA FFI handler "winrs_backward_filter" for platform "CUDA": the two Omega kernels of the pair over their
// segments, then the bucket reduction, all on XLA's stream. No allocation (the workspace is an output buffer
// of the call) and no synchronisation, so XLA may capture it in a CUDA graph.
#include <cuda_runtime.h>

#include <string>

#include "cuda/omega.h"
#include "ffi/handlers.h"
#include "ffi/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace winrs::ffi_glue {
namespace {

ffi::Error cuda_error(const char* what, cudaError_t e) {
  return ffi::Error::Internal(std::string("winrs_backward_filter: ") + what + ": " + cudaGetErrorString(e));
}

ffi::Error backward_filter_cuda(cudaStream_t stream, ffi::AnyBuffer input, ffi::AnyBuffer out_grad,
                                ffi::ResultBuffer<ffi::F32> filter_grad, ffi::ResultBuffer<ffi::F32> workspace,
                                PlanAttrs attrs) {
  BackwardFilterOp op;
  const std::string error = decode_call(input, out_grad, filter_grad, workspace, attrs, &op);
  if (!error.empty()) return ffi::Error::InvalidArgument("winrs_backward_filter: " + error);
  if (op.plan.path != Path::kFp32) return ffi::Error::InvalidArgument("winrs_backward_filter: path not built");
  struct {
    Problem problem;
    SegmentGrid grid;
    int variant0, variant1;
    int64_t groups;
  } launch{op.problem, op.plan.grid, op.plan.variant0, op.plan.variant1, op.groups};

  cuda::OmegaArgs args{static_cast<const float*>(input.untyped_data()),
                       static_cast<const float*>(out_grad.untyped_data()),
                       filter_grad->typed_data(),
                       workspace->typed_data(),
                       launch.problem,
                       launch.grid,
                       0,
                       launch.groups};
  if (cudaError_t e = cuda::launch_omega(launch.variant0, args, stream); e != cudaSuccess)
    return cuda_error("kernel 0 launch", e);
  if (launch.grid.width0 < launch.grid.out_w) {
    args.kernel = 1;
    if (cudaError_t e = cuda::launch_omega(launch.variant1, args, stream); e != cudaSuccess)
      return cuda_error("kernel 1 launch", e);
  }
  const int buckets = launch.grid.buckets();
  if (buckets > 1) {
    if (cudaError_t e = cuda::launch_bucket_reduction(args.filter_grad, args.workspace, launch.groups,
                                                      launch.problem.filter_elems(), buckets, stream);
        e != cudaSuccess)
      return cuda_error("bucket reduction launch", e);
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace winrs::ffi_glue

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinrsBackwardFilterCuda, winrs::ffi_glue::backward_filter_cuda,
                              (ffi::Ffi::Bind()
                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Arg<ffi::AnyBuffer>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Ret<ffi::Buffer<ffi::F32>>()
                                   .Attrs<winrs::ffi_glue::PlanAttrs>()),
                              {ffi::Traits::kCmdBufferCompatible});
