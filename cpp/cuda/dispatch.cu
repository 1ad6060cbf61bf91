#include "cuda/omega.h"
#include "winrs/reduction.h"
#include "winrs/variants.h"

namespace winrs::cuda {

cudaError_t launch_omega(int variant, const OmegaArgs& args, cudaStream_t stream) {
  if (variant < 0 || variant >= kNumVariants) return cudaErrorInvalidValue;
  switch (kVariants[variant].alpha_class()) {
    case 2:
      return launch_omega_alpha2(variant, args, stream);
    case 4:
      return launch_omega_alpha4(variant, args, stream);
    case 8:
      return launch_omega_alpha8(variant, args, stream);
    case 16:
      return launch_omega_alpha16(variant, args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

namespace {

__global__ void bucket_reduction_kernel(float* filter_grad, const float* workspace, long long groups,
                                        long long bucket_elems, int buckets) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < groups * bucket_elems;
       e += (long long)gridDim.x * blockDim.x) {
    const long long g = e / bucket_elems, local = e % bucket_elems;
    filter_grad[e] =
        kahan_bucket_sum(filter_grad + g * bucket_elems, workspace + g * (buckets - 1) * bucket_elems,
                         bucket_elems, buckets, local);
  }
}

}  // namespace

cudaError_t launch_bucket_reduction(float* filter_grad, const float* workspace, long long groups,
                                    long long bucket_elems, int buckets, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const long long blocks = (groups * bucket_elems + kBlock - 1) / kBlock;
  bucket_reduction_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), kBlock, 0, stream>>>(
      filter_grad, workspace, groups, bucket_elems, buckets);
  return cudaGetLastError();
}

}  // namespace winrs::cuda
