// Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarrier), for the direct kernel's
// 128 x 128 wgmma block (wgmma.cuh, WgmmaConfig with Tma): one thread copies a whole step's boxes of X and dY
// into shared memory, already in wgmma's 128-byte-swizzled layout, and the warps wait on a barrier that the
// copies complete, where cp.async staging had every thread compute and issue its own 16-byte pieces.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/wgmma.cuh"

namespace winrs::cuda {

// mbarrier (PTX ISA, "Parallel synchronization and communication instructions: mbarrier"): a phase completes
// when `count` arrivals and the expected transaction bytes have arrived; waiters name the phase's parity.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
#if WINRS_WGMMA_CODE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
#endif
}
// Makes the initialisations visible to the async proxy (the TMA's completions) before the block's barrier.
__device__ __forceinline__ void mbarrier_init_fence() {
#if WINRS_WGMMA_CODE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if WINRS_WGMMA_CODE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
#endif
}
// One arrival that also expects `bytes` of transactions (the TMA copies of this phase).
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t* bar, uint32_t bytes) {
#if WINRS_WGMMA_CODE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if WINRS_WGMMA_CODE
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  }
#endif
}

// The box of a 5D map at coordinates (c0 innermost .. c4), as tma_load_4d.
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3, int c4) {
#if WINRS_WGMMA_CODE
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
      "%4, %5, %6}], [%7];\n" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "r"(shared_address(bar))
      : "memory");
#endif
}

// The box of `map` at coordinates (c0 innermost .. c3) into shared memory at dst; its bytes complete a
// transaction of `bar`. Coordinates outside the tensor (padding, channels past the last) read as zeros.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
#if WINRS_WGMMA_CODE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
      "%4, "
      "%5}], [%6];\n" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_address(bar))
      : "memory");
#endif
}

// Host: the tensor map of a row-major tensor of 2- or 4-byte elements at `base`, Rank dimensions dims
// (innermost first, the first the channels) and boxes of box[i] elements along dimension i, zeros outside.
// Needs the channels x element_bytes a multiple of 16 and base 16-byte aligned (the launches check). False if
// the driver refuses.
template <int Rank>
bool encode_tensor(CUtensorMap* map, const void* base, int element_bytes, const cuuint64_t (&dims)[Rank],
                   const cuuint32_t (&box)[Rank], CUtensorMapSwizzle swizzle) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  // The driver's entry point, looked up once per process (a pure host function: no device state).
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return Encode(nullptr);
    }
    return reinterpret_cast<Encode>(fn);
  }();
  if (!encode || (element_bytes != 2 && element_bytes != 4)) return false;
  cuuint64_t strides[Rank - 1];
  cuuint64_t stride = cuuint64_t(element_bytes);
  for (int i = 0; i + 1 < Rank; ++i) strides[i] = stride *= dims[i];
  cuuint32_t element_strides[Rank];
  for (int i = 0; i < Rank; ++i) element_strides[i] = 1;
  return encode(map, element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT32,
                Rank, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Host: the map of an N x H x W x C tensor whose boxes are box[0] channels x box[1] columns x box[2] rows x
// box[3] images.
inline bool encode_boxes(CUtensorMap* map, const void* base, int element_bytes, long long n, long long h,
                         long long w, long long c, const cuuint32_t (&box)[4], CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[4] = {cuuint64_t(c), cuuint64_t(w), cuuint64_t(h), cuuint64_t(n)};
  return encode_tensor<4>(map, base, element_bytes, dims, box, swizzle);
}

// Boxes of 64 channels (128 bytes: one swizzle row) of one pixel of `images` consecutive images (a multiple
// of 8: whole periods of the swizzle), 128-byte swizzled: the one-tap block's (WgmmaConfig with Tma).
inline bool encode_pixel_boxes(CUtensorMap* map, const void* base, long long n, long long h, long long w,
                               long long c, int images) {
  const cuuint32_t box[4] = {64, 1, 1, cuuint32_t(images)};
  return encode_boxes(map, base, 2, n, h, w, c, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace winrs::cuda
