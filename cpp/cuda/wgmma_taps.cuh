// The direct kernel's filter-row tile (direct_taps.cuh: Taps filter columns of a 64 x 64 channel block, dY
// staged once and X once with a halo) on Hopper's warpgroup MMA, for bfloat16 and float16 (issue 7, item 3).
//
// Warpgroup g multiplies all 64 output channels by input channels 32 g .. 32 g + 31 of every tap. Per 16-unit
// K-block it loads its dY fragment (A: 64 output channels x 16 units) into registers once, by ldmatrix, and
// reads X (B) from shared memory: tap j's operand is the step's X rows shifted by j rows, so each tap is the
// same descriptor with its start j rows further. X is stored as two 32-channel halves, each row 64 bytes in
// wgmma's 64-byte-swizzled MN-major layout; the swizzle is read from the address bits, so a start shifted
// by whole rows reads the rows as they were written. The taps are one m64n96k16 whose three 32-channel N
// panels are the three taps, LBO = one row (the panels overlap in memory): one instruction instead of one
// m64n32k16 per tap, 1.14-1.27x faster than the filter-row tile on mma.sync where one per tap ran 1.02-1.06x
// (1.33x on 3x3 16:128:64; bf16, 64-channel layers, H100, 2026-11-23; docs/benchmarks.md).
// tools/wgmma_probe.cu checks both descriptor properties on the device.
//
// Shared-memory traffic per K-block: the dY fragments (2 KB per warpgroup) and each tap's X (1 KB per
// warpgroup and tap), where both-operand descriptors would read dY again for every tap: the earlier wgmma
// tile with both operands in shared memory was bound by it (docs/benchmarks.md, fifth stop).
#pragma once

#include <cstdint>

#include "cuda/direct_taps.cuh"
#include "cuda/gemm_mma.cuh"
#include "cuda/wgmma.cuh"

namespace winrs::cuda {

template <Path P, int Taps>
struct WgmmaTapsConfig : WgmmaPath<P> {
  using Tile = typename TapsConfig<P, Taps>::Tile;
  using typename WgmmaPath<P>::Smem;

  static constexpr int alpha = Taps, n = Taps, r = 1, taps = Taps;
  static constexpr int stride = 1,
                       reach = Taps;  // X's column stride (TapsStager): strided layers run TapsConfig
  static constexpr int BN = kNarrowBlock, BM = kNarrowBlock;
  static constexpr int blocks_per_sm = 2;
  static constexpr int K = 16;  // units per wgmma (k16)
  static constexpr bool chunked = false, copy = true, tma = false;
  static constexpr int copy_substeps = 4, copy_stages = 4;
  static constexpr int copy_units = copy_substeps * K;  // dY units per step
  static constexpr int x_rows = copy_units + Taps - 1;  // X positions per step

  // dY: copy_units rows of B_N channels (128 bytes), 128-byte swizzled (conflict-free copies and ldmatrix);
  // X: two halves of x_rows rows of 32 channels (64 bytes), 64-byte swizzled, each rounded up to the
  // swizzle's period of 8 rows. Every step starts 1024-byte aligned.
  static constexpr int grad_row = BN, half_channels = BM / 2;
  static_assert(grad_row * sizeof(Smem) == 128 && half_channels * sizeof(Smem) == 64);
  static constexpr int grad_elems = copy_units * grad_row;
  static constexpr int half_rows = (x_rows + 7) / 8 * 8;
  static constexpr int half_elems = half_rows * half_channels;
  static constexpr int copy_step_elems = grad_elems + 2 * half_elems;
  static_assert(copy_step_elems * sizeof(Smem) % 1024 == 0);
  static constexpr size_t copy_bytes = size_t(copy_stages) * copy_step_elems * sizeof(Smem);
  static constexpr size_t smem_align = 1024;
  // compute-sanitizer's memcheck takes the wide MMA's B operand for 96 x 16 contiguous elements from its
  // start (3 KB) where the overlapping panels read 18 rows (1152 bytes): slack past the last buffer keeps it
  // quiet (found by compute-sanitizer on an H100, 2026-11-23).
  static constexpr size_t sanitizer_slack = 2048;
  static constexpr size_t smem_bytes = copy_bytes + smem_align + sanitizer_slack;

  // Output rounds through the same memory, as TapsConfig's.
  static constexpr int out_stride = BM + 4;
  static constexpr int R = output_rounds(alpha, BN, out_stride, copy_bytes);
  static constexpr int round_rows = BN / R;

  // Element offsets in a step of row d's 16-byte piece at channel c (a multiple of 8) of dY and of X
  // (TapsStager): 128-byte swizzle, piece ^ (d % 8); 64-byte swizzle, piece ^ (d / 2 % 4).
  __device__ static constexpr int grad_offset(int d, int c) { return d * grad_row + ((c / 8) ^ (d % 8)) * 8; }
  __device__ static constexpr int input_offset(int d, int c, int /*phase: stride 1*/ = 0) {
    const int half = c / half_channels, piece = c % half_channels / 8;
    return grad_elems + half * half_elems + d * half_channels + (piece ^ (d / 2 % 4)) * 8;
  }
};

// D (64 x 96, FP32) += A (64 x 16, registers: each warp its 16 rows as mma.sync's A fragment) B (16 x 96,
// shared memory, MN-major).
#define WINRS_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WINRS_A4 "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
// clang-format off
#define WINRS_OPS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define WINRS_OPS48                                                                                  \
  WINRS_OPS16                                                                                        \
      ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, " \
      "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
// clang-format on
template <Operand O>
__device__ __forceinline__ void wgmma_register_a(float (&d)[48], const uint32_t (&a)[4], uint64_t b) {
#if WINRS_WGMMA_CODE
#define WINRS_WGMMA_N96(TYPES)                                                                      \
  asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32." TYPES " " WINRS_OPS48                  \
               "}, {%48, %49, %50, %51}, %52, 1, 1, 1, 1;\n"                                        \
               : WINRS_D4(0), WINRS_D4(4), WINRS_D4(8), WINRS_D4(12), WINRS_D4(16), WINRS_D4(20),   \
                 WINRS_D4(24), WINRS_D4(28), WINRS_D4(32), WINRS_D4(36), WINRS_D4(40), WINRS_D4(44) \
               : WINRS_A4)
  if constexpr (O == Operand::kBF16) {
    WINRS_WGMMA_N96("bf16.bf16");
  } else {
    WINRS_WGMMA_N96("f16.f16");
  }
#undef WINRS_WGMMA_N96
#endif
}
#undef WINRS_OPS48
#undef WINRS_OPS16
#undef WINRS_A4
#undef WINRS_D4

// The GEMM policy of WgmmaTapsConfig: warp w holds output channels 16 (w % 4) .. + 15 of its warpgroup's
// input channels; its accumulators are the wide MMA's fragment, whose panel j (columns 32 j ..) is tap j.
template <class C>
struct WgmmaTapsGemm : WgmmaRows<C> {
  using WgmmaRows<C>::rows_per_round;
  static constexpr int panel_acc = C::half_channels / 2;  // accumulators per tap and thread
  static constexpr int half_bytes = C::half_channels * int(sizeof(typename C::Smem));

  using Smem = typename C::Smem;
  int warp, lane;
  float acc[C::taps * panel_acc];
  uint32_t a[C::copy_substeps][4];  // the step's dY fragments, live until the step's MMAs are waited for

  __device__ void init(int tid) {
    warp = tid / 32;
    lane = tid % 32;
#pragma unroll
    for (int i = 0; i < C::taps * panel_acc; ++i) acc[i] = 0.0f;
  }

  // K-block `sub` of a step. The first loads the step's dY fragments for all four K-blocks and fences (the
  // registers that the MMAs read are written before them); the last waits for all of the step's MMAs, whose
  // buffer the copies issued at the next step overwrite, and whose A registers the next step's loads reuse.
  __device__ void run_step(const Smem* step, int sub) {
    const int group = warp / 4;
    if (sub == 0) {
      const Ldmatrix16Lanes l(lane);
      const int m = warp % 4 * 16 + l.a_m;
#pragma unroll
      for (int s = 0; s < C::copy_substeps; ++s)
        ldmatrix_x4_trans(a[s], step + C::grad_offset(s * C::K + l.a_k, m));
      wgmma_fence();
    }
    const Smem* x = step + C::grad_elems + group * C::half_elems + sub * C::K * C::half_channels;
    constexpr uint32_t sbo = 8 * half_bytes;  // 8 rows of 64 bytes
    static_assert(C::taps == 3, "one m64n96k16: three 32-channel taps");
    wgmma_register_a<C::operand>(acc, a[sub], wgmma_descriptor(x, half_bytes, sbo, WgmmaSwizzle::k64));
    if (sub == C::copy_substeps - 1) {
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(acc);
#pragma unroll
      for (int s = 0; s < C::copy_substeps; ++s)
#pragma unroll
        for (int e = 0; e < 4; ++e) pin_register(a[s][e]);
    }
  }

  // Round Round's accumulators to As[tap][row][col]: warpgroup 0's columns, then warpgroup 1's (its input
  // channels 32 ..); both warpgroups hold the same rows.
  template <int Round>
  __device__ void stage_round(float* out) const {
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
      stage_wgmma_fragment<C, Round, rows_per_round, panel_acc / 4>(out + j * C::round_rows * C::out_stride,
                                                                    acc + j * panel_acc, warp % 4,
                                                                    warp / 4 * C::half_channels, lane);
  }
};

}  // namespace winrs::cuda
