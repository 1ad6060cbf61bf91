// Host interface of the CUDA WinRS kernels (cpp/cuda/*.cu).
#pragma once

#include <cuda_runtime.h>

#include "winrs/problem.h"
#include "winrs/segments.h"

namespace winrs::cuda {

struct OmegaArgs {
  const float* input;     // X, N x I_H x I_W x I_C
  const float* out_grad;  // dY, N x O_H x O_W x O_C
  float* filter_grad;     // dW (bucket 0)
  float* workspace;       // buckets 1..Z-1
  Problem problem;
  SegmentGrid grid;
  int kernel;  // 0: the primary columns of the grid, 1: the residual column (accumulates, see segments.h)
  // Stacked independent problems (blockIdx.y): group g reads and writes at g times each tensor's size and its
  // workspace at g x (buckets - 1) x |dW|.
  long long groups;
};

// Launches Omega_alpha(n, r) of `variant` over the segments of one kernel of the pair. Defined per alpha
// class in omega_alpha*.cu; returns the launch error, if any.
cudaError_t launch_omega(int variant, const OmegaArgs& args, cudaStream_t stream);
cudaError_t launch_omega_alpha2(int variant, const OmegaArgs& args, cudaStream_t stream);
cudaError_t launch_omega_alpha4(int variant, const OmegaArgs& args, cudaStream_t stream);
cudaError_t launch_omega_alpha8(int variant, const OmegaArgs& args, cudaStream_t stream);
cudaError_t launch_omega_alpha16(int variant, const OmegaArgs& args, cudaStream_t stream);

// dW = Kahan sum of the buckets (bucket 0 is dW itself), for each of `groups` stacked problems.
cudaError_t launch_bucket_reduction(float* filter_grad, const float* workspace, long long groups,
                                    long long bucket_elems, int buckets, cudaStream_t stream);

}  // namespace winrs::cuda
