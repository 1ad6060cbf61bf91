// The persistent block's T-tap tiles for TF32 (on unless WINRS_JAX_TF32_TAPS=0), float32 at the default
// precision (issue 7), and for split TF32 at HIGHEST (below), in the form tools/tf32_wgmma_probe.cu measured
// (docs/design.md, docs/benchmarks.md, thirty-sixth stop). TF32 wgmma reads shared-memory operands K-major
// only, and X and dY are channel-major, so the 16-bit tile's form (both operands from shared memory,
// wgmma_wide_n.cuh) does not carry over:
// - dY is the register operand: each consumer thread loads its fragments (CUTLASS's ALayout_64x8) from the
//   raw buffer the TMA wrote (float32 boxes of 32 channels, 128-byte swizzle), rounding to TF32 there, once a
//   step for all taps;
// - X is the shared-memory operand, transposed into wgmma's K-major 128-byte swizzle (and rounded) by two
//   producer warps, once a step, into a ring of K-major buffers; tap j reads the buffer of the step TapXPlace
//   names, as the 16-bit tile does.
// A step is two positions of 32 images at every batch (a multiple of 32), so that taps read X from their
// step and one before (reach 1). Shared memory: two raw dY buffers, two raw X buffers and three K-major X
// buffers of 32 KB (224 KB).
// Split TF32 (float32 at HIGHEST, FP32-level accuracy; Split): the transposers write X's TF32 high part and
// its TF32 remainder into two K-major buffers, the consumers split dY's fragments in registers, and each tap
// and k8 slice takes three MMAs (low x high, high x low, high x high; low x low is below FP32's rounding).
// Two K-major buffers a stage do not fit three stages of 128 input channels, so these tiles are 128 output x
// 64 input channels (kTf32SplitXChannels): two raw dY buffers of 32 KB, two raw X buffers of 16 KB and three
// stages of 2 x 16 KB (192 KB). Each step's products go into a fresh partial sum that joins the running sum
// by an FP32 add, as on mma.sync (gemm_mma.cuh, mma_tf32_product): the tensor cores' accumulation does not
// round to nearest. A step's path: the issuer copies X (the TMA) -> the transposers transpose it -> the
// consumers' MMAs, which read dY's raw buffer, copied beside. With one raw X buffer (a K-major one more) the
// copy's latency was exposed at every step (stall samples, 3x3 32:56:256, H200, thirty-seventh stop).
// Barriers, per buffer: grad_full / grad_empty (dY), input_full / input_empty (raw X), kmajor_full /
// kmajor_empty (K-major X).
#pragma once

#include <atomic>
#include <cstdint>

#include "cuda/tap_runs.cuh"
#include "cuda/wgmma_persistent.cuh"
#include "winrs/tf32_layout.h"

namespace winrs::cuda {

template <int Taps, bool Split = false, bool LowFirst = false>
struct WgmmaTf32TapsConfig {
  static_assert(Taps == 2 || Taps == 3);
  static_assert(Split || !LowFirst, "the order of the split products");
  static constexpr int variant = 0;
  static constexpr bool split = Split;
  // Split: a step's products with a low part first, the high ones in a second pass (tf32x3_low_first).
  static constexpr bool low_first = LowFirst;
  static constexpr Path path = Split ? Path::kTf32x3 : Path::kTf32;
  static constexpr Operand operand = Split ? Operand::kTF32Split : Operand::kTF32;
  static constexpr bool tensor_cores = true, wgmma = true, tma = true;
  using Storage = float;
  using Smem = float;
  static constexpr int n = Taps, r = 1, taps = Taps;
  static constexpr int BN = kTf32SideChannels;                                // output channels (dY)
  static constexpr int BM = Split ? kTf32SplitXChannels : kTf32SideChannels;  // input channels (X)
  static constexpr int K = 8, copy_units = kTapRunUnits, max_images = kTf32Images;
  static_assert(copy_units == kTf32StepUnits);
  static constexpr int panel_channels = 32, panel_elems = copy_units * panel_channels;
  static constexpr int grad_panels = BN / panel_channels, input_panels = BM / panel_channels;
  static constexpr int grad_elems = grad_panels * panel_elems;    // a step's dY, 128 channels: 32 KB
  static constexpr int input_elems = input_panels * panel_elems;  // a step's X (raw, or a K-major part)
  static constexpr int grad_bytes = grad_elems * 4, input_bytes = input_elems * 4;
  static constexpr int kmajor_parts = Split ? 2 : 1;  // the high part, then the low part
  static constexpr int kmajor_elems = kmajor_parts * input_elems, kmajor_bytes = kmajor_elems * 4;
  static constexpr int grad_stages = 2, input_stages = 2, kmajor_stages = 3;
  static_assert(kTapRunUnits / max_images == 2 && Taps - 1 <= 2,
                "two positions a step: taps read X from their step and one before (reach 1)");
  static_assert(kmajor_stages >= 3, "taps read their step and one before; the producer writes one ahead");
  static constexpr int grad_base = 0, input_base = grad_stages * grad_elems,
                       kmajor_base = input_base + input_stages * input_elems;
  static constexpr size_t copy_bytes = size_t(kmajor_base + kmajor_stages * kmajor_elems) * 4;
  static constexpr size_t smem_align = 1024;
  static constexpr size_t barrier_offset = copy_bytes;
  static constexpr int barriers = 2 * (grad_stages + input_stages + kmajor_stages);
  static constexpr size_t smem_bytes = copy_bytes + smem_align + barriers * sizeof(uint64_t);
  static_assert(smem_bytes <= 232448, "Hopper's 227 KB of shared memory per block");
};

// The TMA boxes of a T-tap tile's steps in float32 (as TapRuns in 16 bits): a step's X into a raw X buffer
// and, from its run's `reach`-th step on, its dY into a raw dY buffer, in 32-channel panels (four a side of
// 128 channels, two of X's 64 on the split-TF32 tiles).
template <class C>
struct Tf32TapRuns : TapRunWalk {
  __device__ Tf32TapRuns(const Problem& p, const WorkTile& work, const UnitWalk& walk)
      : TapRunWalk(p, work, walk, C::taps, C::max_images) {}

  __device__ uint32_t grad_bytes(int s) const { return computes(s) ? uint32_t(C::grad_bytes) : 0u; }

  // Step s's X (`input`) or dY into `buffer`, completing on `bar`.
  __device__ void issue(const OmegaArgs& args, const WorkTile& work, const UnitWalk& walk, float* buffer,
                        uint64_t* bar, int s, bool input) const {
    boxes(work, walk, s, input ? C::input_panels : 0, input ? 0 : C::grad_panels, C::panel_channels,
          [&](bool grad, int panel, int q, int c0, int c1, int c2, int c3) {
            tma_load_4d(buffer + panel * C::panel_elems + q * images * C::panel_channels,
                        grad ? &args.grad_map : &args.input_map, bar, c0, c1, c2, c3);
          });
  }
};

// A tile of the block's walk and its steps' boxes.
template <class C>
struct Tf32Tile {
  long long index;
  WorkTile work;
  UnitWalk walk;
  Tf32TapRuns<C> plan;
  __device__ Tf32Tile(const OmegaArgs& args, const TileScheduler& scheduler, long long tile_index)
      : index(tile_index),
        work(scheduler.tile(tile_index)),
        walk(persistent_walk<C>(args, work)),
        plan(args.problem, work, walk) {}
};

// The transposers' move of the raw X buffer (Channels channels) into a K-major one, TF32-rounded, or for
// Split into a K-major high part and, Channels x 64 floats on, the TF32-rounded remainder (winrs/numeric.h,
// split_tf32; winrs/tf32_layout.h: the blocks, their pieces and the host check); `thread` of
// kTf32TransposeThreads.
template <int Channels, bool Split>
__device__ __forceinline__ void tf32_transpose(const float* raw, float* kmajor, int thread) {
  constexpr int its = tf32_transpose_its(Channels);
  constexpr uint32_t low_bytes = 4u * kTf32StepUnits * Channels;
  const uint32_t raw_base = shared_address(raw), kmajor_base = shared_address(kmajor);
#pragma unroll
  for (int it = 0; it < its; ++it) {
    const Tf32TransposeBlock b = tf32_transpose_block(thread, it, its);
    const int first_raw = tf32_block_raw(b), first_kmajor = tf32_block_kmajor(b, Channels);
    uint32_t v[4][4];  // v[r][e]: unit 4 ug + r, channel 4 cg + e
#pragma unroll
    for (int r = 0; r < 4; ++r)
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[r][0]), "=r"(v[r][1]), "=r"(v[r][2]), "=r"(v[r][3])
                   : "r"(raw_base + 4 * tf32_block_piece(first_raw, r))
                   : "memory");
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t at = kmajor_base + 4 * tf32_block_piece(first_kmajor, e);
      if constexpr (Split) {
        uint32_t high[4], low[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          high[r] = tf32_bits(__uint_as_float(v[r][e]));
          low[r] = tf32_bits(__uint_as_float(v[r][e]) - __uint_as_float(high[r]));
        }
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(high[0]), "r"(high[1]),
                     "r"(high[2]), "r"(high[3])
                     : "memory");
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at + low_bytes), "r"(low[0]),
                     "r"(low[1]), "r"(low[2]), "r"(low[3])
                     : "memory");
      } else {
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at),
                     "r"(tf32_bits(__uint_as_float(v[0][e]))), "r"(tf32_bits(__uint_as_float(v[1][e]))),
                     "r"(tf32_bits(__uint_as_float(v[2][e]))), "r"(tf32_bits(__uint_as_float(v[3][e])))
                     : "memory");
      }
    }
  }
}

// D (64 x N, FP32) = A (64 x 8, TF32 registers) B (8 x N, TF32, K-major in shared memory) + D, or without
// D's old value where Accumulate is false (wgmma's scale-d).
template <int N, bool Accumulate = true>
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  static_assert(N == 64 || N == 128);
#if WINRS_WGMMA_CODE
#define WINRS_D8(i)                                                                           \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
  if constexpr (N == 128) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
        "%59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, %69, 1, 1;\n"
        : WINRS_D8(0), WINRS_D8(8), WINRS_D8(16), WINRS_D8(24), WINRS_D8(32), WINRS_D8(40), WINRS_D8(48),
          WINRS_D8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(int(Accumulate)));
  }
  if constexpr (N == 64) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, %37, 1, 1;\n"
        : WINRS_D8(0), WINRS_D8(8), WINRS_D8(16), WINRS_D8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(int(Accumulate)));
  }
#undef WINRS_D8
#endif
}

// The K-major buffers' descriptor: 128-byte swizzle, SBO 1024 bytes (eight 128-byte rows), LBO unused.
__device__ __forceinline__ uint64_t tf32_kmajor_descriptor(const float* p) {
  return wgmma_descriptor(p, 16, 1024);
}

// The consumers' GEMM: warpgroup g multiplies output channels 64 g .. 64 g + 63 (dY's fragments) by the
// tile's BM input channels for each tap. A step is eight groups of one k8 slice x T taps (the probe ran four
// groups of two slices); a group's fragment sits in one of two register sets, loaded again once the group two
// before, which read it, is done (wait<1>): sets of two slices left ptxas short of registers beside 192
// accumulators. The sets are members, alive across steps: a set that an MMA may still read is never a
// register the compiler thinks free (pin after the wait). Split: a set holds the fragment's high and low
// parts, and the step's products go into `partial`, added into `acc` at the next step's first group (after
// wait<0>: the step's MMAs done) or at retire.
template <class C>
struct Tf32TapRunsGemm {
  static constexpr int per_tap = C::BM / 2;  // a thread's accumulators of an m64nBMk8 product
  static constexpr int accumulators = per_tap * C::taps;
  int fragment[4];  // this thread's fragment offsets in a raw dY buffer for slice 0 (+256 floats a slice)
  float acc[C::taps][per_tap];
  float partial[C::split ? C::taps : 1][C::split ? per_tap : 1];
  bool pending;                                  // split: `partial` holds a step's products not yet in `acc`
  uint32_t a[2][4], a_low[2][C::split ? 4 : 1];  // two register sets of one k8 slice's fragment

  __device__ void init(int tid) {
    // Consumer warps 0..7: rows 16 (tid / 32) .. of the tile's 128 output channels.
#pragma unroll
    for (int r = 0; r < 4; ++r)
      fragment[r] = tf32_fragment_offset(16 * (tid / 32) + tid % 32 / 4, tid % 32, r);
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
#pragma unroll
      for (int i = 0; i < per_tap; ++i) acc[j][i] = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        a[h][r] = 0u;
        if constexpr (C::split) a_low[h][r] = 0u;
      }
    pending = false;
  }
  __device__ const float* column(int j) const { return acc[j]; }

  // Split: the last step's products into the running sums, once its MMAs are done (wait<0> before).
  __device__ void fold() {
    if constexpr (C::split) {
      if (!pending) return;
#pragma unroll
      for (int j = 0; j < C::taps; ++j) {
        pin_registers(partial[j]);
#pragma unroll
        for (int i = 0; i < per_tap; ++i) acc[j][i] += partial[j][i];
      }
      pending = false;
    }
  }

  // Step g of the block (its K-major buffer g % kmajor_stages), dY from `grad`, two positions. A tile of
  // fewer taps than T (a row's last, or a balanced cut) multiplies all T and drops the rest at its output:
  // one instance per tap count as well (the 16-bit tile's) left ptxas short of registers for the
  // register-operand MMAs (it serialised them). `previous_done()` runs once the step before's MMAs are done
  // (at the second group's wait), so that the producer may transpose into the buffer they read while this
  // step's MMAs run: released after the step, the ring of three left each transpose's time exposed.
  template <class PreviousDone>
  __device__ void run(const float* grad, const float* kmajor, int g, const PreviousDone& previous_done) {
    const uint64_t base = tf32_kmajor_descriptor(kmajor);
    if constexpr (C::low_first) {  // a second pass over the step's slices for the high products
      static_for<0, 8>(
          [&](auto s) { group<decltype(s)::value, kLowProducts>(grad, base, g, previous_done); });
      static_for<0, 8>(
          [&](auto s) { group<decltype(s)::value, kHighProducts>(grad, base, g, previous_done); });
    } else {
      static_for<0, 8>(
          [&](auto s) { group<decltype(s)::value, kAllProducts>(grad, base, g, previous_done); });
    }
    if constexpr (C::split) pending = true;
  }

  // The products a group of MMAs adds: all (TF32's one, or split TF32's three), or for low_first the two with
  // a low part, then in a second pass the high ones.
  enum Products { kAllProducts, kLowProducts, kHighProducts };
  // One k8 slice's group: its fragment into register set Slice % 2, and each tap's products.
  template <int Slice, int Which, class PreviousDone>
  __device__ __forceinline__ void group(const float* grad, uint64_t base, int g,
                                        const PreviousDone& previous_done) {
    constexpr int Positions = kTapRunUnits / C::max_images, h = Slice % 2;
    constexpr bool first = Slice == 0 && Which != kHighProducts, low = C::split && Which != kHighProducts;
    if constexpr (C::split && first) {
      wgmma_wait<0>();  // the step before's products, in `partial`, are done
      fold();
    } else {
      wgmma_wait<1>();
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      pin_register(a[h][r]);
      if constexpr (C::split) pin_register(a_low[h][r]);
    }
    if constexpr (Slice == 1 && Which != kHighProducts) previous_done();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float v = grad[fragment[r] + 256 * Slice];
      a[h][r] = tf32_bits(v);
      if constexpr (low) a_low[h][r] = tf32_bits(v - __uint_as_float(a[h][r]));
    }
    wgmma_fence();
    static_for<0, C::taps>([&](auto t) {
      constexpr int j = decltype(t)::value;
      // K-block Slice / 2 (16 units) of tap j: its X `back` steps before, from unit `row` of that step; the
      // slice is its half at row + 8 (whole k8 slices: 32-byte offsets in a K-major atom).
      constexpr TapXPlace x = tap_x_place(C::taps, Positions, Slice / 2, j);
      const uint32_t buffer = uint32_t(g - x.back) % C::kmajor_stages * C::kmajor_bytes;
      const uint32_t offset = buffer + uint32_t(4 * tf32_kmajor_index(0, x.row + 8 * (Slice % 2), C::BM));
      const uint64_t high = base + (offset >> 4);
      if constexpr (C::split) {
        if constexpr (Which != kHighProducts) {
          const uint64_t low_part = base + ((offset + C::input_bytes) >> 4);
          wgmma_tf32_rs<C::BM, !first>(partial[j], a_low[h], high);
          wgmma_tf32_rs<C::BM>(partial[j], a[h], low_part);
        }
        if constexpr (Which != kLowProducts) wgmma_tf32_rs<C::BM>(partial[j], a[h], high);
      } else {
        wgmma_tf32_rs<C::BM>(acc[j], a[h], high);
      }
    });
    wgmma_commit();
  }

  template <int Pending>
  __device__ void retire() {
    wgmma_wait<Pending>();
#pragma unroll
    for (int j = 0; j < C::taps; ++j) pin_registers(acc[j]);
    if constexpr (Pending == 0) fold();
  }
};

// The persistent block on TF32 (wgmma_persistent.cuh's structure), its producer warpgroup in three roles:
// warp 0's thread 0 issues every step's boxes (X into a raw X buffer, dY into a raw dY buffer), warps 1 and
// 2 transpose each step's X into the K-major ring, warp 3 leaves. The two consumer warpgroups load dY's
// fragments and run the MMAs, and write each tile's output as the 16-bit block does. All walk the block's
// steps g across its tiles (BlockStepCursor). (With every producer thread transposing and thread 0 issuing
// between transposes, a warp of issue held the transposes of each step, and the consumers waited for X about
// half their time: stall samples, 3x3 32:56:256, thirty-eighth stop.)
template <class C>
__global__ void __launch_bounds__(kPersistentThreads, 1)
    persistent_tf32_kernel(const __grid_constant__ OmegaArgs args) {
  if constexpr (!WINRS_WGMMA_CODE) return;  // not launched on this target (launch_tf32_taps)
  extern __shared__ float4 smem4[];
  char* base = reinterpret_cast<char*>(smem4);
  base += (C::smem_align - shared_address(base) % C::smem_align) % C::smem_align;  // room in smem_bytes
  float* smem = reinterpret_cast<float*>(base);
  float* grads = smem + C::grad_base;
  float* inputs = smem + C::input_base;
  float* kmajors = smem + C::kmajor_base;
  uint64_t* grad_full = reinterpret_cast<uint64_t*>(base + C::barrier_offset);
  uint64_t* grad_empty = grad_full + C::grad_stages;
  uint64_t* input_full = grad_empty + C::grad_stages;
  uint64_t* input_empty = input_full + C::input_stages;
  uint64_t* kmajor_full = input_empty + C::input_stages;
  uint64_t* kmajor_empty = kmajor_full + C::kmajor_stages;
  constexpr int consumer_warps = kConsumerThreads / 32, transposer_warps = kTf32TransposeThreads / 32;
  static_assert(32 + kTf32TransposeThreads <= kProducerThreads, "the issuer's warp and the transposers");
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::grad_stages; ++s) {
      mbarrier_init(grad_full + s, 1);  // the issuer's arrival, with the copies' bytes
      mbarrier_init(grad_empty + s, consumer_warps);
    }
    for (int s = 0; s < C::input_stages; ++s) {
      mbarrier_init(input_full + s, 1);
      mbarrier_init(input_empty + s, transposer_warps);
    }
    for (int s = 0; s < C::kmajor_stages; ++s) {
      mbarrier_init(kmajor_full + s, transposer_warps);
      mbarrier_init(kmajor_empty + s, consumer_warps);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const TileScheduler scheduler = persistent_scheduler<C>(args);
  const long long tiles = scheduler.count();

  if (threadIdx.x < kProducerThreads) {
    lower_registers<40>();  // 128 x 40 + 256 x 232: the 384 x 168 registers the block was launched with
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if ((warp == 0 && lane != 0) || warp > transposer_warps) return;
    const auto steps_of = [&](long long index) { return Tf32Tile<C>(args, scheduler, index).plan.steps; };
    const auto tile_after = [&](BlockTiles& block_tiles, long long* tile) {
      return block_tiles.next(gridDim.x, scheduler.count(), tile);
    };
    BlockStepCursor step;  // the step g (winrs/tap_runs.h: tiles without steps passed over)
    step.tiles = BlockTiles{blockIdx.x};
    step.seek(tile_after, steps_of);
    if (warp == 0) {  // the issuer: step g's X once its raw buffer's step g - 2 is transposed, and its dY
      if (!step.valid) return;
      Tf32Tile<C> tile(args, scheduler, step.tile);
      for (int g = 0; step.valid; ++g, step.advance(tile_after, steps_of)) {
        if (step.tile != tile.index) tile = Tf32Tile<C>(args, scheduler, step.tile);
        const int is = g % C::input_stages, gs = g % C::grad_stages;
        if (g >= C::input_stages) mbarrier_wait(input_empty + is, (g / C::input_stages - 1) & 1);
        mbarrier_arrive_expect(input_full + is, uint32_t(C::input_bytes));
        tile.plan.issue(args, tile.work, tile.walk, inputs + is * C::input_elems, input_full + is, step.s,
                        true);
        if (g >= C::grad_stages) mbarrier_wait(grad_empty + gs, (g / C::grad_stages - 1) & 1);
        mbarrier_arrive_expect(grad_full + gs, tile.plan.grad_bytes(step.s));
        tile.plan.issue(args, tile.work, tile.walk, grads + gs * C::grad_elems, grad_full + gs, step.s,
                        false);
      }
      return;
    }
    for (int g = 0; step.valid; ++g, step.advance(tile_after, steps_of)) {  // the transposers
      const int is = g % C::input_stages, ks = g % C::kmajor_stages;
      mbarrier_wait(input_full + is, (g / C::input_stages) & 1);
      if (g >= C::kmajor_stages) mbarrier_wait(kmajor_empty + ks, (g / C::kmajor_stages - 1) & 1);
      tf32_transpose<C::BM, C::split>(inputs + is * C::input_elems, kmajors + ks * C::kmajor_elems,
                                      threadIdx.x - 32);
      fence_async_proxy();  // the transposed X visible to the MMAs (async proxy)
      __syncwarp();         // every lane's loads and stores before lane 0's arrivals
      if (lane == 0) {
        mbarrier_arrive(input_empty + is);
        mbarrier_arrive(kmajor_full + ks);
      }
    }
    return;
  }

  const Problem& p = args.problem;
  const int tid = threadIdx.x - kProducerThreads, warp = tid / 32, lane = tid % 32;
  raise_registers<232>();
  Tf32TapRunsGemm<C> gemm;
  int g = 0, released = 0;
  const auto release_through = [&](int last) {  // K-major buffers no later step reads
    for (; released <= last; ++released)
      if (lane == 0) mbarrier_arrive(kmajor_empty + released % C::kmajor_stages);
    __syncwarp();
  };
  for (long long index = blockIdx.x; index < tiles; index += gridDim.x) {
    const Tf32Tile<C> tile(args, scheduler, index);
    const WorkTile& work = tile.work;
    const Tf32TapRuns<C>& plan = tile.plan;
    const bool idle = work.oc0 + 64 * (warp / 4) >= int(p.out_c);  // past the tensor: waits and releases
    gemm.init(tid);
    for (int s = 0; s < plan.steps; ++s, ++g) {
      const int gs = g % C::grad_stages, ks = g % C::kmajor_stages;
      mbarrier_wait(grad_full + gs, (g / C::grad_stages) & 1);
      mbarrier_wait(kmajor_full + ks, (g / C::kmajor_stages) & 1);
      if (plan.computes(s) && !idle) {
        gemm.run(grads + gs * C::grad_elems, kmajors, g, [&] { release_through(g - 1 - plan.reach); });
      } else {
        wgmma_fence();
        wgmma_commit();  // an empty group keeps the count uniform
      }
      __syncwarp();                                     // every lane's fragment loads before lane 0's release
      if (lane == 0) mbarrier_arrive(grad_empty + gs);  // dY's fragments are in registers
      wgmma_wait<1>();  // the step before is done (run waited so at its second group already)
      release_through(g - 1 - plan.reach);
    }
    gemm.template retire<0>();
    release_through(g - 1);

    // (A tile without steps adds nothing: its sums are atomic, tap_runs_fit.)
    if (plan.steps > 0) write_tile<C::taps>(gemm, args, work, plan.taps, warp, lane);
  }
}

// The TMA's maps of float32 X and dY for the TF32 tiles: boxes of 32 channels (128 bytes) of one pixel of
// `images` images.
inline bool encode_tf32_pixel_boxes(CUtensorMap* map, const void* base, long long n, long long h, long long w,
                                    long long c, int images) {
  const cuuint32_t box[4] = {32, 1, 1, cuuint32_t(images)};
  return encode_boxes(map, base, 4, n, h, w, c, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// Launches of the TF32 and split-TF32 tiles in this process, together (tools/kernel_check.cu asserts that
// each path's cases ran them, by the count before and after).
inline std::atomic<long long> tf32_taps_launches{0};

// Whether the TF32 tiles are switched on: unless WINRS_JAX_TF32_TAPS=0 (the direct kernel on mma.sync, to
// compare them; the planner reads the same switch, planner.py).
inline bool tf32_taps_enabled() { return env_flag("WINRS_JAX_TF32_TAPS") != '0'; }

// Whether path P runs the split-TF32 tiles (float32 at HIGHEST) rather than the TF32 ones.
template <Path P>
inline constexpr bool kTf32TilesSplit = P == Path::kTf32x3;
template <Path P>
inline constexpr bool kTf32TilesPath = P == Path::kTf32 || P == Path::kTf32x3;

// The order of the split-TF32 tiles' products, an experiment's switch until measured: with
// WINRS_JAX_TF32X3_LOW_FIRST=1 each step adds the products with a low part first and the high products in a
// second pass over its slices, so that only eight truncating additions a tap land on a partial sum of the
// step's magnitude instead of 24 (MARE 1.8e-7 against 4.7e-7 in tools/split_tf32_bias.py's emulation, whose
// interleaved order matches the measured 4.7e-7), at the cost of loading each slice's fragment twice.
inline bool tf32x3_low_first() { return env_flag("WINRS_JAX_TF32X3_LOW_FIRST") == '1'; }

// Launches the tiles of config C on the maps (launch_persistent_block); counts the launches of every form.
template <class C>
bool launch_tf32_tiles(const OmegaArgs& mapped, cudaStream_t stream, cudaError_t* result) {
  if (!launch_persistent_block<C>(persistent_tf32_kernel<C>, mapped, stream, result)) return false;
  tf32_taps_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}
// The TF32 (or split-TF32) T-tap tiles of T taps, split TF32 in the order tf32x3_low_first says.
template <int Taps, bool Split>
bool launch_tf32_taps_config(const OmegaArgs& mapped, cudaStream_t stream, cudaError_t* result) {
  if constexpr (Split)
    if (tf32x3_low_first())
      return launch_tf32_tiles<WgmmaTf32TapsConfig<Taps, true, true>>(mapped, stream, result);
  return launch_tf32_tiles<WgmmaTf32TapsConfig<Taps, Split>>(mapped, stream, result);
}

// Whether the TF32 tiles may take a launch of `args`, its rows aside (persistent_taps): switched on, Hopper's
// sm_90a code loaded, one problem, chains of one link, the planned grid's batch whole, X not read in place by
// depth slice (their maps take X as the batch of dY's images), and their data (winrs/tap_runs.h,
// tf32_tap_tile_data). (The launch asks it before it cuts a row's last column off; a
// template, as launch_tf32_taps.)
template <Path P>
bool tf32_taps_may_launch(const OmegaArgs& args) {
  static_assert(kTf32TilesPath<P>);
  const Problem& p = args.problem;
  using C = WgmmaTf32TapsConfig<3, kTf32TilesSplit<P>>;
  return tf32_taps_enabled() && persistent_launchable(args) && args.grid.image_parts == 1 &&
         !args.depth.on() && tf32_tap_tile_data(p) &&
         loads_sm90a(reinterpret_cast<const void*>(persistent_tf32_kernel<C>));
}

// Launches the TF32 T-tap tiles (their maps set here) where they apply: tf32_taps_may_launch, and T-tap rows
// (persistent_taps at two positions a step gives 2 or 3). False with nothing launched otherwise; else *result
// is the launch's status. (A template, so that only the TF32 paths' translation units compile the kernels.)
template <Path P>
bool launch_tf32_taps(const OmegaArgs& args, cudaStream_t stream, cudaError_t* result) {
  static_assert(kTf32TilesPath<P>);
  const Problem& p = args.problem;
  if (!tf32_taps_may_launch<P>(args)) return false;
  const int taps = persistent_taps(p, args.grid, args.kernel, kTf32Images);
  if (taps != 2 && taps != 3) return false;
  OmegaArgs mapped = args;
  if (!encode_tf32_pixel_boxes(&mapped.grad_map, args.out_grad, p.batch, p.out_h, p.out_w, p.out_c,
                               kTf32Images) ||
      !encode_tf32_pixel_boxes(&mapped.input_map, args.input, p.batch, p.in_h, p.in_w, p.in_c, kTf32Images))
    return false;
  return taps == 3 ? launch_tf32_taps_config<3, kTf32TilesSplit<P>>(mapped, stream, result)
                   : launch_tf32_taps_config<2, kTf32TilesSplit<P>>(mapped, stream, result);
}

}  // namespace winrs::cuda
