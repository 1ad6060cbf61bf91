// The direct kernel's filter-row tile on a 128 x 128 channel block (variants.h, wide_taps) on Hopper's
// warpgroup MMA, for bfloat16 and float16 (issue 7, item 3).
//
// The 128 x 128 block of one tap (wgmma.cuh) reads X and dY from L2 for every filter tap and channel block:
// 512 bytes per unit for 32768 FLOP, which held it near 500 TFLOP/s (docs/benchmarks.md, "What bounds the
// 128 x 128 block"). Here one staging of dY and of X with a halo (TapsStager, direct_taps.cuh) feeds the
// three filter columns of a filter row: 192 FLOP per byte. Warpgroup g multiplies output channels 64 g .. 64
// g + 63 by all 128 input channels for each tap, one m64n128k16 per tap and K-block, both operands from
// shared memory in wgmma's 128-byte-swizzled MN-major layout (wgmma.cuh): dY (A) as two 64-channel panels of
// 64 units, X (B) as two panels of 66 positions (72 rows, whole swizzle periods). Tap j's B descriptor starts
// j rows further: the swizzle follows the address bits, so the shifted start reads the rows as they were
// written (tools/wgmma_probe.cu, "128B swizzle, start shifted s rows").
//
// The three taps' accumulators take 192 registers per thread: one block per SM, five copy stages, each
// step's copies issued while its MMAs run, and a step's MMAs still running while the next step's are issued
// (mma_steps_in_flight), so that the tensor cores do not drain at every step's barrier. That gained at most
// 5% (bf16 1D k=3 32:16000:256 0.526 against 0.540 ms, 3x3 32:112:128 0.326 against 0.343-0.362; H100,
// 2026-11-23): the drain was not what holds this tile near 380 TF/s (docs/benchmarks.md, tenth stop).
#pragma once

#include <cstdint>

#include "cuda/direct_taps.cuh"
#include "cuda/wgmma.cuh"

namespace winrs::cuda {

template <Path P, int Taps>
struct WgmmaWideTapsConfig : WgmmaPath<P> {
  using Tile = typename TapsConfig<P, Taps, kWideBlock>::Tile;
  using typename WgmmaPath<P>::Smem;

  static constexpr int alpha = Taps, n = Taps, r = 1, taps = Taps;
  static constexpr int stride = 1,
                       reach = Taps;  // X's column stride (TapsStager): strided layers run TapsConfig
  static constexpr int BN = kWideBlock, BM = kWideBlock;
  static constexpr int blocks_per_sm = 1;
  static constexpr int K = 16;  // units per wgmma (k16)
  static constexpr bool chunked = false, copy = true, tma = false;
  static constexpr int copy_substeps = 4, copy_stages = 5;  // 170 KB: three steps of copies in flight
  static constexpr int copy_units = copy_substeps * K;      // dY units per step
  static constexpr int x_rows = copy_units + Taps - 1;      // X positions per step

  static constexpr int panel_channels = 128 / int(sizeof(Smem));  // one 128-byte swizzle row
  static_assert(2 * panel_channels == BN);
  static constexpr int grad_panel_elems = copy_units * panel_channels;
  static constexpr int x_panel_elems = (x_rows + 7) / 8 * 8 * panel_channels;
  static constexpr int grad_elems = 2 * grad_panel_elems;
  static constexpr int copy_step_elems = grad_elems + 2 * x_panel_elems;
  static_assert(copy_step_elems * sizeof(Smem) % 1024 == 0);
  static constexpr size_t copy_bytes = size_t(copy_stages) * copy_step_elems * sizeof(Smem);
  static constexpr size_t smem_align = 1024;  // the swizzle repeats every 8 rows (1024 bytes)
  static constexpr size_t smem_bytes = copy_bytes + smem_align;

  // Output rounds through the same memory, as TapsConfig's.
  static constexpr int out_stride = BM + 4;
  static constexpr int R = output_rounds(alpha, BN, out_stride, copy_bytes);
  static constexpr int round_rows = BN / R;

  // Element offsets in a step of row d's 16-byte piece at channel c (a multiple of 8) of dY and of X
  // (TapsStager): 128-byte swizzle, piece ^ (d % 8), in the panel of the channel.
  __device__ static constexpr int swizzled(int d, int c) {
    return d * panel_channels + ((c % panel_channels / 8) ^ (d % 8)) * 8;
  }
  __device__ static constexpr int grad_offset(int d, int c) {
    return c / panel_channels * grad_panel_elems + swizzled(d, c);
  }
  __device__ static constexpr int input_offset(int d, int c, int /*phase: stride 1*/ = 0) {
    return grad_elems + c / panel_channels * x_panel_elems + swizzled(d, c);
  }
};

// The GEMM policy of WgmmaWideTapsConfig: warp w holds output channels 16 w .. 16 w + 15 of every tap, each
// tap's accumulators the fragment of its m64n128k16.
template <class C>
struct WgmmaWideTapsGemm : WgmmaRows<C> {
  using WgmmaRows<C>::rows_per_round;
  using Smem = typename C::Smem;
  static constexpr uint32_t sbo = 8 * 128;  // 8 rows of 128 bytes
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

  // The step's copies are issued while its MMAs run (copy_main_loop), then retire<1> waits for the previous
  // step's MMAs, whose buffer the copies issued after the next barrier overwrite. With one block per SM,
  // issuing the copies first left the tensor cores idle while every thread computed its copies' addresses.
  static constexpr bool copies_during_mmas = true;
  static constexpr int mma_steps_in_flight = 1;

  // K-block `sub` of a step; the last commits the step's MMAs.
  __device__ void run_step(const Smem* step, int sub) {
    const int group = warp / 4;
    if (sub == 0) wgmma_fence();
    const Smem* a = step + group * C::grad_panel_elems + sub * C::K * C::panel_channels;
    const uint64_t a_desc = wgmma_descriptor(a, C::grad_panel_elems * int(sizeof(Smem)), sbo);
#pragma unroll
    for (int j = 0; j < C::taps; ++j) {
      const Smem* b = step + C::grad_elems + (sub * C::K + j) * C::panel_channels;
      wgmma_m64n128k16<C::operand>(acc[j], a_desc,
                                   wgmma_descriptor(b, C::x_panel_elems * int(sizeof(Smem)), sbo));
    }
    if (sub == C::copy_substeps - 1) wgmma_commit();
  }

  template <int Pending>
  __device__ void retire() {
    wgmma_wait<Pending>();
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
#pragma unroll
      for (int i = 0; i < 64; ++i) pin_register(acc[j][i]);
  }

  // Round Round's accumulators to As[tap][row][col].
  template <int Round>
  __device__ void stage_round(float* out) const {
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
      stage_wgmma_fragment<C, Round, rows_per_round, 16>(out + j * C::round_rows * C::out_stride, acc[j],
                                                         warp, 0, lane);
  }
};

}  // namespace winrs::cuda
