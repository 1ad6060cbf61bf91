// The fused WinRS kernel Omega_alpha(n, r) (paper section 5, Algorithm 3): one template for all 13 variants
// and all arithmetic paths, with the batched GEMM as a compile-time policy (FFMA on CUDA cores or mma.sync on
// tensor cores). A block runs one work tile of the TileScheduler (winrs/schedule.h): one segment, one filter
// row fh, one filter-gradient tile of n columns and one B_N x B_M channel block. Its main loop walks the
// tile's units (dimension reduction and filter split), units_per_step per step, staged in load phases of one
// channel chunk per thread: filter transforms of dY units and input transforms of X tiles in FP32 registers,
// converted to the operand type at the store into double-buffered shared memory, then the alpha-batched GEMM
// into FP32 accumulators. The output transform runs after the loop, in R rounds through shared memory, and
// writes the segment's bucket.
//
// Preconditions (the planner and the FFI handler check them): a consistent problem and plan, fewer than 2^31
// elements per tensor. Channel counts need no alignment: loads are predicated, and vectorised when the
// channel counts and the base pointers allow it.
#pragma once

#include <climits>
#include <type_traits>
#include <utility>

#include "cuda/gemm_ffma.cuh"
#include "cuda/gemm_mma.cuh"
#include "cuda/omega.h"
#include "winrs/schedule.h"

namespace winrs::cuda {

template <class C>
using GemmPolicy = std::conditional_t<C::tensor_cores, MmaGemm<C>, FfmaGemm<C>>;

// Global -> registers -> transforms -> shared memory (Algorithm 3, lines 1-7). In each load phase a thread
// stages one chunk (OmegaConfig): `chunk` consecutive channels of one unit's dY rows or of its X tile, read
// with one vector load per column. Its unit's position is a cursor that moves on by K units per step.
template <class C>
struct Loader {
  using T = typename C::Storage;
  using Smem = typename C::Smem;
  using Tile = typename C::Tile;
  static constexpr int kColumns = C::alpha > C::r ? C::alpha : C::r;
  static constexpr bool kPairs = kSixteenBit<C::operand>;  // two channels per shared-memory word
  static constexpr int kWords = kPairs ? C::chunk / 2 : C::chunk;
  static_assert(!kPairs || C::chunk % 2 == 0);

  struct Slot {   // this thread's chunk in one load phase
    bool active;  // fewer chunks than threads in the last phase
    bool filter;  // dY side (filter transform) or X side (input transform); uniform in a warp
    int k;        // the unit's K row in the stage
    int channel;  // first channel of the chunk within the block
    UnitCursor cursor;
  };

  const T* out_grad;
  const T* input;
  int out_c, in_c, out_h, out_w, in_h, in_w, row_offset, col_offset, oc0, ic0;
  bool vectors;  // both channel counts and base pointers allow the chunk-wide loads
  UnitWalk walk;
  Slot slots[C::phases];
  Channels<C::chunk, T> raw[kColumns];  // the current phase's chunk, as loaded

  __device__ void init(int tid, const Problem& p, const WorkTile& work, const UnitWalk& w, const T* x,
                       const T* dy) {
    out_grad = dy;
    input = x;
    out_c = int(p.out_c), in_c = int(p.in_c), out_h = int(p.out_h), out_w = int(p.out_w);
    in_h = int(p.in_h), in_w = int(p.in_w);
    row_offset = work.fh - int(p.pad_top);   // input row = dY row + fh - pad_top
    col_offset = work.f0 - int(p.pad_left);  // input column = dY column + f0 + t - pad_left
    oc0 = work.oc0, ic0 = work.ic0;
    constexpr int vector = C::chunk * sizeof(T) < 16 ? C::chunk : 16 / sizeof(T);  // elements per load
    constexpr uintptr_t align = vector * sizeof(T);
    vectors = out_c % vector == 0 && in_c % vector == 0 && reinterpret_cast<uintptr_t>(dy) % align == 0 &&
              reinterpret_cast<uintptr_t>(x) % align == 0;
    walk = w;
#pragma unroll
    for (int ph = 0; ph < C::phases; ++ph) {
      Slot& slot = slots[ph];
      const int c = ph * kThreads + tid;
      slot.active = c < C::chunks;
      slot.filter = c < C::filter_chunks;
      const int local = slot.filter ? c : c - C::filter_chunks;
      const int per_unit = (slot.filter ? C::BN : C::BM) / C::chunk;
      slot.k = local / per_unit;
      slot.channel = (local % per_unit) * C::chunk;
      slot.cursor.start(slot.k, walk);
    }
  }

  // Phase Ph's chunk of the next step into registers (fetch_data); its cursor moves on by one step. One
  // uniform branch per chunk picks the vector loads or the element-wise ones (see load_channels).
  template <int Ph>
  __device__ void load() {
    if (vectors) {
      load<Ph>(std::true_type{});
    } else {
      load<Ph>(std::false_type{});
    }
  }

  template <int Ph, bool Vectors>
  __device__ void load(std::integral_constant<bool, Vectors> vector_loads) {
    Slot& slot = slots[Ph];
    if (!slot.active) return;
    const bool valid = slot.cursor.valid(walk);
    const int oh = slot.cursor.out_row(walk), w0 = slot.cursor.out_col(walk);
    if (slot.filter) {
      const int oc = oc0 + slot.channel;
      const T* src = out_grad + (valid ? ((slot.cursor.image * out_h + oh) * out_w + w0) * out_c + oc : 0);
#pragma unroll
      for (int e = 0; e < C::r; ++e) load_channels(raw[e], src + e * out_c, valid, out_c - oc, vector_loads);
    } else {
      const int ic = ic0 + slot.channel, col0 = w0 + col_offset;
      const T* row = input + (valid ? (slot.cursor.image * in_h + oh + row_offset) * in_w * in_c + ic : 0);
#pragma unroll
      for (int e = 0; e < C::alpha; ++e) {
        const bool in_bounds = valid && column_in_bounds(col0 + e, in_w);
        load_channels(raw[e], row + (in_bounds ? (col0 + e) * in_c : 0), in_bounds, in_c - ic, vector_loads);
      }
    }
    slot.cursor.advance(C::K, walk);
  }

  // Phase Ph's chunk through its transform in FP32 registers, stored as GEMM operands in its K row of
  // `stage`.
  template <int Ph>
  __device__ void store(Smem* stage) const {
    const Slot& slot = slots[Ph];
    if (!slot.active) return;
    if (slot.filter) {
      transform_store<C::r>(
          stage + slot.k * C::gs_stride + slot.channel, C::gs_stride,
          [](const float (&unit)[C::r], float (&out)[C::alpha]) { Tile::filter(unit, out); });
    } else {
      transform_store<C::alpha>(
          stage + C::filter_stage + slot.k * C::ds_stride + slot.channel, C::ds_stride,
          [](const float (&tile)[C::alpha], float (&out)[C::alpha]) { Tile::input(tile, out); });
    }
  }

  // Transforms the chunk's channels (two at a time on the 16-bit paths, packed into one word) and writes
  // the alpha rows of `Cols`-column inputs at dst, dst + K stride, ...
  template <int Cols, class Transform>
  __device__ void transform_store(Smem* dst, int stride, Transform transform) const {
    uint32_t rows[C::alpha][kWords];
    auto column = [&](auto q, float (&out)[C::alpha]) {
      float in[Cols];
      static_for<0, Cols>([&](auto e) { in[e] = raw[e][decltype(q)::value]; });
      transform(in, out);
    };
    static_for<0, kWords>([&](auto word) {
      constexpr int w = decltype(word)::value;
      if constexpr (kPairs) {
        float even[C::alpha], odd[C::alpha];
        column(std::integral_constant<int, 2 * w>{}, even);
        column(std::integral_constant<int, 2 * w + 1>{}, odd);
#pragma unroll
        for (int i = 0; i < C::alpha; ++i) rows[i][w] = operand_pair<C::operand>(even[i], odd[i]);
      } else {
        float out[C::alpha];
        column(word, out);
#pragma unroll
        for (int i = 0; i < C::alpha; ++i) rows[i][w] = operand_word<C::operand>(out[i]);
      }
    });
#pragma unroll
    for (int i = 0; i < C::alpha; ++i) store_words(dst + i * C::K * stride, rows[i]);
  }
};

template <int V, Path P>
__global__ void __launch_bounds__(kThreads, OmegaConfig<V, P>::blocks_per_sm) omega_kernel(OmegaArgs args) {
  using C = OmegaConfig<V, P>;
  using Gemm = GemmPolicy<C>;
  using T = typename C::Storage;
  using Smem = typename C::Smem;
  extern __shared__ float4 smem4[];
  Smem* smem = reinterpret_cast<Smem*>(smem4);
  const int tid = threadIdx.x;

  // Stacked problem of this block (vmap): offset every tensor to its group.
  const Problem& p = args.problem;
  const long long group = blockIdx.y;
  const T* input = static_cast<const T*>(args.input) + group * args.input_group_stride;
  const T* out_grad = static_cast<const T*>(args.out_grad) + group * args.grad_group_stride;
  float* filter_grad = args.filter_grad + group * p.filter_elems();
  float* workspace = args.workspace + group * args.workspace_elems;

  const SegmentGrid& grid = args.grid;
  const WorkTile work = make_scheduler(p, grid, args.kernel, C::n, C::BN, C::BM).tile(blockIdx.x);
  const int bucket_index = grid.bucket(work.segment);
  float* bucket =
      bucket_index == 0 ? filter_grad : workspace + (long long)(bucket_index - 1) * p.filter_elems();
  const UnitWalk walk = make_unit_walk(p, grid.segment(work.segment), work.fh, C::r);
  const int steps = (walk.units() + C::K - 1) / C::K;

  Loader<C> loader;
  loader.init(tid, p, work, walk, input, out_grad);
  Gemm gemm;
  gemm.init(tid);

  // Main loop with software pipelining: the next step's global loads are in flight during this step's GEMM,
  // one load phase per part of the GEMM.
  if (steps > 0) {
    static_for<0, C::phases>([&](auto phase) {
      constexpr int ph = decltype(phase)::value;
      loader.template load<ph>();
      loader.template store<ph>(smem);
    });
  }
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const Smem* current = smem + (s & 1) * C::stage;
    Smem* next = smem + ((s + 1) & 1) * C::stage;
    const bool more = s + 1 < steps;
    static_for<0, C::phases>([&](auto phase) {
      constexpr int ph = decltype(phase)::value;
      if (more) loader.template load<ph>();
      gemm.template run<ph>(current);
      if (more) loader.template store<ph>(next);
    });
    __syncthreads();
  }

  // Output transform in R rounds (write_result, Algorithm 3 lines 12-18).
  float* out = reinterpret_cast<float*>(smem4);
  const int out_c = int(p.out_c), in_c = int(p.in_c), filter_h = int(p.filter_h), filter_w = int(p.filter_w);
  const bool accumulate = args.kernel == 1;
  static_for<0, C::R>([&](auto round) {
    constexpr int rnd = decltype(round)::value;
    __syncthreads();
    gemm.template stage_round<rnd>(out);
    __syncthreads();
    for (int e = tid; e < C::round_rows * C::BM; e += kThreads) {
      const int row = e / C::BM, col = e % C::BM;
      const int oc = work.oc0 + (row / Gemm::rows_per_round) * Gemm::owner_rows + rnd * Gemm::rows_per_round +
                     row % Gemm::rows_per_round;
      const int ic = work.ic0 + col;
      if (oc >= out_c || ic >= in_c) continue;
      float m[C::alpha], y[C::n];
#pragma unroll
      for (int i = 0; i < C::alpha; ++i) m[i] = out[(i * C::round_rows + row) * C::out_stride + col];
      C::Tile::output(m, y);
      float* dst = bucket + ((oc * filter_h + work.fh) * filter_w + work.f0) * in_c + ic;
#pragma unroll
      for (int j = 0; j < C::n; ++j) dst[j * in_c] = accumulate ? dst[j * in_c] + y[j] : y[j];
    }
  });
}

template <int V, Path P>
cudaError_t launch_variant(const OmegaArgs& args, cudaStream_t stream) {
  using C = OmegaConfig<V, P>;
  const long long blocks = make_scheduler(args.problem, args.grid, args.kernel, C::n, C::BN, C::BM).count();
  if (blocks < 1 || blocks > INT_MAX || args.groups < 1 || args.groups > 65535)
    return cudaErrorInvalidConfiguration;
  auto* kernel = omega_kernel<V, P>;
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
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = C::smem_bytes;
  config.stream = stream;
  // The launch's own status, not an earlier error left by someone else's kernel (cudaGetLastError would
  // report that as ours).
  return cudaLaunchKernelEx(&config, kernel, args);
}

template <Path P, int AlphaClass, int... Vs>
cudaError_t launch_in_class(int variant, const OmegaArgs& args, cudaStream_t stream,
                            std::integer_sequence<int, Vs...>) {
  cudaError_t result = cudaErrorInvalidValue;
  (
      [&] {
        if constexpr (kVariants[Vs].alpha_class() == AlphaClass) {
          if (variant == Vs) result = launch_variant<Vs, P>(args, stream);
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
