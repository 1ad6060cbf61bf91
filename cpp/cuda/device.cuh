// Device helpers of the Omega kernels: element types of a path, predicated vector loads from global memory,
// conversions at the shared-memory store, and the warp-level tensor-core instructions (PTX, sm_80 and later).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "winrs/paths.h"

namespace winrs::cuda {

template <Storage S>
struct StorageType;
template <>
struct StorageType<Storage::kF32> {
  using T = float;
};
template <>
struct StorageType<Storage::kBF16> {
  using T = __nv_bfloat16;
};
template <>
struct StorageType<Storage::kF16> {
  using T = __half;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// Shared-memory element type of the GEMM operands: 16-bit types stay 16-bit; TF32 and split TF32 stage FP32
// words (TF32 already rounded, split TF32 split when the fragments are loaded).
template <Operand O>
struct SmemType {
  using T = std::conditional_t<O == Operand::kBF16, StorageType<Storage::kBF16>::T,
                               std::conditional_t<O == Operand::kF16, StorageType<Storage::kF16>::T, float>>;
};

__device__ __forceinline__ uint32_t tf32_bits(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}

// P consecutive elements of the storage type, as loaded: the raw registers stay untouched until the
// transforms need them, so the loads of the next phase stay in flight during the GEMM (converting right after
// the load would wait for it: on the 16-bit paths that exposed every load's latency, 3x slower).
template <int P, typename T>
struct Channels {
  alignas(P * sizeof(T)) T v[P];

  __device__ __forceinline__ float operator[](int q) const { return to_float(v[q]); }
};

// Loads P consecutive elements from global memory; zeros where !valid or beyond `remaining` elements. With
// vectors (the channel count is a multiple of P and the base pointer is aligned to P elements) one predicated
// P-wide load serves. `vectors` is a compile-time constant where the kernel compiled its main loop for each
// case (no branch per load), or a bool.
template <bool Vectors, int P, typename T>
__device__ __forceinline__ void load_channels(Channels<P, T>& dst, const T* src, bool valid, int remaining,
                                              std::integral_constant<bool, Vectors>) {
  dst = Channels<P, T>{};
  if constexpr (Vectors) {
    constexpr int bytes = P * int(sizeof(T));
    if (valid && remaining > 0) {
      if constexpr (bytes == 16) {
        *reinterpret_cast<uint4*>(dst.v) = __ldg(reinterpret_cast<const uint4*>(src));
      } else if constexpr (bytes == 8) {
        *reinterpret_cast<uint2*>(dst.v) = __ldg(reinterpret_cast<const uint2*>(src));
      } else if constexpr (bytes == 4) {
        *reinterpret_cast<unsigned*>(dst.v) = __ldg(reinterpret_cast<const unsigned*>(src));
      } else {
        dst.v[0] = __ldg(src);
      }
    }
  } else {
#pragma unroll
    for (int q = 0; q < P; ++q)
      if (valid && q < remaining) dst.v[q] = __ldg(src + q);
  }
}

template <int P, typename T>
__device__ __forceinline__ void load_channels(Channels<P, T>& dst, const T* src, bool valid, int remaining,
                                              bool vectors) {
  if (vectors) {
    load_channels(dst, src, valid, remaining, std::true_type{});
  } else {
    load_channels(dst, src, valid, remaining, std::false_type{});
  }
}

// Element i of P transformed tiles, converted to the operand, to P consecutive shared-memory elements.
template <Operand O, int P, int Alpha>
__device__ __forceinline__ void store_channels(typename SmemType<O>::T* dst, const float (&t)[P][Alpha],
                                               int i) {
  if constexpr (O == Operand::kBF16 || O == Operand::kF16) {
    using Pair = typename std::conditional<O == Operand::kBF16, __nv_bfloat162, __half2>::type;
    auto pack = [](float a, float b) {
      if constexpr (O == Operand::kBF16) {
        return __floats2bfloat162_rn(a, b);
      } else {
        return __floats2half2_rn(a, b);
      }
    };
    if constexpr (P == 4) {
      Pair lo = pack(t[0][i], t[1][i]), hi = pack(t[2][i], t[3][i]);
      uint2 bits;
      bits.x = *reinterpret_cast<unsigned*>(&lo);
      bits.y = *reinterpret_cast<unsigned*>(&hi);
      *reinterpret_cast<uint2*>(dst) = bits;
    } else if constexpr (P == 2) {
      *reinterpret_cast<Pair*>(dst) = pack(t[0][i], t[1][i]);
    } else {
      dst[0] = typename SmemType<O>::T(t[0][i]);
    }
  } else {
    auto value = [](float v) { return O == Operand::kTF32 ? __uint_as_float(tf32_bits(v)) : v; };
    if constexpr (P == 4) {
      *reinterpret_cast<float4*>(dst) =
          make_float4(value(t[0][i]), value(t[1][i]), value(t[2][i]), value(t[3][i]));
    } else if constexpr (P == 2) {
      *reinterpret_cast<float2*>(dst) = make_float2(value(t[0][i]), value(t[1][i]));
    } else {
      dst[0] = value(t[0][i]);
    }
  }
}

// Four 8x8 tiles of 16-bit elements, each transposed on the way (ldmatrix .trans): lanes 8q..8q+7 give the
// row addresses of tile q; register q receives this lane's fragment of tile q.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// D += A B for one m16n8k16 tile (A row-major 16x16, B column-major 16x8) of 16-bit operands.
template <Operand O>
__device__ __forceinline__ void mma_16bit(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (O == Operand::kBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// D += A B for one m16n8k8 tile of TF32 operands (A row-major 16x8, B column-major 8x8).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace winrs::cuda
