// Host interface of the CUDA WinRS kernels (cpp/cuda/*.cu and the per-path, per-alpha-class translation units
// CMake generates from omega_instance.cu.in).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "winrs/grouped.h"
#include "winrs/operator.h"

namespace winrs::cuda {

struct OmegaArgs {
  const void* input;     // X, N x I_H x I_W x I_C, in the path's storage type
  const void* out_grad;  // dY, N x O_H x O_W x O_C, in the path's storage type
  float* filter_grad;    // dW (bucket 0)
  float* workspace;      // buckets 1..B-1, then the semaphores (plan.h)
  Problem problem;
  SegmentGrid grid;
  int kernel;  // 0: the primary columns of the grid, 1: the residual column (accumulates, see segments.h)
  // Stacked independent problems in this launch (blockIdx.y): group g reads X and dY at g times their group
  // strides (0 for one shared by all), writes dW at g x |dW| and its workspace at g x workspace_elems.
  long long groups;
  long long workspace_elems;
  long long input_group_stride, grad_group_stride;
  // This kernel's semaphores at this many words into a problem's workspace, zeroed before the launch; -1 when
  // its chains have one link (no ordering needed).
  long long semaphore_offset;
  // A 3D layer read in place (winrs/problem.h): the problems are its filter depth taps (blockIdx.y), X and dY
  // shared; the filter-row tile's stager and the filter-window tile's map address X by depth slice.
  DepthView depth;
  // The TMA's maps of dY and X (tma.cuh) for the kernels that stage by it; set by their launch.
  CUtensorMap grad_map, input_map;
  // The persistent block's T-tap tiles cut a row's filter columns evenly (wgmma_persistent.cuh,
  // winrs/schedule.h; set by its launch).
  bool balanced_taps = false;
};

// Launches Omega_alpha(n, r) of `variant` (of alpha class AlphaClass) on path P over the segments of one
// kernel of the pair. Defined in the generated translation unit of (P, AlphaClass); returns the launch error.
template <Path P, int AlphaClass>
cudaError_t launch_class(int variant, const OmegaArgs& args, cudaStream_t stream);

// The whole operator on `stream`: both kernels of the pair for every stacked problem (split into launches of
// at most 65535 problems), then the bucket reduction. Returns the first error and names its stage.
cudaError_t run_backward_filter(const BackwardFilterOp& op, const void* input, const void* out_grad,
                                float* filter_grad, float* workspace, cudaStream_t stream,
                                const char** stage);

// The direct grouped filter gradient (winrs/grouped.h) of every stacked problem, then the sum of its splits.
cudaError_t run_grouped(const GroupedOp& op, const void* input, const void* out_grad, float* filter_grad,
                        float* workspace, cudaStream_t stream, const char** stage);

}  // namespace winrs::cuda
