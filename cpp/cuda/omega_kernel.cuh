// The fused WinRS kernel Omega_alpha(n, r) (paper section 5, Algorithm 3): one template for all 13 variants
// and all arithmetic paths, with the batched GEMM as a compile-time policy (FFMA on CUDA cores, mma.sync on
// tensor cores, or wgmma for the 16-bit direct kernel on Hopper, wgmma.cuh). A block runs one work tile of
// the TileScheduler (winrs/schedule.h): one segment, one filter row fh, one filter-gradient tile of n columns
// and one B_N x B_M channel block. Its main loop walks the tile's units (dimension reduction and filter
// split), units_per_step per step, staged in load phases by the path's staging policy (staging.cuh): filter
// transforms of dY units and input transforms of X tiles in FP32 registers, converted to the operand type at
// the store into double-buffered shared memory, then the alpha-batched GEMM into FP32 accumulators. The
// output transform runs after the loop, in R rounds through shared memory, and writes or adds into the
// segment's bucket, after the previous link of its chain where segments share buckets (serial split-K,
// winrs/segments.h), or adds into dW atomically (four channels per add on sm_90). The kernel takes its
// configuration type: OmegaConfig (a variant on a path), TapsConfig, the direct kernel's filter-row tile
// (direct_taps.cuh), WgmmaConfig, its 128 x 128 block on Hopper (wgmma.cuh), WgmmaTapsConfig, the
// filter-row tile on Hopper (wgmma_taps.cuh). The direct kernel on the tensor-core paths stages by cp.async
// (copy_main_loop) where channels come in 16-byte pieces, or its 128 x 128 wgmma block by the TMA
// (tma_main_loop) at batches of 32 or a multiple of 64; there a persistent kernel of its own runs instead, on
// tiles of three (two) filter columns of 128 x 128 channels, or of one on 128 x 256 (wgmma_persistent.cuh).
//
// Preconditions (the planner and the FFI handler check them): a consistent problem and plan, fewer than 2^31
// elements per tensor. Channel counts need no alignment: loads are predicated, and vectorised when the
// channel counts and the base pointers allow it; the filter-row tile, which the plan counts by channel
// counts alone, needs 16-byte aligned tensors (XLA's are) and reports a misaligned address otherwise.
#pragma once

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "cuda/direct_taps.cuh"
#include "cuda/gemm_ffma.cuh"
#include "cuda/gemm_mma.cuh"
#include "cuda/omega.h"
#include "cuda/pixel_steps.cuh"
#include "cuda/staging.cuh"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/wgmma_persistent.cuh"
#include "cuda/wgmma_taps.cuh"
#include "cuda/wgmma_tf32_taps.cuh"
#include "cuda/wgmma_window.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

// Filter rows of a config's work tile and its threads: 1 and kThreads, except the filter-window tile's
// (WgmmaWindowConfig: kWindowRows rows, a warpgroup each).
template <class C, class = void>
struct TileRows {
  static constexpr int rows = 1, threads = kThreads;
  static constexpr bool window = false;
};
template <class C>
struct TileRows<C, std::void_t<decltype(C::window)>> {
  static constexpr int rows = C::rows, threads = C::threads;
  static constexpr bool window = C::window;
};

template <class C>
using WgmmaGemmPolicy = std::conditional_t<TileRows<C>::window, WgmmaWindowGemm<C>,
                                           std::conditional_t<(C::taps > 1), WgmmaTapsGemm<C>, WgmmaGemm<C>>>;
template <class C>
using GemmPolicy =
    std::conditional_t<C::wgmma, WgmmaGemmPolicy<C>,
                       std::conditional_t<(C::taps > 1), TapsGemm<C>,
                                          std::conditional_t<C::tensor_cores, MmaGemm<C>, FfmaGemm<C>>>>;
template <class C>
using CopyStagerFor = std::conditional_t<(C::taps > 1), TapsStager<C>, CopyStager<C>>;

// Main loop with software pipelining: the next step's global loads are in flight during this step's GEMM,
// one load phase per part of the GEMM. A function rather than a lambda: the lambda's by-reference captures
// cost the bf16 alpha-8 kernel 4 registers and 10% more instructions (index arithmetic, constant reloads).
template <class C, class Stager, class Gemm, class Vectors>
__device__ __forceinline__ void main_loop(Stager& stager, Gemm& gemm, typename C::Smem* smem, int steps,
                                          Vectors vectors) {
  using Smem = typename C::Smem;
  if (steps > 0) {
    static_for<0, C::phases>([&](auto phase) {
      constexpr int ph = decltype(phase)::value;
      load_phase<ph>(stager, vectors);
      stager.template store<ph>(smem);
    });
  }
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const Smem* current = smem + (s & 1) * C::stage;
    Smem* next = smem + ((s + 1) & 1) * C::stage;
    const bool more = s + 1 < steps;
    static_for<0, C::phases>([&](auto phase) {
      constexpr int ph = decltype(phase)::value;
      if (more) load_phase<ph>(stager, vectors);
      gemm.template run<ph>(current);
      if (more) stager.template store<ph>(next);
    });
    __syncthreads();
  }
}

// Whether a GEMM policy issues a step's MMAs before the step's copies and waits for them after
// (copies_during_mmas): asynchronous MMAs (wgmma) then run while the threads compute and issue the copies.
template <class G, class = void>
struct CopiesDuringMmas : std::false_type {};
template <class G>
struct CopiesDuringMmas<G, std::void_t<decltype(G::copies_during_mmas)>>
    : std::bool_constant<G::copies_during_mmas> {};

// Steps whose MMAs a GEMM policy leaves running into the next step (mma_steps_in_flight, 0 or 1): the
// tensor cores then never drain between steps, at the price of one buffer that the copies cannot refill.
template <class G, class = void>
struct MmaStepsInFlight : std::integral_constant<int, 0> {};
template <class G>
struct MmaStepsInFlight<G, std::void_t<decltype(G::mma_steps_in_flight)>>
    : std::integral_constant<int, G::mma_steps_in_flight> {};

// Timing probes (CMake WINRS_JAX_PROBE; tools/device_check.sh probe-steps): the main loop below without its
// copies after the first stages (MMAs on stale data) or without its MMAs. Wrong results; never shipped.
#if defined(WINRS_PROBE_MMA_ONLY)
inline constexpr bool kProbeCopies = false, kProbeMmas = true;
#elif defined(WINRS_PROBE_COPIES_ONLY)
inline constexpr bool kProbeCopies = true, kProbeMmas = false;
#else
inline constexpr bool kProbeCopies = true, kProbeMmas = true;
#endif

// Main loop of copy staging: copy_stages - 1 - lag steps of cp.async in flight while the GEMM runs through
// one (lag: MmaStepsInFlight). The barrier at the top of a step both publishes its copies and retires the
// buffer that the copies issued next will overwrite: the one read by step s - 1 - lag, whose MMAs each
// thread waited for before the barrier.
template <class C, class Stager, class Gemm>
__device__ __forceinline__ void copy_main_loop(Stager& stager, Gemm& gemm, typename C::Smem* smem,
                                               int steps) {
  constexpr bool late = CopiesDuringMmas<Gemm>::value;
  constexpr int lag = MmaStepsInFlight<Gemm>::value;
  static_assert(lag == 0 || (late && lag == 1), "MMAs left in flight are waited for after the copies");
  constexpr int stages = C::copy_stages, step_elems = C::copy_step_elems, ahead = stages - 1 - lag;
  static_assert(ahead >= 1);
#pragma unroll
  for (int s = 0; s < ahead; ++s) {
    if (s < steps) stager.issue(smem + s * step_elems);
    cp_async_commit();  // empty groups keep the count of pending groups uniform
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<ahead - 1>();
    if constexpr (C::wgmma) fence_async_proxy();  // wgmma reads shared memory through the async proxy
    __syncthreads();
    const auto refill = [&] {
      if (kProbeCopies && s + ahead < steps) stager.issue(smem + (s + ahead) % stages * step_elems);
      cp_async_commit();
    };
    if constexpr (!late) refill();
    const typename C::Smem* current = smem + s % stages * step_elems;
    if constexpr (!kProbeMmas) {
    } else if constexpr (Gemm::split) {  // unrolled, split TF32's fragment pairs spilled at 255 registers
#pragma unroll 1
      for (int sub = 0; sub < C::copy_substeps; ++sub) gemm.run_step(current, sub);
    } else {
      static_for<0, C::copy_substeps>([&](auto sub) { gemm.run_step(current, decltype(sub)::value); });
    }
    if constexpr (late) {
      refill();
      gemm.template retire<lag>();
    }
  }
  if constexpr (lag > 0) gemm.template retire<0>();
  cp_async_wait<0>();
}

// Main loop of TMA staging (WgmmaConfig with Tma; the steps' boxes: pixel_steps.cuh). Thread 0 copies each
// step's boxes (dY and X, two 64-channel panels each) into a free buffer, and the warps wait for them on the
// buffer's `full` barrier. A warp releases a buffer on its `empty` barrier when the step's MMAs are waited
// for, one step later, so that a step's MMAs run while the next is issued; thread 0 refills it once all warps
// have. No block-wide barrier in the loop.
template <class C, class Gemm>
__device__ __forceinline__ void tma_main_loop(const OmegaArgs& args, const WorkTile& work,
                                              const UnitWalk& walk, Gemm& gemm, typename C::Smem* smem,
                                              uint64_t* full, uint64_t* empty) {
  constexpr int stages = C::copy_stages, step_elems = C::copy_step_elems;
  const PixelSteps<C> plan(args.problem, work, walk);
  const int steps = plan.steps;
  const int tid = threadIdx.x;
  const auto produce = [&](int s) {  // thread 0
    mbarrier_arrive_expect(full + s % stages, PixelSteps<C>::step_bytes);
    plan.issue(args, work, walk, smem + s % stages * step_elems, full + s % stages, s);
  };
  if (tid == 0)
    for (int s = 0; s < stages && s < steps; ++s) produce(s);
  for (int s = 0; s < steps; ++s) {
    mbarrier_wait(full + s % stages, (s / stages) & 1);
    const typename C::Smem* current = smem + s % stages * step_elems;
    static_for<0, C::copy_substeps>([&](auto sub) { gemm.run_step(current, decltype(sub)::value); });
    gemm.template retire<1>();  // the previous step's MMAs are done: its buffer is free
    if (s > 0) {
      if (tid % 32 == 0) mbarrier_arrive(empty + (s - 1) % stages);
      if (tid == 0 && s - 1 + stages < steps) {
        mbarrier_wait(empty + (s - 1) % stages, ((s - 1) / stages) & 1);
        produce(s - 1 + stages);
      }
      __syncwarp();  // warp 0 converged again before the next step's .aligned wgmma instructions
    }
  }
  gemm.template retire<0>();
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kVectorAtomics = true;  // atomicAdd(float4*, float4)
#else
inline constexpr bool kVectorAtomics = false;
#endif

// One round of the output transform: each thread takes Vec consecutive input channels of one output channel's
// row, transforms their alpha accumulators to n filter columns and writes them into the bucket, adds them to
// it (the next link of a chain, or the residual kernel), or adds them atomically (Vec 4: one vector add per
// column).
// Filter rows work.fh .. of the tile (TileRows) come one after the other in `out`, those past the filter
// dropped.
template <class C, class Gemm, int Vec>
__device__ __forceinline__ void write_round(const float* out, float* bucket, const Problem& p,
                                            const WorkTile& work, int rnd, bool atomic, bool accumulate) {
  const int out_c = int(p.out_c), in_c = int(p.in_c), filter_h = int(p.filter_h), filter_w = int(p.filter_w);
  constexpr int groups = C::BM / Vec;  // channel groups of Vec per row
  constexpr int rows = TileRows<C>::rows;
  for (int e = threadIdx.x; e < rows * C::round_rows * groups; e += TileRows<C>::threads) {
    const int fr = e / (C::round_rows * groups), row = e / groups % C::round_rows, col = e % groups * Vec;
    const int oc = work.oc0 + (row / Gemm::rows_per_round) * Gemm::owner_rows + rnd * Gemm::rows_per_round +
                   row % Gemm::rows_per_round;
    const int ic = work.ic0 + col;
    if (oc >= out_c || ic >= in_c || work.fh + fr >= filter_h) continue;  // Vec > 1: all Vec are in range
    const float* slices = out + fr * C::alpha * C::round_rows * C::out_stride;
    float y[Vec][C::n];
#pragma unroll
    for (int v = 0; v < Vec; ++v) {
      float m[C::alpha];
#pragma unroll
      for (int i = 0; i < C::alpha; ++i) m[i] = slices[(i * C::round_rows + row) * C::out_stride + col + v];
      C::Tile::output(m, y[v]);
    }
    float* dst = bucket + ((oc * filter_h + work.fh + fr) * filter_w + work.f0) * in_c + ic;
#pragma unroll
    for (int j = 0; j < C::n; ++j) {
      if (work.f0 + j >= filter_w) break;  // a tile past the filter's last column (variants.h, direct_taps)
      if constexpr (Vec == 4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float4*>(dst + j * in_c), make_float4(y[0][j], y[1][j], y[2][j], y[3][j]));
#endif
      } else if (atomic) {
        atomicAdd(dst + j * in_c, y[0][j]);  // a reduction in L2 (RED), into the dW that dispatch.cu zeroed
      } else {
        dst[j * in_c] = accumulate ? __ldcg(dst + j * in_c) + y[0][j] : y[0][j];
      }
    }
  }
}

template <class C>
__global__ void __launch_bounds__(TileRows<C>::threads, C::blocks_per_sm)
    omega_kernel(const __grid_constant__ OmegaArgs args) {
  using Gemm = GemmPolicy<C>;
  using T = typename C::Storage;
  using Smem = typename C::Smem;
  if constexpr (C::wgmma && !WINRS_WGMMA_CODE) return;  // not launched on this target (launch_direct)
  extern __shared__ float4 smem4[];
  char* base = reinterpret_cast<char*>(smem4);
  if constexpr (C::smem_align > 16)  // room for this is in smem_bytes
    base += (C::smem_align - shared_address(base) % C::smem_align) % C::smem_align;
  Smem* smem = reinterpret_cast<Smem*>(base);
  const int tid = threadIdx.x;

  // Stacked problem of this block (vmap): offset every tensor to its group.
  const Problem& p = args.problem;
  const long long group = blockIdx.y;
  const T* input = static_cast<const T*>(args.input) + group * args.input_group_stride;
  const T* out_grad = static_cast<const T*>(args.out_grad) + group * args.grad_group_stride;
  float* filter_grad = args.filter_grad + group * p.filter_elems();
  float* workspace = args.workspace + group * args.workspace_elems;

  const SegmentGrid& grid = args.grid;
  const TileScheduler scheduler = make_scheduler(p, grid, args.kernel, C::n, C::BN, C::BM, TileRows<C>::rows);
  const WorkTile work = scheduler.tile(blockIdx.x);
  const int bucket_index = grid.bucket_of(work.local), link = grid.link_of(work.local);
  float* bucket =
      bucket_index == 0 ? filter_grad : workspace + (long long)(bucket_index - 1) * p.filter_elems();
  unsigned* semaphore = args.semaphore_offset < 0
                            ? nullptr
                            : reinterpret_cast<unsigned*>(workspace + args.semaphore_offset) +
                                  (long long)bucket_index * scheduler.tiles_per_segment() + work.slot;
  const Segment segment = grid.segment(work.segment);
  const bool accumulate = args.kernel == 1 || link > 0;
  const bool vector_adds = kVectorAtomics && grid.atomic && p.in_c % 4 == 0 &&
                           reinterpret_cast<uintptr_t>(filter_grad) % sizeof(float4) == 0;

  const UnitWalk walk = make_unit_walk(p, segment, work.fh, C::r);
  // The stagers walk the segment's images from its first (image parts, segments.h); the TMA loops address
  // the whole tensor and keep whole batches (the window adds the first image itself). X read by depth slice
  // (the filter-row tile's stager) stays whole: its images are not the walk's.
  const T* part_input = args.depth.on() ? input : input + (long long)walk.image0 * p.in_h * p.in_w * p.in_c;
  const T* part_grad = out_grad + (long long)walk.image0 * p.out_h * p.out_w * p.out_c;
  Gemm gemm;
  gemm.init(tid);

  if constexpr (C::tma) {
    uint64_t* full = reinterpret_cast<uint64_t*>(base + C::barrier_offset);
    uint64_t* empty = full + C::copy_stages;
    if (tid == 0) {
      for (int s = 0; s < C::copy_stages; ++s) {
        mbarrier_init(full + s, 1);  // the producer's arrival, with the copies' bytes
        mbarrier_init(empty + s, TileRows<C>::threads / 32);
      }
      mbarrier_init_fence();
    }
    if constexpr (TileRows<C>::window) {  // rows no box writes read as zeros (window_main_loop)
      for (size_t i = tid; i < C::copy_bytes / 16; i += TileRows<C>::threads)
        reinterpret_cast<uint4*>(base)[i] = uint4{};
      fence_async_proxy();
    }
    __syncthreads();
    if constexpr (TileRows<C>::window) {
      window_main_loop<C>(args, work, segment, gemm, smem, full, empty);
    } else {
      tma_main_loop<C>(args, work, walk, gemm, smem, full, empty);
    }
  } else if constexpr (C::copy) {
    CopyStagerFor<C> stager;
    stager.init(tid, p, work, walk, part_input, part_grad);
    if constexpr (C::taps > 1) stager.read_depth(args.depth, walk.image0, int(group));
    copy_main_loop<C>(stager, gemm, smem, stager.steps());
  } else {
    Stager<C> stager;
    stager.init(tid, p, work, walk, part_input, part_grad);
    const int steps = (walk.units() + C::K - 1) / C::K;
    // The unit-staged kernels of one block per SM compile the main loop twice, with and without the vector
    // loads, and choose once; elsewhere one copy branches per load phase (under the 128-register cap a
    // second copy spilled, and the chunk-staged alpha-16 kernels' two copies were not inlined: 848 bytes
    // of stack, generic stores).
    if constexpr (C::chunked || C::blocks_per_sm > 1) {
      main_loop<C>(stager, gemm, smem, steps, stager.vectors);
    } else if (stager.vectors) {
      main_loop<C>(stager, gemm, smem, steps, std::true_type{});
    } else {
      main_loop<C>(stager, gemm, smem, steps, std::false_type{});
    }
  }

  // Output transform in R rounds (write_result, Algorithm 3 lines 12-18). Atomic adds go 4 input channels
  // at a time where Hopper's vector atomics (RED.ADD.F32x4) and dW's alignment allow: a quarter of the
  // adds' instructions and L2 requests.
  float* out = reinterpret_cast<float*>(base);
  static_for<0, C::R>([&](auto round) {
    constexpr int rnd = decltype(round)::value;
    __syncthreads();
    gemm.template stage_round<rnd>(out);
    __syncthreads();
    if (rnd == 0 && semaphore) wait_for_link(semaphore, link);  // the chain's previous link has added
    if (vector_adds) {
      write_round<C, Gemm, 4>(out, bucket, p, work, rnd, true, accumulate);
    } else {
      write_round<C, Gemm, 1>(out, bucket, p, work, rnd, grid.atomic, accumulate);
    }
  });
  if (semaphore) pass_link(semaphore, link + 1);
}

template <class C>
cudaError_t launch_config(const OmegaArgs& args, cudaStream_t stream) {
  const long long blocks =
      make_scheduler(args.problem, args.grid, args.kernel, C::n, C::BN, C::BM, TileRows<C>::rows).count();
  if (blocks < 1 || blocks > INT_MAX || args.groups < 1 || args.groups > 65535)
    return cudaErrorInvalidConfiguration;
  auto* kernel = omega_kernel<C>;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::smem_bytes));
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared);
      e != cudaSuccess)
    return e;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks), unsigned(args.groups));
  config.blockDim = dim3(TileRows<C>::threads);
  config.dynamicSmemBytes = C::smem_bytes;
  config.stream = stream;
  // The launch's own status, not an earlier error left by someone else's kernel (cudaGetLastError would
  // report that as ours).
  return cudaLaunchKernelEx(&config, kernel, args);
}

// Whether X and dY can be copied in 16-byte pieces (CopyStager, TapsStager): 16-byte aligned tensors and
// group strides (the channel counts are checked with the tile shape).
template <Path P>
bool aligned_for_copies(const OmegaArgs& args) {
  constexpr long long elements = 16 / storage_bytes(P);
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return aligned(args.input) && aligned(args.out_grad) && args.input_group_stride % elements == 0 &&
         args.grad_group_stride % elements == 0;
}

// Whether this build has the sm_90a code of the wgmma kernels (CMake: an architecture 90a), the device runs
// it (its cubin is the one loaded: binaryVersion 90 for compute capability 9.0) and WINRS_JAX_WGMMA is not
// 0 (the mma.sync kernels instead, to compare them).
template <class C>
bool runs_wgmma() {
#if defined(WINRS_WGMMA_BUILT)
  if (env_flag("WINRS_JAX_WGMMA") == '0') return false;
  return loads_sm90a(reinterpret_cast<const void*>(omega_kernel<C>));  // else the mma.sync kernel runs
#else
  return false;
#endif
}

template <Path P, int Block>
cudaError_t launch_taps(const OmegaArgs& args, cudaStream_t stream) {
  if (args.problem.stride_w != 1) {  // X staged by phase (direct_taps.cuh), by mma.sync (variants.h)
    if constexpr (kSixteenBit<path_info(P).operand>) {
      static_assert(kMaxTapsStride == 2);
      if (args.problem.stride_w == 2)
        return launch_config<TapsConfig<P, kDirectTaps, Block, 2>>(args, stream);
    }
    return cudaErrorInvalidValue;  // the planner plans no other (strided_taps)
  }
  if constexpr (Block == kNarrowBlock) {
    if constexpr (kSixteenBit<path_info(P).operand>) {
      if (runs_wgmma<WgmmaTapsConfig<P, kDirectTaps>>())
        return launch_config<WgmmaTapsConfig<P, kDirectTaps>>(args, stream);
    }
    return launch_config<TapsConfig<P, kDirectTaps, Block>>(args, stream);
  }
  return cudaErrorInvalidValue;  // the wide block runs strided layers alone (variants.h, strided_wide)
}

// Launches the window config C on its maps of pieces `width` wide; false (nothing launched) if the driver
// refuses the maps.
template <class C>
bool launch_window_config(const OmegaArgs& args, int width, cudaStream_t stream, cudaError_t* result) {
  OmegaArgs mapped = args;
  if (!encode_window_maps<C>(&mapped, width)) return false;
  *result = launch_config<C>(mapped, stream);
  return true;
}

// The filter-window tile (variants.h, window_taps) where its staging applies: on Hopper, one problem (the
// maps address one tensor each) or a 3D layer's depth taps (X's map by depth slice, dY shared), pieces that
// fill their K-blocks (window_piece_width), the launch's last segment ending at the output's last column
// (where its boxes read zeros past it), one band of rows (the window's plans: its runs end at dY's last row).
// Elsewhere the filter-row tile, a block per filter row (the plan's semaphores count those blocks).
// WINRS_JAX_WINDOW=0 takes the filter-row tile on Hopper too (to compare them).
template <Path P>
cudaError_t launch_window(const OmegaArgs& args, cudaStream_t stream) {
  if constexpr (kSixteenBit<path_info(P).operand>) {
    const SegmentGrid& g = args.grid;
    // (A 3D layer's taps packed into channels: the filter-row tile's stager unpacks them, the maps cannot.)
    const bool own = env_flag("WINRS_JAX_WINDOW") != '0' && (args.groups == 1 || args.depth.on()) &&
                     args.depth.channels == 0 && (args.kernel == 1 || g.width0 == g.out_w);
    const int width = own ? window_piece_width(g, args.kernel) : 0;
    // One band of rows (runs end at dY's last row, WgmmaWindowConfig).
    if (width > 0 && g.seg_rows == 1 && runs_wgmma<WgmmaWindowConfig<P, 4>>()) {
      cudaError_t result = cudaSuccess;
      const bool launched = [&] {
        switch (window_piece_blocks(width)) {
          case 1:
            return launch_window_config<WgmmaWindowConfig<P, 1>>(args, width, stream, &result);
          case 2:
            return launch_window_config<WgmmaWindowConfig<P, 2>>(args, width, stream, &result);
          case 3:
            return launch_window_config<WgmmaWindowConfig<P, 3>>(args, width, stream, &result);
          default:
            return launch_window_config<WgmmaWindowConfig<P, 4>>(args, width, stream, &result);
        }
      }();
      if (launched) return result;
    }
  }
  return launch_taps<P, kNarrowBlock>(args, stream);
}

template <Path P>
cudaError_t launch_direct(const OmegaArgs& args, cudaStream_t stream);

// A row of odd width at two positions a step (boxes of at most `max_images`): the plan's kernel 0 with its
// last column cut off (persistent_split) launched as kernel 0, then that column as the residual column's
// kernel 1, each as the direct kernel (both add atomically into dW); *result is their status. False, with
// nothing launched, where there is no such cut or the persistent block cannot take the launch.
template <Path P>
bool launch_split(const OmegaArgs& args, int max_images, cudaStream_t stream, cudaError_t* result) {
  const SegmentGrid split = persistent_split(args.problem, args.grid, args.kernel, max_images);
  if (split.width0 == args.grid.width0 || !persistent_launchable(args)) return false;
  OmegaArgs rest = args, last = args;
  rest.grid = last.grid = split;
  last.kernel = 1;
  *result = launch_direct<P>(rest, stream);
  if (*result == cudaSuccess) *result = launch_direct<P>(last, stream);
  return true;
}

// The direct kernel's launches: the filter-row tile where the planner counted it (variants.h, tile_shape;
// XLA's buffers are aligned, a misaligned caller gets an error rather than a grid the plan did not count),
// else one column per block, copy-staged where the channels and pointers allow, by wgmma on Hopper in 16
// bits.
template <Path P>
cudaError_t launch_direct(const OmegaArgs& args, cudaStream_t stream) {
  const Problem& p = args.problem;
  const TileShape shape = tile_shape(0, P, p);
  if (p.strided() && !strided_taps(P, p)) return cudaErrorInvalidValue;  // not planned (plan.cc)
  if constexpr (path_info(P).tensor_cores) {
    constexpr long long piece = 16 / storage_bytes(P);
    const bool copies = aligned_for_copies<P>(args) && p.out_c % piece == 0 && p.in_c % piece == 0;
#if defined(WINRS_WGMMA_BUILT)
    if constexpr (kTf32TilesPath<P>) {
      // TF32 (and at HIGHEST split-TF32) T-tap tiles on wgmma unless WINRS_JAX_TF32_TAPS=0
      // (wgmma_tf32_taps.cuh) in place of the tiles tf32_tiles_take_shape names (winrs/tap_runs.h, where the
      // planner's tf32_tap_tiles_fit asks the same); only where the sm_90a code was built (a plain sm_90
      // image has the kernel's empty body) and WINRS_JAX_WGMMA is not 0. A row of odd width has its last
      // column split off (the TF32 tiles' steps are two positions of 32 images at every batch), which the
      // direct kernel takes.
      if (copies && tf32_tiles_take_shape(p, P, shape) && env_flag("WINRS_JAX_WGMMA") != '0' &&
          tf32_taps_may_launch<P>(args)) {
        cudaError_t result = cudaSuccess;
        if (launch_split<P>(args, kTf32Images, stream, &result)) return result;
        if (launch_tf32_taps<P>(args, stream, &result)) return result;
      }
    }
#endif
    if (shape.columns == kDirectTaps) {
      if (!copies) return cudaErrorMisalignedAddress;
      if (shape.rows == kWindowRows) return launch_window<P>(args, stream);
      return shape.block_oc == kWideBlock ? launch_taps<P, kWideBlock>(args, stream)
                                          : launch_taps<P, kNarrowBlock>(args, stream);
    }
    if (shape.block_oc == kNarrowBlock) {
      return copies ? launch_config<OmegaConfig<0, P, true, true>>(args, stream)
                    : launch_config<OmegaConfig<0, P, true, false>>(args, stream);
    }
    if constexpr (kSixteenBit<path_info(P).operand>) {
      if (copies && runs_wgmma<WgmmaConfig<P>>()) {
        using Tma = WgmmaConfig<P, true>;
        // Boxes of 64 images, or of the whole batch where it divides 64 in rows of whole 8-row swizzle
        // periods. TMA staging ran 1.01-1.42x faster than cp.async's at batches 64 and 32, 0.93x at 16
        // (bf16, H100, 2026-11-23; docs/benchmarks.md): smaller batches keep cp.async.
        const long long images = p.batch < Tma::copy_units ? p.batch : Tma::copy_units;
        const bool boxes =
            p.batch % Tma::copy_units == 0 || (Tma::copy_units % p.batch == 0 && p.batch >= 32);
        // Stacked problems one launch each where the persistent block takes a problem (it takes one a
        // launch): stacked in one launch on the 128 x 128 block, 3x3x3 16:8x28x28:128's three depth taps ran
        // 0.283 ms where one tap's 2D layer takes 0.060 on the persistent block (bf16, H200, thirty-sixth
        // stop). An experiment's switch until measured (stacked_persistent_enabled); a few problems (depth
        // taps, feature groups), as each launch's host work repeats, and every problem's workspace 8-byte
        // aligned as the persistent block needs (persistent_launchable).
        if (boxes && args.groups > 1 && args.groups <= kMaxStackedPersistentLaunches &&
            args.workspace_elems % 2 == 0 && args.grid.image_parts == 1 && !args.depth.on() &&
            args.semaphore_offset < 0 && stacked_persistent_enabled() && runs_wgmma<Tma>() &&
            (persistent_split(p, args.grid, args.kernel).width0 != args.grid.width0 ||
             persistent_taps(p, args.grid, args.kernel) > 0)) {
          for (long long g = 0; g < args.groups; ++g)
            if (const cudaError_t e = launch_direct<P>(stacked_problem(args, g, storage_bytes(P)), stream);
                e != cudaSuccess)
              return e;
          return cudaSuccess;
        }
        // Whole batches only: its steps take box-sized runs of the batch (image parts are the window's).
        if (boxes && args.groups == 1 && args.grid.image_parts == 1 && runs_wgmma<Tma>()) {
          OmegaArgs mapped = args;
          if (encode_pixel_boxes(&mapped.grad_map, args.out_grad, p.batch, p.out_h, p.out_w, p.out_c,
                                 int(images)) &&
              encode_pixel_boxes(&mapped.input_map, args.input, p.batch, p.in_h, p.in_w, p.in_c,
                                 int(images))) {
            // The persistent block where it applies (wgmma_persistent.cuh, persistent_taps). A row of odd
            // width at a batch of 32: T-tap tiles on all columns but the last, one-tap tiles on that one
            // (persistent_split; both add atomically into dW).
            cudaError_t result = cudaSuccess;
            if (launch_split<P>(args, kTapRunUnits, stream, &result)) return result;
            const int taps = persistent_taps(p, args.grid, args.kernel);
            if ((taps == 3 && launch_persistent<PersistentConfig<P, 3>>(mapped, stream, &result)) ||
                (taps == 2 && launch_persistent<PersistentConfig<P, 2>>(mapped, stream, &result)) ||
                (taps == 1 && launch_persistent<PersistentConfig<P, 1>>(mapped, stream, &result)))
              return result;
            return launch_config<Tma>(mapped, stream);
          }
        }
        return launch_config<WgmmaConfig<P>>(args, stream);
      }
    }
    if (copies) return launch_config<OmegaConfig<0, P, false, true>>(args, stream);
  }
  return launch_config<OmegaConfig<0, P, false, false>>(args, stream);
}

template <Path P, int AlphaClass, int... Vs>
cudaError_t launch_in_class(int variant, const OmegaArgs& args, cudaStream_t stream,
                            std::integer_sequence<int, Vs...>) {
  cudaError_t result = cudaErrorInvalidValue;
  (
      [&] {
        if constexpr (kVariants[Vs].alpha_class() == AlphaClass) {
          if (variant != Vs) return;
          if constexpr (Vs == 0) {
            result = launch_direct<P>(args, stream);
          } else {
            result = launch_config<OmegaConfig<Vs, P>>(args, stream);
          }
        }
      }(),
      ...);
  return result;
}

template <Path P, int AlphaClass>
cudaError_t launch_class(int variant, const OmegaArgs& args, cudaStream_t stream) {
  return launch_in_class<P, AlphaClass>(variant, args, stream,
                                        std::make_integer_sequence<int, kNumVariants>{});
}

}  // namespace winrs::cuda
