// The direct kernel's 128 x 128 channel block on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a; issue 7,
// item 3), for bfloat16 and float16. The same copy staging as the mma.sync kernel (staging.cuh, CopyStager:
// cp.async of 16-byte pieces, copy_stages buffers of 64 units) lands X and dY in the layout wgmma reads from
// shared memory; each of the two warpgroups then multiplies its 64 output channels by the 128 input channels
// of a 16-unit K-block in one instruction, reading both operands from shared memory, where mma.sync needed 32
// MMAs and 12 ldmatrix per warp and K-block.
//
// Layout: X and dY are channel-contiguous (the GEMM's M and N), so both operands are "MN-major". A side of a
// step is two panels of 64 channels (128 bytes) by 64 units, each unit's 128 bytes one row, the 16-byte
// pieces of row k at place piece ^ (k % 8): the 128-byte swizzle of wgmma's canonical MN-major layout
// ((8 x 8 elements, 8 pieces), (8 rows, K / 8)) : ((1, 8 elements, LBO), (128 bytes, SBO)) with LBO = a
// panel, SBO = 8 rows (CUTLASS, cute/atom/mma_traits_sm90_gmma.hpp, names this layout; nothing of it is used
// here). TF32 wgmma reads K-major operands only, so TF32 keeps mma.sync.
#pragma once

#include <cstdint>

#include "cuda/omega_config.cuh"

namespace winrs::cuda {

// nvcc defines this for the architecture-specific target compute_90a only: the instructions below exist
// there and nowhere else, and the launch checks that the device runs that code (omega_kernel.cuh).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WINRS_WGMMA_CODE 1
#else
#define WINRS_WGMMA_CODE 0
#endif

// Host: whether the device loaded the sm_90a code of `kernel` (binaryVersion 90 on compute capability 9.0),
// the only code in which the wgmma kernels have bodies.
inline bool loads_sm90a(const void* kernel) {
  cudaFuncAttributes attributes;
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    (void)cudaGetLastError();  // no usable image here
    return false;
  }
  return attributes.binaryVersion == 90;
}

// What every configuration of the direct kernel on wgmma shares: variant 0 on a 16-bit path.
template <Path P>
struct WgmmaPath {
  static constexpr int variant = 0;
  static constexpr Path path = P;
  static constexpr Operand operand = path_info(P).operand;
  static_assert(kSixteenBit<operand>, "TF32 wgmma needs K-major operands; X and dY are channel-major");
  static constexpr bool tensor_cores = true, wgmma = true;
  using Storage = typename StorageType<path_info(P).storage>::T;
  using Smem = typename SmemType<operand>::T;
};

template <Path P, bool Tma = false>
struct WgmmaConfig : WgmmaPath<P> {
  using Tile = TileMath<0>;
  using typename WgmmaPath<P>::Smem;

  static constexpr int alpha = 1, n = 1, r = 1, taps = 1;
  static constexpr int BN = kVariants[0].shape(P).block_oc, BM = kVariants[0].shape(P).block_ic;
  static_assert(BN == 128 && BM == 128, "two warpgroups of 64 output channels, N = 128 input channels");
  static constexpr int blocks_per_sm = kVariants[0].shape(P).blocks_per_sm;
  static constexpr int K = 16;  // units per wgmma (k16)
  static constexpr bool chunked = false, copy = true;
  // Tma: a step is one pixel of 64 consecutive images, or 64 / batch pixels of batches of 8, 16 or 32, copied
  // by the TMA (tma.cuh) in boxes of 64 channels, with barriers per buffer instead of the block's
  // (tma_main_loop).
  static constexpr bool tma = Tma;
  static constexpr int copy_substeps = 4, copy_stages = 3;  // 96 KB: two blocks per SM
  // Two 16-byte pieces of a unit per thread (eight threads per unit of 128 channels, each copy of a warp
  // 128 contiguous bytes of four units): the unit's place in the walk and its addresses are computed half as
  // often as with one piece. The kernel issued instructions in about half of its cycles, most of them this
  // arithmetic; four pieces per thread ran 2D layers 10-20% faster but 1D layers, which stream X and dY from
  // DRAM, up to 2x slower (64-byte copies; Nsight Compute and the real suite, H100, 2026-11-23).
  static constexpr int copy_pieces = 2;
  static constexpr int copy_units = copy_substeps * K;

  static constexpr int panel_channels = 128 / int(sizeof(Smem));  // one 128-byte swizzle row
  static constexpr int panel_elems = copy_units * panel_channels;
  static constexpr int panel_bytes = panel_elems * int(sizeof(Smem));
  static constexpr int side_elems = BN / panel_channels * panel_elems;
  static constexpr int copy_step_elems = 2 * side_elems;  // dY, then X
  // The 64-channel panels of dY and X in a step and where X's start (pixel_steps.cuh).
  static constexpr int grad_panels = BN / panel_channels, input_panels = BM / panel_channels;
  static constexpr int input_base = side_elems;
  static constexpr size_t copy_bytes = size_t(copy_stages) * copy_step_elems * sizeof(Smem);
  // The swizzle repeats every 8 rows (1024 bytes) and is read from address bits: buffers start 1024-aligned.
  static constexpr size_t smem_align = 1024;
  // TMA staging's barriers follow the buffers (which the output rounds reuse): full and empty, per buffer.
  static constexpr size_t barrier_offset = copy_bytes;
  static constexpr size_t barrier_bytes = Tma ? 2 * copy_stages * sizeof(uint64_t) : 0;
  static constexpr size_t smem_bytes = copy_bytes + smem_align + barrier_bytes;

  // Output rounds through the same memory, as OmegaConfig's.
  static constexpr int out_stride = BM + 4;
  static constexpr int R = output_rounds(alpha, BN, out_stride, copy_bytes);
  static constexpr int round_rows = BN / R;

  // Element offsets in a step of the 16-byte piece of unit k (0 .. copy_units - 1) at channel c (a multiple
  // of 8 elements) of dY and of X (CopyStager).
  __device__ static constexpr int piece(int k, int c) {
    const int in_row = c % panel_channels / 8;
    return c / panel_channels * panel_elems + k * panel_channels + ((in_row ^ (k % 8)) * 8);
  }
  __device__ static constexpr int grad_offset(int k, int c) { return piece(k, c); }
  __device__ static constexpr int input_offset(int k, int c) { return side_elems + piece(k, c); }
};

// The swizzle modes of wgmma's descriptors (their field values): rows of 128 or 64 bytes whose 16-byte pieces
// are XORed with the row's address bits 7..9 or 7..8.
enum class WgmmaSwizzle : uint64_t { k128 = 1, k64 = 2 };

// wgmma's shared-memory matrix descriptor: start address, LBO and SBO in 16-byte units, the swizzle mode,
// base offset 0 (the swizzle follows the start's address bits; tools/wgmma_probe.cu).
__device__ __forceinline__ uint64_t wgmma_descriptor(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                     WgmmaSwizzle swizzle = WgmmaSwizzle::k128) {
  const uint32_t address = shared_address(smem);
  return uint64_t((address & 0x3FFFF) >> 4) | uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16 |
         uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32 | uint64_t(swizzle) << 62;
}

// Keeps the compiler from moving accesses to an accumulator (or reusing a register operand) across the
// asynchronous MMAs that use it.
__device__ __forceinline__ void pin_register(float& v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void pin_register(uint32_t& v) { asm volatile("" : "+r"(v)::"memory"); }
// Every accumulator of a fragment array, after the wait for the MMAs that write them.
template <int N>
__device__ __forceinline__ void pin_registers(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) pin_register(acc[i]);
}
template <int M, int N>
__device__ __forceinline__ void pin_registers(float (&acc)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i) pin_registers(acc[i]);
}

// The X and dY copies of this thread (cp.async, generic proxy) visible to wgmma's reads (async proxy); before
// the barrier that publishes them.
__device__ __forceinline__ void fence_async_proxy() {
#if WINRS_WGMMA_CODE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// D (64 x 128, FP32) += A (64 x 16) B (16 x 128), both from shared memory as MN-major (transposed) operands.
#define WINRS_D8(i)                                                                           \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define WINRS_WGMMA_N128(TYPES)                                                                         \
  asm volatile(                                                                                         \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPES                                              \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "    \
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "      \
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "      \
      "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 1, 1;\n"                             \
      : WINRS_D8(0), WINRS_D8(8), WINRS_D8(16), WINRS_D8(24), WINRS_D8(32), WINRS_D8(40), WINRS_D8(48), \
        WINRS_D8(56)                                                                                    \
      : "l"(a), "l"(b))
template <Operand O>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b) {
#if WINRS_WGMMA_CODE
  if constexpr (O == Operand::kBF16) {
    WINRS_WGMMA_N128("bf16.bf16");
  } else {
    WINRS_WGMMA_N128("f16.f16");
  }
#endif
}
#undef WINRS_WGMMA_N128
#undef WINRS_D8

__device__ __forceinline__ void wgmma_fence() {
#if WINRS_WGMMA_CODE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if WINRS_WGMMA_CODE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
#if WINRS_WGMMA_CODE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#endif
}

// The output rounds' row mapping of the wgmma GEMM policies (as MmaGemm's): each warp owns the 16 rows of its
// accumulator fragments, R rounds of rows_per_round each.
template <class C>
struct WgmmaRows {
  static constexpr bool split = false;
  static constexpr int owner_rows = 16;
  static constexpr int rows_per_round = owner_rows / C::R;
  static_assert(rows_per_round * C::R == owner_rows && rows_per_round % 8 == 0);
};

// Round Round's rows of a warp's wgmma accumulator fragment, Groups column groups of 8 (rows lane / 4 and
// lane / 4 + 8 of the warp's 16; columns 8 j + 2 (lane % 4) and the next), to the output rounds' slice at
// `slice` (As[row][col]): the warp's rows at owner * RowsPerRound, its columns from col0.
template <class C, int Round, int RowsPerRound, int Groups>
__device__ __forceinline__ void stage_wgmma_fragment(float* slice, const float* acc, int owner, int col0,
                                                     int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (h * 8 / RowsPerRound != Round) continue;
    const int row = owner * RowsPerRound + h * 8 % RowsPerRound + g;
#pragma unroll
    for (int j = 0; j < Groups; ++j)
      *reinterpret_cast<float2*>(slice + row * C::out_stride + col0 + 8 * j + 2 * t) =
          make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  }
}

// The GEMM policy of WgmmaConfig: warpgroup g (warps 4g .. 4g + 3) accumulates output channels
// 64 g .. 64 g + 63 by all 128 input channels; warp w of the block holds rows 16 w .. 16 w + 15.
template <class C>
struct WgmmaGemm : WgmmaRows<C> {
  using WgmmaRows<C>::rows_per_round;
  using Smem = typename C::Smem;
  int warp, lane;
  float acc[64];

  __device__ void init(int tid) {
    warp = tid / 32;
    lane = tid % 32;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  }

  // K-block `sub` of a step; the step's last K-block waits for all of the step's MMAs, whose buffer the
  // copies issued at the next step overwrite. (Waiting for the previous step's instead, with steps of 32
  // units in 6 buffers to keep two blocks per SM, measured 2% slower: the extra barriers cost more than the
  // overlap gained; H100, 2026-11-23.)
  __device__ void run_step(const Smem* step, int sub) {
    const int group = warp / 4;
    if (sub == 0) wgmma_fence();
    const Smem* a = step + group * C::panel_elems + sub * C::K * C::panel_channels;
    const Smem* b = step + C::side_elems + sub * C::K * C::panel_channels;
    constexpr uint32_t sbo = 8 * 128;  // 8 rows of 128 bytes
    wgmma_m64n128k16<C::operand>(acc, wgmma_descriptor(a, C::panel_bytes, sbo),
                                 wgmma_descriptor(b, C::panel_bytes, sbo));
    if (sub == C::copy_substeps - 1) {
      wgmma_commit();
      if constexpr (!C::tma) retire<0>();  // TMA staging waits one step later (tma_main_loop)
    }
  }

  // Waits until at most Pending of the committed steps' MMAs are in flight.
  template <int Pending>
  __device__ void retire() {
    wgmma_wait<Pending>();
    pin_registers(acc);
  }

  template <int Round>
  __device__ void stage_round(float* out) const {
    stage_wgmma_fragment<C, Round, rows_per_round, 16>(out, acc, warp, 0, lane);
  }
};

}  // namespace winrs::cuda
