// The alpha-batched GEMM on FP32 CUDA cores (paper section 5.1): each alpha slice belongs to 256 / alpha
// threads, each computing a thread_oc x 8 tile of the slice's B_N x B_M outer-product sums.
#pragma once

#include "cuda/omega_config.cuh"

namespace winrs::cuda {

template <class C>
struct FfmaGemm {
  static constexpr int slice_threads = kThreads / C::alpha;
  static constexpr int thread_ic = 8;
  static constexpr int threads_ic = C::BM / thread_ic;
  static constexpr int threads_oc = slice_threads / threads_ic;
  static constexpr int thread_oc = C::BN / threads_oc;
  static_assert(kThreads % C::alpha == 0 && slice_threads % threads_ic == 0 && C::BN % threads_oc == 0);
  static_assert(thread_oc % 4 == 0 && thread_ic % 4 == 0, "float4 shared-memory reads");
  // The epilogue's row mapping: each owner (thread row ty) holds owner_rows consecutive rows of its slice.
  static constexpr int owner_rows = thread_oc;
  static_assert(owner_rows % C::R == 0);
  static constexpr int rows_per_round = owner_rows / C::R;

  int slice, ty, tx;
  float acc[thread_oc][thread_ic];

  __device__ void init(int tid) {
    slice = tid / slice_threads;
    const int local = tid % slice_threads;
    ty = local / threads_ic;
    tx = local % threads_ic;
#pragma unroll
    for (int i = 0; i < thread_oc; ++i)
#pragma unroll
      for (int j = 0; j < thread_ic; ++j) acc[i][j] = 0.0f;
  }

  // Algorithm 3, line 10, for this thread's slice and tile: part Part of a step's K rows (one per load
  // phase).
  static constexpr int k_per_part = C::K / C::phases;
  static_assert(k_per_part * C::phases == C::K);

  template <int Part>
  __device__ void run(const float* stage) {
    const float* gs = stage + slice * C::K * C::gs_stride + ty * thread_oc;
    const float* ds = stage + C::filter_stage + slice * C::K * C::ds_stride + tx * thread_ic;
#pragma unroll
    for (int k = Part * k_per_part; k < (Part + 1) * k_per_part; ++k) {
      float a[thread_oc], b[thread_ic];
#pragma unroll
      for (int i = 0; i < thread_oc; i += 4)
        *reinterpret_cast<float4*>(&a[i]) = *reinterpret_cast<const float4*>(gs + k * C::gs_stride + i);
#pragma unroll
      for (int j = 0; j < thread_ic; j += 4)
        *reinterpret_cast<float4*>(&b[j]) = *reinterpret_cast<const float4*>(ds + k * C::ds_stride + j);
#pragma unroll
      for (int i = 0; i < thread_oc; ++i)
#pragma unroll
        for (int j = 0; j < thread_ic; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }

  // Writes round Round's accumulators to As[slice][row][col] (row = owner * rows_per_round + local row).
  template <int Round>
  __device__ void stage_round(float* out) const {
#pragma unroll
    for (int il = 0; il < rows_per_round; ++il)
#pragma unroll
      for (int j = 0; j < thread_ic; ++j)
        out[(slice * C::round_rows + ty * rows_per_round + il) * C::out_stride + tx * thread_ic + j] =
            acc[Round * rows_per_round + il][j];
  }
};

}  // namespace winrs::cuda
