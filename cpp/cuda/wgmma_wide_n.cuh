// The persistent block's channel tiles (wgmma_persistent.cuh; issue 7). One tap (T = 1): 128 x 256, each
// consumer warpgroup multiplying its 64 output channels by 256 input channels in one m64n256k16 per 16-unit
// K-block, the tile of CUTLASS's fastest Hopper GEMMs: twice the MMA work per instruction as the 128 x 128
// block's m64n128k16, and a quarter fewer bytes per FLOP from L2; a step is dY's two 64-channel panels and
// X's four, 48 KB, four of them in flight (pixel_steps.cuh). T = 2 or 3 consecutive filter columns: 128 x 128
// channels by T taps, one m64n128k16 per tap and K-block, each tap's X from the step that copied it
// (tap_runs.cuh); a step is two panels of each, 32 KB, seven buffers. 64 T accumulators per thread (128 or
// 192), so the consumers raise their register budget (setmaxnreg) while the producer lowers its own.
#pragma once

#include <cstdint>

#include "cuda/wgmma.cuh"
#include "winrs/tap_runs.h"

namespace winrs::cuda {

template <Path P, int Taps>
struct WgmmaWideNConfig : WgmmaPath<P> {
  using typename WgmmaPath<P>::Smem;

  static_assert(Taps >= 1 && Taps <= 3);
  static constexpr int n = Taps, r = 1, taps = Taps;  // the direct kernel's columns (variant 0), T per tile
  static constexpr int BN = 128, BM = Taps == 1 ? 256 : 128;  // output x input channels
  static constexpr bool tma = true;
  static constexpr int K = 16, copy_substeps = 4, copy_stages = Taps == 1 ? 4 : 7;
  static constexpr int copy_units = copy_substeps * K;
  static constexpr int max_images = kTapRunUnits;  // a box's images for T taps (winrs/tap_runs.h)
  static constexpr int panel_channels = 128 / int(sizeof(Smem));
  static constexpr int panel_elems = copy_units * panel_channels;
  static constexpr int panel_bytes = panel_elems * int(sizeof(Smem));
  static constexpr int grad_panels = BN / panel_channels, input_panels = BM / panel_channels;
  static constexpr int input_base = grad_panels * panel_elems;
  static constexpr int copy_step_elems = (grad_panels + input_panels) * panel_elems;
  static constexpr size_t copy_bytes = size_t(copy_stages) * copy_step_elems * sizeof(Smem);
  static constexpr size_t smem_align = 1024;
  static constexpr size_t barrier_offset = copy_bytes;
  static constexpr size_t barrier_bytes = 2 * copy_stages * sizeof(uint64_t);
  static constexpr size_t smem_bytes = copy_bytes + smem_align + barrier_bytes;
  static_assert(smem_bytes <= 232448, "Hopper's 227 KB of shared memory per block");
};

// D (64 x 256, FP32) += A (64 x 16) B (16 x 256), both from shared memory as MN-major operands.
template <Operand O>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t a, uint64_t b) {
#if WINRS_WGMMA_CODE
#define WINRS_D8(i)                                                                           \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define WINRS_D64(i)                                                                                    \
  WINRS_D8(i), WINRS_D8(i + 8), WINRS_D8(i + 16), WINRS_D8(i + 24), WINRS_D8(i + 32), WINRS_D8(i + 40), \
      WINRS_D8(i + 48), WINRS_D8(i + 56)
  // clang-format off
#define WINRS_WGMMA_N256(TYPES)                                                                            \
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPES " {"                                   \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "    \
      "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "    \
      "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "    \
      "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "    \
      "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, "    \
      "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, "      \
      "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "        \
      "%128, %129, 1, 1, 1, 1, 1;\n"                                                                       \
      : WINRS_D64(0), WINRS_D64(64)                                                                        \
      : "l"(a), "l"(b))
  // clang-format on
  if constexpr (O == Operand::kBF16) {
    WINRS_WGMMA_N256("bf16.bf16");
  } else {
    WINRS_WGMMA_N256("f16.f16");
  }
#undef WINRS_WGMMA_N256
#undef WINRS_D64
#undef WINRS_D8
#endif
}

// Register budgets of the persistent block's warpgroups (setmaxnreg; all of a warpgroup's warps together):
// the producer gives registers back, the consumers take them, within the block's 64K.
template <int Registers>
__device__ __forceinline__ void lower_registers() {
#if WINRS_WGMMA_CODE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
#endif
}
template <int Registers>
__device__ __forceinline__ void raise_registers() {
#if WINRS_WGMMA_CODE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
#endif
}

// The wgmma descriptor of a WgmmaWideNConfig panel's rows from `at` (rows of 128 bytes, in groups of 8).
template <class C>
__device__ __forceinline__ uint64_t panel_descriptor(const typename C::Smem* at) {
  constexpr uint32_t sbo = 8 * 128;
  return wgmma_descriptor(at, C::panel_bytes, sbo);
}
// A step's dY rows of K-block `sub` for consumer warp `warp`'s warpgroup: the MMAs' A operand.
template <class C>
__device__ __forceinline__ uint64_t grad_descriptor(const typename C::Smem* step, int warp, int sub) {
  return panel_descriptor<C>(step + warp / 4 * C::panel_elems + sub * C::K * C::panel_channels);
}

// The GEMM policies of WgmmaWideNConfig: consumer warpgroup g accumulates output channels 64 g .. 64 g + 63;
// consumer warp w holds rows 16 w .. 16 w + 15 (WgmmaGemm's fragment, column groups of 8). run() takes a step
// whose buffer, and those `back` steps before it, slot(back) returns.
//
// One tap: all 256 input channels, 32 column groups.
template <class C>
struct WgmmaWideNGemm {
  using Smem = typename C::Smem;
  static constexpr int accumulators = 128;
  int warp, lane;
  float acc[accumulators];

  __device__ void init(int tid) {
    warp = tid / 32;
    lane = tid % 32;
#pragma unroll
    for (int i = 0; i < accumulators; ++i) acc[i] = 0.0f;
  }
  __device__ const float* column(int) const { return acc; }  // the one tap's fragment

  template <class Slot, class Steps>
  __device__ void run(const Slot& slot, const Steps&) {
    wgmma_fence();
    const Smem* step = slot(0);
    static_for<0, C::copy_substeps>([&](auto s) {
      constexpr int sub = decltype(s)::value;
      const Smem* b = step + C::input_base + sub * C::K * C::panel_channels;
      wgmma_m64n256k16<C::operand>(acc, grad_descriptor<C>(step, warp, sub), panel_descriptor<C>(b));
    });
    wgmma_commit();
  }

  template <int Pending>
  __device__ void retire() {
    wgmma_wait<Pending>();
    pin_registers(acc);
  }
};

// T taps: tap j's 128 input channels in accumulators 64 j .. 64 j + 63 (16 column groups), its operand X from
// the step that TapRuns::x_of names. A tile past the filter's last column runs only its plan.taps first taps,
// each count its own code: MMAs under a branch made ptxas fence every MMA of a step (its warning C7519).
template <class C>
struct WgmmaTapRunsGemm {
  using Smem = typename C::Smem;
  static constexpr int accumulators = 64 * C::taps;
  int warp, lane;
  float acc[C::taps][64];

  __device__ void init(int tid) {
    warp = tid / 32;
    lane = tid % 32;
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[j][i] = 0.0f;
  }
  __device__ const float* column(int j) const { return acc[j]; }  // tap j's fragment

  template <class Slot, class Steps>
  __device__ void run(const Slot& slot, const Steps& plan) {
    if (plan.positions == 1) {
      run_positions<1, Steps>(slot, plan.taps);
    } else {
      run_positions<2, Steps>(slot, plan.taps);
    }
  }

  template <int Positions, class Steps, class Slot>
  __device__ void run_positions(const Slot& slot, int taps) {
    if (taps == C::taps) {
      run_taps<C::taps, Positions, Steps>(slot);
    } else if (taps == 2) {
      run_taps<2, Positions, Steps>(slot);
    } else {
      run_taps<1, Positions, Steps>(slot);
    }
  }

  template <int Taps, int Positions, class Steps, class Slot>
  __device__ void run_taps(const Slot& slot) {
    wgmma_fence();
    const Smem* step = slot(0);
    static_for<0, C::copy_substeps>([&](auto s) {
      constexpr int sub = decltype(s)::value;
      const uint64_t a_desc = grad_descriptor<C>(step, warp, sub);
      static_for<0, Taps>([&](auto t) {
        constexpr typename Steps::XPlace x = Steps::template x_of<Positions>(sub, decltype(t)::value);
        const Smem* b = slot(x.back) + C::input_base + x.row * C::panel_channels;
        wgmma_m64n128k16<C::operand>(acc[decltype(t)::value], a_desc, panel_descriptor<C>(b));
      });
    });
    wgmma_commit();
  }

  template <int Pending>
  __device__ void retire() {
    wgmma_wait<Pending>();
    pin_registers(acc);
  }
};

}  // namespace winrs::cuda
