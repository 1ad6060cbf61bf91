// Device helpers of the Omega kernels: element types of a path, predicated vector loads from global memory,
// operand words for the shared-memory stores, and the warp-level tensor-core instructions (PTX, sm_80 and
// later).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "winrs/numeric.h"
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

// FP32 to TF32, nearest with ties to even (winrs/numeric.h, round_tf32): on sm_90 cvt.rn.tf32.f32, one
// F2FP.TF32 instruction, where cvt.rna (ties away from zero, the only TF32 conversion before sm_90) compiles
// to FSETP, a predicated IADD and LOP3 per value (SASS, nvcc 13.0): about a quarter of the TF32 Winograd
// kernels' instructions (one FSETP and one LOP3 per staged element in Omega_8(3, 6)'s mix; H100,
// 2026-11-24). Earlier targets round the bits in integers as the CPU executor does (tf32_rounded_bits).
__device__ __forceinline__ uint32_t tf32_bits(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
#else
  return tf32_rounded_bits(__float_as_uint(f));
#endif
}

// P consecutive elements of the storage type, as loaded, in 32-bit words (two 16-bit elements per word, the
// first in the low half): the raw registers stay untouched until the transforms need them, so the loads of
// the next phase stay in flight during the GEMM (converting right after the load would wait for it: on the
// 16-bit paths that exposed every load's latency, 3x slower). Words rather than elements: zeroing and
// loading 16-bit elements one by one cost the bf16 kernels two instructions per word (SASS, H100,
// 2026-11-24), and the packed transforms take the words as they are.
template <int P, typename T>
struct Channels {
  static constexpr int kBytes = P * int(sizeof(T));
  static constexpr int kWords = kBytes < 4 ? 1 : kBytes / 4;
  alignas(kBytes < 16 ? (kBytes < 4 ? 4 : kBytes) : 16) uint32_t w[kWords];

  __device__ __forceinline__ float operator[](int q) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(w[q]);
    } else {
      const uint32_t word = w[q / 2];
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __uint_as_float(q % 2 == 0 ? word << 16 : word & 0xFFFF0000u);
      } else {
        return __half2float(__ushort_as_half((unsigned short)(q % 2 == 0 ? word & 0xFFFFu : word >> 16)));
      }
    }
  }
  // Word i: elements 2i and 2i + 1 of a 16-bit type, element i of a 32-bit one.
  __device__ __forceinline__ uint32_t word(int i) const { return w[i]; }
};

// 16 bytes from global memory (the read-only path) into four words where `valid`, zeros otherwise: a
// predicated load, without the branch around it that the compiler made of an `if`, and the zeros set in the
// same asm (zeroing the words beforehand in C++ cost two instructions per word: a uniform register and a
// copy; SASS, H100, 2026-11-24).
__device__ __forceinline__ void load_16_or_zero(uint32_t* dst, const void* src, bool valid) {
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(dst[0]), "=r"(dst[1]), "=r"(dst[2]), "=r"(dst[3])
      : "l"(src), "r"(int(valid)));
}

// Loads P consecutive elements from global memory; zeros where !valid or beyond `remaining` elements. With
// vectors (the channel count is a multiple of min(P, 16 bytes) elements and the base pointer is aligned to as
// many bytes) P-wide loads of up to 16 bytes serve, each predicated as a whole. `vectors` is a compile-time
// constant: the caller branches once for many loads. `src` need not point into the tensor where no element
// is loaded.
template <bool Vectors, int P, typename T>
__device__ __forceinline__ void load_channels(Channels<P, T>& dst, const T* src, bool valid, int remaining,
                                              std::integral_constant<bool, Vectors>) {
  using C = Channels<P, T>;
  if constexpr (Vectors && C::kBytes >= 16) {
    constexpr int per_load = 16 / int(sizeof(T));
#pragma unroll
    for (int i = 0; i < C::kBytes / 16; ++i)
      load_16_or_zero(dst.w + 4 * i, src + i * per_load, valid && remaining > i * per_load);
  } else {
#pragma unroll
    for (int i = 0; i < C::kWords; ++i) dst.w[i] = 0;
    if constexpr (Vectors) {
      if (valid && remaining > 0) {
        if constexpr (C::kBytes == 8) {
          *reinterpret_cast<uint2*>(dst.w) = __ldg(reinterpret_cast<const uint2*>(src));
        } else if constexpr (C::kBytes == 4) {
          dst.w[0] = __ldg(reinterpret_cast<const unsigned*>(src));
        } else {
          dst.w[0] = __ldg(reinterpret_cast<const unsigned short*>(src));
        }
      }
    } else {
#pragma unroll
      for (int q = 0; q < P; ++q) {
        if (!(valid && q < remaining)) continue;
        if constexpr (sizeof(T) == 4) {
          dst.w[q] = __ldg(reinterpret_cast<const unsigned*>(src) + q);
        } else {
          dst.w[q / 2] |= uint32_t(__ldg(reinterpret_cast<const unsigned short*>(src) + q)) << (16 * (q % 2));
        }
      }
    }
  }
}

// The shared-memory window address of a generic pointer into shared memory (PTX's shared state space).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80 and later);
// zeros where !valid (a source size of 0 reads nothing). Completion by cp_async_commit / cp_async_wait.
__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  const uint32_t address = shared_address(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"(address), "l"(global), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most Pending of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Division by a divisor fixed for the kernel, as a multiply-high and a shift (Granlund and Montgomery 1994):
// q = (umulhi(n, m) + n) >> s with s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1, exact for
// 0 <= n < 2^31 and 1 <= d < 2^31 (the sum stays below 2^32).
struct FastDivider {
  int divisor;
  unsigned multiplier;
  int shift;

  __device__ void init(int d) {
    divisor = d;
    shift = d > 1 ? 32 - __clz(d - 1) : 0;
    multiplier = unsigned(((1ull << 32) * ((1ull << shift) - unsigned(d))) / unsigned(d) + 1);
  }
  __device__ __forceinline__ int div(int n) const {
    return int((__umulhi(unsigned(n), multiplier) + unsigned(n)) >> shift);
  }
};

// Shared-memory words of GEMM operands: two 16-bit operands (rounded to nearest even) per word, or one FP32
// word (TF32 rounded, tf32_bits; split TF32 and FP32 keep the value, split at the fragment load).
template <Operand O>
inline constexpr bool kSixteenBit = O == Operand::kBF16 || O == Operand::kF16;

template <Operand O>
__device__ __forceinline__ uint32_t operand_pair(float a, float b) {
  static_assert(kSixteenBit<O>);
  if constexpr (O == Operand::kBF16) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&pair);
  } else {
    const __half2 pair = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&pair);
  }
}

// Two 16-bit operands of adjacent channels in one word, with the arithmetic TileMath's transforms use
// (.bf16x2 or .f16x2 instructions, one for both channels). Only for the transforms that round each output
// once in 16 bits (tile.h, one_rounding: at most two terms per output, power-of-two coefficients): there an
// output is one correctly rounded sum or an exact copy, the operand that the FP32 transform and the
// conversion give, in a fifth of the instructions (no unpacking, no packing).
template <Operand O>
struct PackedPair {
  static_assert(kSixteenBit<O>);
  using Pair = std::conditional_t<O == Operand::kBF16, __nv_bfloat162, __half2>;
  Pair v;

  PackedPair() = default;
  __device__ __forceinline__ explicit PackedPair(Pair p) : v(p) {}
  // Both halves c, a power of two (or zero): its bits from the float's, which the compiler folds.
  __device__ __forceinline__ explicit PackedPair(double c) {
    const uint32_t f = __float_as_uint(float(c));
    uint32_t half;
    if constexpr (O == Operand::kBF16) {
      half = f >> 16;  // exact: a power of two has no mantissa bits
    } else {
      const uint32_t sign = f >> 31 << 15, exponent = (f >> 23 & 0xFF) - 127 + 15;
      half = (f & 0x7FFFFFFF) == 0 ? sign : sign | exponent << 10;
    }
    const uint32_t word = half | half << 16;
    v = *reinterpret_cast<const Pair*>(&word);
  }
  __device__ __forceinline__ uint32_t bits() const { return *reinterpret_cast<const uint32_t*>(&v); }

  __device__ __forceinline__ PackedPair& operator+=(PackedPair b) { return v = __hadd2(v, b.v), *this; }
  __device__ __forceinline__ PackedPair& operator-=(PackedPair b) { return v = __hsub2(v, b.v), *this; }
  __device__ __forceinline__ PackedPair operator+(PackedPair b) const { return PackedPair(__hadd2(v, b.v)); }
  __device__ __forceinline__ PackedPair operator-(PackedPair b) const { return PackedPair(__hsub2(v, b.v)); }
  __device__ __forceinline__ PackedPair operator*(PackedPair b) const { return PackedPair(__hmul2(v, b.v)); }
  __device__ __forceinline__ PackedPair operator-() const { return PackedPair(__hneg2(v)); }
};

template <Operand O>
__device__ __forceinline__ uint32_t operand_word(float v) {
  static_assert(!kSixteenBit<O>);
  return O == Operand::kTF32 ? tf32_bits(v) : __float_as_uint(v);
}

// W consecutive 32-bit words to shared memory in stores of up to 16 bytes (dst aligned to min(4 W, 16)
// bytes).
template <int W>
__device__ __forceinline__ void store_words(void* dst, const uint32_t (&w)[W]) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int i = 0; i < W; i += 4)
      reinterpret_cast<uint4*>(dst)[i / 4] = make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]);
  } else if constexpr (W == 2) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else {
    static_assert(W == 1);
    *reinterpret_cast<uint32_t*>(dst) = w[0];
  }
}

// Four 8x8 tiles of 16-bit elements, each transposed on the way (ldmatrix .trans): lanes 8q..8q+7 give the
// row addresses of tile q; register q receives this lane's fragment of tile q.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {  // a shared address
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4_trans(r, shared_address(smem));
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

// A split's sums into dW: stored, or added where the splits add into a zeroed dW as they finish (atomic adds,
// reductions in L2; 16 bytes at a time on sm_90).
__device__ __forceinline__ void put_float(float* at, float v, bool add) {
  if (add)
    atomicAdd(at, v);
  else
    *at = v;
}
__device__ __forceinline__ void put_float4(float* at, float4 v, bool add) {
  if (!add) {
    *reinterpret_cast<float4*>(at) = v;
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(at), v);
#else
  atomicAdd(at, v.x), atomicAdd(at + 1, v.y), atomicAdd(at + 2, v.z), atomicAdd(at + 3, v.w);
#endif
}

// Serial split-K (winrs/segments.h): a block waits until its chain's semaphore reaches its link, adds its
// result into the bucket, and passes the semaphore on. One thread polls with acquire loads; the barrier
// hands the ordering to the block. The previous link ran on an earlier-dispatched block, so this never waits
// for a block that is not yet resident.
__device__ __forceinline__ void wait_for_link(const unsigned* semaphore, int link) {
  if (threadIdx.x == 0) {
    unsigned seen;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(semaphore) : "memory");
    } while (seen != unsigned(link));
  }
  __syncthreads();
}

__device__ __forceinline__ void pass_link(unsigned* semaphore, int next) {
  __threadfence();  // this block's adds are visible at GPU scope before the semaphore moves
  __syncthreads();
  if (threadIdx.x == 0)
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" : : "l"(semaphore), "r"(unsigned(next)) : "memory");
}

}  // namespace winrs::cuda
