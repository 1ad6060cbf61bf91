// The operator on the GPU: path and alpha-class dispatch of the Omega kernels, stacked-problem launches, the
// semaphores of chained segments, the zeroed dW of atomic adds, and the deterministic bucket reduction.
#include <algorithm>

#include "cuda/omega.h"
#include "cuda/wgmma_tf32_taps.cuh"
#include "ffi/handlers.h"
#include "winrs/reduction.h"
#include "winrs/variants.h"

namespace winrs::cuda {
namespace {

template <Path P>
cudaError_t launch_path(int variant, const OmegaArgs& args, cudaStream_t stream) {
  switch (kVariants[variant].alpha_class()) {
    case 2:
      return launch_class<P, 2>(variant, args, stream);
    case 4:
      return launch_class<P, 4>(variant, args, stream);
    case 8:
      return launch_class<P, 8>(variant, args, stream);
    case 16:
      return launch_class<P, 16>(variant, args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_omega(Path path, int variant, const OmegaArgs& args, cudaStream_t stream) {
  if (variant < 0 || variant >= kNumVariants) return cudaErrorInvalidValue;
  switch (path) {
    case Path::kFp32:
      return launch_path<Path::kFp32>(variant, args, stream);
    case Path::kTf32x3:
      return launch_path<Path::kTf32x3>(variant, args, stream);
    case Path::kTf32:
      return launch_path<Path::kTf32>(variant, args, stream);
    case Path::kBf16:
      return launch_path<Path::kBf16>(variant, args, stream);
    case Path::kFp16:
      return launch_path<Path::kFp16>(variant, args, stream);
  }
  return cudaErrorInvalidValue;
}

// dW = Kahan sum of the buckets (bucket 0 is dW itself), for each of `groups` stacked problems, whose
// workspaces lie `group_stride` words apart (the buckets, then the semaphores).
__global__ void bucket_reduction_kernel(float* filter_grad, const float* workspace, long long groups,
                                        long long group_stride, long long bucket_elems, int buckets) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < groups * bucket_elems;
       e += (long long)gridDim.x * blockDim.x) {
    const long long g = e / bucket_elems, local = e % bucket_elems;
    filter_grad[e] = kahan_bucket_sum(filter_grad + g * bucket_elems, workspace + g * group_stride,
                                      bucket_elems, buckets, local);
  }
}

cudaError_t launch_bucket_reduction(float* filter_grad, const float* workspace, long long groups,
                                    long long group_stride, long long bucket_elems, int buckets,
                                    cudaStream_t stream) {
  constexpr int kBlock = 256;
  const long long blocks = (groups * bucket_elems + kBlock - 1) / kBlock;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(std::min<long long>(blocks, 65536)));
  config.blockDim = dim3(kBlock);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, bucket_reduction_kernel, filter_grad, workspace, groups, group_stride,
                            bucket_elems, buckets);
}

}  // namespace

cudaError_t run_backward_filter(const BackwardFilterOp& op, const void* input, const void* out_grad,
                                float* filter_grad, float* workspace, cudaStream_t stream,
                                const char** stage) {
  constexpr long long kMaxGroups = 65535;  // gridDim.y
  const Problem& p = op.problem;
  const Plan& plan = op.plan;
  const long long element = storage_bytes(plan.path);
  const long long bucket_words = (plan.buckets - 1) * p.filter_elems();
  if (const long long words = plan.semaphores[0] + plan.semaphores[1]; words > 0) {
    *stage = "semaphore reset";  // each problem's semaphores follow its buckets (plan.h)
    const size_t pitch = sizeof(float) * size_t(plan.workspace_elems);
    if (cudaError_t e = cudaMemset2DAsync(workspace + bucket_words, pitch, 0, sizeof(float) * size_t(words),
                                          size_t(op.groups), stream);
        e != cudaSuccess)
      return e;
  }
  if (plan.grid.atomic) {
    *stage = "filter gradient reset";  // the segments' atomic adds start from zero
    if (cudaError_t e =
            cudaMemsetAsync(filter_grad, 0, sizeof(float) * size_t(op.groups * p.filter_elems()), stream);
        e != cudaSuccess)
      return e;
  }
  for (long long g0 = 0; g0 < op.groups; g0 += kMaxGroups) {
    OmegaArgs args{static_cast<const char*>(input) + g0 * op.input_group_stride * element,
                   static_cast<const char*>(out_grad) + g0 * op.grad_group_stride * element,
                   filter_grad + g0 * p.filter_elems(),
                   workspace + g0 * plan.workspace_elems,
                   p,
                   plan.grid,
                   0,
                   std::min(kMaxGroups, op.groups - g0),
                   plan.workspace_elems,
                   op.input_group_stride,
                   op.grad_group_stride,
                   plan.semaphores[0] > 0 ? bucket_words : -1,
                   op.depth};
    *stage = "kernel 0 launch";
    if (cudaError_t e = launch_omega(plan.path, plan.variant0, args, stream); e != cudaSuccess) return e;
    if (plan.grid.width0 < plan.grid.out_w) {  // the residual column adds into kernel 0's buckets
      args.kernel = 1;
      args.semaphore_offset = plan.semaphores[1] > 0 ? bucket_words + plan.semaphores[0] : -1;
      *stage = "kernel 1 launch";
      if (cudaError_t e = launch_omega(plan.path, plan.variant1, args, stream); e != cudaSuccess) return e;
    }
  }
  if (plan.buckets > 1) {
    *stage = "bucket reduction launch";
    return launch_bucket_reduction(filter_grad, workspace, op.groups, plan.workspace_elems, p.filter_elems(),
                                   int(plan.buckets), stream);
  }
  return cudaSuccess;
}

}  // namespace winrs::cuda

long long WinrsTf32TileLaunches() { return winrs::cuda::tf32_taps_launches.load(std::memory_order_relaxed); }
long long WinrsPersistentLaunches() {
  return winrs::cuda::persistent_block_launches.load(std::memory_order_relaxed);
}
