// The one-tap block and the T-tap tiles as a persistent, warp-specialised kernel (issue 7; wgmma_wide_n.cuh;
// the structure of cuDNN's Hopper wgrad kernel, docs/benchmarks.md, eighteenth stop): one block of three
// warpgroups per SM walks the work tiles b, b + G, b + 2G, ... of the TileScheduler (G blocks, at most one
// per SM). Warpgroup 0 is the producer: one thread issues every step's TMA boxes (pixel_steps.cuh, one tap;
// tap_runs.cuh, T taps) into a ring of buffers, running ahead across tile boundaries, so that a tile's first
// steps are in flight while the previous tile's MMAs finish and its output is written. Warpgroups 1 and 2 are
// the consumers, each 64 output channels of the tile; a step's MMAs read its buffer and, for T taps, the
// `reach` buffers before it, so a warp releases a buffer once the MMAs of the step `reach` steps after it are
// done (one step later than they were issued, as tma_main_loop). They write a tile's output straight from the
// accumulator fragments (float2 stores or atomics, or float4 atomics), with write_round's bucket and atomic
// semantics.
//
// One tap on 128 x 256 channels against the 128 x 128 block of one tile (two blocks per SM): 1.01-1.23x
// faster on ten bf16 layers (H100, 2026-11-24; docs/benchmarks.md, nineteenth stop). The same persistent
// structure on the 128 x 128 tile (two consumer warpgroups of m64n128k16) ran 1.2-1.9x slower than the two
// blocks of one tile, whether staged by the TMA or by cp.async from the producer's 128 threads; clusters of
// two blocks sharing X by multicast moved the 128 x 256 tile by -4% to +5%. Neither is kept (branch
// experiment/persistent-one-tap).
//
// Plans whose segments chain (serial split-K, segments.h) keep the 128 x 128 block: a persistent block
// waiting for a link whose tile sits with a block that cannot become resident (where the process has fewer
// SMs than the device, under MPS or in a green context) would wait for ever, where the blocks of one tile
// only ever wait for blocks dispatched before them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "cuda/device.cuh"
#include "cuda/omega.h"
#include "cuda/pixel_steps.cuh"
#include "cuda/tap_runs.cuh"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/wgmma_wide_n.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

inline constexpr int kProducerThreads = 128, kConsumerThreads = 256;
inline constexpr int kPersistentThreads = kProducerThreads + kConsumerThreads;
template <Path P, int Taps>
using PersistentConfig = WgmmaWideNConfig<P, Taps>;
template <class C>
using PersistentSteps = std::conditional_t<C::taps == 1, PixelSteps<C>, TapRuns<C>>;
template <class C>
using PersistentGemm = std::conditional_t<C::taps == 1, WgmmaWideNGemm<C>, WgmmaTapRunsGemm<C>>;

// dW's element of output channel oc at the tile's filter row and column and its first input channel.
__device__ __forceinline__ long long tile_offset(const Problem& p, const WorkTile& work, int oc) {
  return ((long long)(oc * int(p.filter_h) + work.fh) * int(p.filter_w) + work.f0) * int(p.in_c) + work.ic0;
}

// Writes a consumer thread's accumulators of one filter column (the wgmma fragment: rows 16 w + lane / 4 (+
// 8) of the tile, columns 8 j + 2 (lane % 4) and the next) into the tile's bucket: stores, adds (the residual
// column's kernel, after the primary one's), or atomic adds into the zeroed dW. Input channels come in
// 16-byte pieces (the TMA's maps need them), so a pair of columns is in range whole.
template <int Accumulators>
__device__ __forceinline__ void write_fragment(const float* acc, float* bucket, const Problem& p,
                                               const WorkTile& work, int warp, int lane, bool atomic,
                                               bool accumulate) {
  const int out_c = int(p.out_c), in_c = int(p.in_c);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int oc = work.oc0 + 16 * warp + 8 * h + g;
    if (oc >= out_c) continue;
    float* row = bucket + tile_offset(p, work, oc) + 2 * t;
#pragma unroll
    for (int j = 0; j < Accumulators / 4; ++j) {
      if (work.ic0 + 8 * j + 2 * t >= in_c) break;
      float2* dst = reinterpret_cast<float2*>(row + 8 * j);
      float2 v = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      if (atomic) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(dst, v);  // RED.ADD.F32x2 in L2
#endif
      } else {
        if (accumulate) {
          const float2 old = __ldcg(dst);
          v.x += old.x;
          v.y += old.y;
        }
        *dst = v;
      }
    }
  }
}

// The tiles a persistent block of config C walks (its kernels' and its launch's count), and a tile's units.
// (C::taps > 1: the one-tap kernel compiles the balanced cut out; kept, it spilled a register.)
template <class C>
__host__ __device__ inline TileScheduler persistent_scheduler(const OmegaArgs& args) {
  return make_scheduler(args.problem, args.grid, args.kernel, C::n, C::BN, C::BM, 1,
                        C::taps > 1 && args.balanced_taps);
}
template <class C>
__device__ __forceinline__ UnitWalk persistent_walk(const OmegaArgs& args, const WorkTile& work) {
  return make_unit_walk(args.problem, args.grid.segment(work.segment), work.fh, C::r);
}
// A tile's output (omega_kernel's write_round, from the fragments; chains of one link, no semaphores): the
// fragments of its first `taps` filter columns of Taps into its bucket.
template <int Taps, class Gemm>
__device__ __forceinline__ void write_tile(const Gemm& gemm, const OmegaArgs& args, const WorkTile& work,
                                           int taps, int warp, int lane) {
  const Problem& p = args.problem;
  const int bucket_index = args.grid.bucket_of(work.local);
  float* bucket = bucket_index == 0 ? args.filter_grad
                                    : args.workspace + (long long)(bucket_index - 1) * p.filter_elems();
  constexpr int per_tap = Gemm::accumulators / Taps;
  static_for<0, Taps>([&](auto t) {
    constexpr int j = decltype(t)::value;
    if (j >= taps) return;
    WorkTile column = work;
    column.f0 += j;
    write_fragment<per_tap>(gemm.column(j), bucket, p, column, warp, lane, args.grid.atomic,
                            args.kernel == 1);
  });
}

template <class C>
__global__ void __launch_bounds__(kPersistentThreads, 1)
    persistent_kernel(const __grid_constant__ OmegaArgs args) {
  if constexpr (!WINRS_WGMMA_CODE) return;  // not launched on this target (launch_persistent)
  using Steps = PersistentSteps<C>;
  constexpr int stages = C::copy_stages, step_elems = C::copy_step_elems;
  extern __shared__ float4 smem4[];
  char* base = reinterpret_cast<char*>(smem4);
  base += (C::smem_align - shared_address(base) % C::smem_align) % C::smem_align;  // room in smem_bytes
  typename C::Smem* smem = reinterpret_cast<typename C::Smem*>(base);
  uint64_t* full = reinterpret_cast<uint64_t*>(base + C::barrier_offset);
  uint64_t* empty = full + stages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbarrier_init(full + s, 1);                       // the producer's arrival, with the copies' bytes
      mbarrier_init(empty + s, kConsumerThreads / 32);  // one arrival per consumer warp
    }
    mbarrier_init_fence();
  }
  __syncthreads();  // the block's last barrier 0: the producer's other threads leave below

  const Problem& p = args.problem;
  const TileScheduler scheduler = persistent_scheduler<C>(args);
  const long long tiles = scheduler.count();

  if (threadIdx.x < kProducerThreads) {  // the producer warpgroup: one thread issues
    lower_registers<40>();
    if (threadIdx.x != 0) return;
    int g = 0;  // steps issued by this block
    for (long long index = blockIdx.x; index < tiles; index += gridDim.x) {
      const WorkTile work = scheduler.tile(index);
      const UnitWalk walk = persistent_walk<C>(args, work);
      const Steps plan(p, work, walk);
      for (int s = 0; s < plan.steps; ++s, ++g) {
        const int slot = g % stages;
        if (g >= stages) mbarrier_wait(empty + slot, (g / stages - 1) & 1);  // its previous step released
        mbarrier_arrive_expect(full + slot, plan.bytes(s));
        plan.issue(args, work, walk, smem + slot * step_elems, full + slot, s);
      }
    }
    return;
  }

  const int tid = threadIdx.x - kProducerThreads, warp = tid / 32, lane = tid % 32;
  raise_registers<232>();
  PersistentGemm<C> gemm;
  int g = 0;         // steps consumed by this block
  int released = 0;  // buffers (steps) this warp released
  const auto release_through = [&](int last) {
    for (; released <= last; ++released)
      if (lane == 0) mbarrier_arrive(empty + released % stages);
    __syncwarp();  // converged again before the next step's .aligned wgmma instructions
  };
  for (long long index = blockIdx.x; index < tiles; index += gridDim.x) {
    const WorkTile work = scheduler.tile(index);
    const Steps plan(p, work, persistent_walk<C>(args, work));
    // A warpgroup whose 64 output channels all lie past the tensor (a last block of 1-64 channels, as in 192
    // or 136) would multiply dY's zeros: it only waits and releases.
    const bool idle = work.oc0 + 64 * (warp / 4) >= int(p.out_c);
    gemm.init(tid);
    for (int s = 0; s < plan.steps; ++s, ++g) {
      const int current = g % stages;
      mbarrier_wait(full + current, (g / stages) & 1);
      const auto slot = [&](int back) {  // back: a constant of the MMAs' code
        return smem + (current >= back ? current - back : current - back + stages) * step_elems;
      };
      if (plan.computes(s) && !idle) {
        gemm.run(slot, plan);
      } else {
        wgmma_fence();   // (else ptxas injects one, warning C7519)
        wgmma_commit();  // X alone (the top of a tap run), or idle: an empty group keeps the count uniform
      }
      gemm.template retire<1>();  // the previous step's MMAs are done: the buffer `reach` before it is free
      release_through(g - 1 - plan.reach);
    }
    gemm.template retire<0>();
    release_through(g - 1);

    write_tile<C::taps>(gemm, args, work, plan.taps, warp, lane);
  }
}

// A launch-time switch's first character ('\0' where unset).
inline char env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value ? value[0] : '\0';
}
// The T-tap tiles' rules (winrs/tap_runs.h, TapRunRules) as the experiments' switches set them:
// WINRS_JAX_TAP_RUNS=2 drops the row length (to measure where it should lie), WINRS_JAX_TAP_BALANCED=0 cuts
// filters 3k + 1 wide 3 + 1 and 3 + 3 + 1 (to compare with the even cut). Boxes of at most `max_images`.
inline TapRunRules tap_run_rules(int max_images = kTapRunUnits) {
  return TapRunRules{env_flag("WINRS_JAX_TAP_RUNS") != '2', env_flag("WINRS_JAX_TAP_BALANCED") != '0',
                     max_images};
}

// Filter columns per tile of the persistent block on a layer that the 128 x 128 TMA block would take for
// kernel `kernel` of the grid's pair, or 0 for that block: T = 3 taps (2 for filters two wide) where they fit
// (winrs/tap_runs.h, tap_runs_fit: atomic plans, long enough rows), else one tap where X's 128-channel blocks
// pair up (no more channels computed and dropped than by two 128-wide blocks). WINRS_JAX_TAP_RUNS=0 leaves
// one tap, WINRS_JAX_PERSISTENT=0 the 128 x 128 block (to compare them); tap_run_rules for the others.
inline int persistent_taps(const Problem& p, const SegmentGrid& grid, int kernel,
                           int max_images = kTapRunUnits) {
  if (env_flag("WINRS_JAX_PERSISTENT") == '0') return 0;
  const int taps = tap_run_taps(int(p.filter_w));
  if (env_flag("WINRS_JAX_TAP_RUNS") != '0' && tap_runs_fit(p, grid, kernel, taps, tap_run_rules(max_images)))
    return taps;
  return (p.in_c + 127) / 128 % 2 == 0 ? 1 : 0;
}

// The grid whose kernel 0 the T-tap tiles take on all columns but the last of a row of odd width at two
// positions a step (tap_run_even_split), or `grid` where there is no such split (the persistent block's
// switches as above).
inline SegmentGrid persistent_split(const Problem& p, const SegmentGrid& grid, int kernel,
                                    int max_images = kTapRunUnits) {
  if (kernel != 0 || env_flag("WINRS_JAX_PERSISTENT") == '0' || env_flag("WINRS_JAX_TAP_RUNS") == '0')
    return grid;
  return tap_run_even_split(p, grid, tap_run_taps(int(p.filter_w)), tap_run_rules(max_images));
}

// Stacked problems (OmegaArgs::groups) launched one at a time where the persistent block takes them, with
// WINRS_JAX_STACKED_PERSISTENT=1 (an experiment's switch until measured; cuda/omega_kernel.cuh,
// launch_direct).
inline bool stacked_persistent_enabled() { return env_flag("WINRS_JAX_STACKED_PERSISTENT") == '1'; }
inline constexpr long long kMaxStackedPersistentLaunches = 16;
// Problem g of a launch's stacked problems as a launch of its own (OmegaArgs's group strides; `element` bytes
// an element of X and dY).
inline OmegaArgs stacked_problem(const OmegaArgs& args, long long g, long long element) {
  OmegaArgs one = args;
  one.input = static_cast<const char*>(args.input) + g * args.input_group_stride * element;
  one.out_grad = static_cast<const char*>(args.out_grad) + g * args.grad_group_stride * element;
  one.filter_grad = args.filter_grad + g * args.problem.filter_elems();
  one.workspace = args.workspace + g * args.workspace_elems;
  one.groups = 1;
  return one;
}
// Launches of the persistent block (either form, wgmma_tf32_taps.cuh's too) in this process: the GPU tests of
// stacked problems launched one at a time count them.
inline std::atomic<long long> persistent_block_launches{0};

// Whether the persistent block can take a launch: one problem, chains of one link, dW and the workspace
// 8-byte aligned for the float2 writes.
inline bool persistent_launchable(const OmegaArgs& args) {
  const auto aligned8 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 8 == 0; };
  return args.groups == 1 && args.semaphore_offset < 0 && aligned8(args.filter_grad) &&
         aligned8(args.workspace);
}

// Launches `kernel`, a persistent block of config C (persistent_kernel, or the TF32 tiles',
// wgmma_tf32_taps.cuh), on the TMA's maps: min(tiles, SMs) blocks. False if it does not apply here
// (persistent_launchable, the sm_90a code loaded), with nothing launched; else *result is the launch's
// status.
template <class C>
bool launch_persistent_block(void (*kernel)(OmegaArgs), const OmegaArgs& mapped, cudaStream_t stream,
                             cudaError_t* result) {
  if (!persistent_launchable(mapped)) return false;
  if (!loads_sm90a(reinterpret_cast<const void*>(kernel))) return false;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) {
    (void)cudaGetLastError();
    return false;
  }
  // At most WINRS_JAX_PERSISTENT_BLOCKS blocks where it is set (tools/kernel_check.cu: each block walking
  // many tiles, as on a part of the GPU).
  if (const char* cap = std::getenv("WINRS_JAX_PERSISTENT_BLOCKS"); cap && std::atoi(cap) > 0)
    sms = std::atoi(cap) < sms ? std::atoi(cap) : sms;
  OmegaArgs args = mapped;
  if constexpr (C::taps > 1) {
    // Filters 3k + 1 wide cut evenly (7 = 3 + 2 + 2, 4 = 2 + 2; tap_run_ends_in_one_tap).
    args.balanced_taps = tap_run_balanced_cut(int(args.problem.filter_w), C::taps, tap_run_rules());
    // WINRS_JAX_TAP_RUN_OVERHEAD: the grid's cost of a tile's start and output, in steps (an experiment's).
    const char* overhead = std::getenv("WINRS_JAX_TAP_RUN_OVERHEAD");
    const int overhead_steps =
        overhead && overhead[0] ? std::max(std::atoi(overhead), 0) : kTapRunOverheadSteps;
    args.grid = tap_run_grid(args.problem, args.grid, args.kernel, C::taps, sms, C::BN, C::BM, overhead_steps,
                             C::max_images);
  }
  const long long tiles = persistent_scheduler<C>(args).count();
  if (tiles < 1) return false;
  *result = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::smem_bytes));
  if (*result != cudaSuccess) return true;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(tiles < sms ? tiles : sms));
  config.blockDim = dim3(kPersistentThreads);
  config.dynamicSmemBytes = C::smem_bytes;
  config.stream = stream;
  *result = cudaLaunchKernelEx(&config, kernel, args);
  if (*result == cudaSuccess) persistent_block_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <class C>
bool launch_persistent(const OmegaArgs& mapped, cudaStream_t stream, cudaError_t* result) {
  return launch_persistent_block<C>(persistent_kernel<C>, mapped, stream, result);
}

}  // namespace winrs::cuda
