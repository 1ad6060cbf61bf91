// The fused WinRS kernel Omega_alpha(n, r) for FP32 CUDA cores (paper section 5, Algorithm 3), one template
// for all 13 variants. A block owns one segment, one filter row fh, one filter-gradient tile (n columns), and
// a B_N x B_M block of output x input channels. Its main loop walks the segment's units (dimension reduction
// and filter split), 8 per step: filter transform of dY units and input transform of X tiles into
// double-buffered shared memory, then an alpha-batched B_N x B_M x 8 GEMM into registers. The output
// transform runs after the loop, in R rounds through shared memory, and writes the segment's bucket.
//
// Preconditions (checked by winrs::validate_plan and the FFI handler): a consistent problem and grid, fewer
// than 2^31 elements per tensor. Channel counts need no alignment: loads are scalar and predicated, coalesced
// along the channel axis.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "cuda/omega.h"
#include "winrs/tile.h"
#include "winrs/variants.h"

namespace winrs::cuda {

inline constexpr int kThreads = 256;
inline constexpr int kUnitsPerStep = 8;  // the "8" of the B_N x B_M x 8 cache block

// Position of one unit in a block's walk over its segment: batch fastest, then unit column, then row, so that
// a step of 8 units mostly differs in the image only.
struct UnitCursor {
  int image, col, row;  // row counts from the first unclipped row

  __device__ void start(int unit, int batch, int units_per_row) {
    image = unit % batch;
    col = (unit / batch) % units_per_row;
    row = (unit / batch) / units_per_row;
  }
  __device__ void advance(int units, int batch, int units_per_row) {
    image += units;
    while (image >= batch) {
      image -= batch;
      if (++col == units_per_row) {
        col = 0;
        ++row;
      }
    }
  }
};

// P consecutive channels from src; zeros where !valid or beyond `remaining` channels. `vectors` (uniform per
// launch) says the channel count and base pointer allow one P-wide load.
template <int P>
__device__ __forceinline__ void load_channels(float (&dst)[P], const float* src, bool valid, int remaining,
                                              bool vectors) {
  if (vectors) {  // the channel count is a multiple of P: remaining > 0 means all P channels exist
    valid = valid && remaining > 0;
    if constexpr (P == 4) {
      const float4 v = valid ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(0, 0, 0, 0);
      dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
      return;
    } else if constexpr (P == 2) {
      const float2 v = valid ? __ldg(reinterpret_cast<const float2*>(src)) : make_float2(0, 0);
      dst[0] = v.x, dst[1] = v.y;
      return;
    }
  }
#pragma unroll
  for (int q = 0; q < P; ++q) dst[q] = (valid && q < remaining) ? __ldg(src + q) : 0.0f;
}

// Stores element i of P transformed tiles to P consecutive shared-memory floats (P-aligned offsets).
template <int P, int Alpha>
__device__ __forceinline__ void store_channels(float* dst, const float (&t)[P][Alpha], int i) {
  if constexpr (P == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(t[0][i], t[1][i], t[2][i], t[3][i]);
  } else if constexpr (P == 2) {
    *reinterpret_cast<float2*>(dst) = make_float2(t[0][i], t[1][i]);
  } else {
    dst[0] = t[0][i];
  }
}

template <int V>
struct OmegaConfig {
  using Tile = TileMath<V>;
  static constexpr int alpha = Tile::alpha, n = Tile::n, r = Tile::r;
  static constexpr int block_oc = kVariants[V].shape(Path::kFp32).block_oc, block_ic = kVariants[V].shape(Path::kFp32).block_ic;
  // Each alpha slice of the batched GEMM belongs to kThreads / alpha threads (section 5.1), each computing a
  // thread_oc x thread_ic tile of the slice.
  static constexpr int slice_threads = kThreads / alpha;
  static constexpr int thread_ic = 8;
  static constexpr int threads_ic = block_ic / thread_ic;
  static constexpr int threads_oc = slice_threads / threads_ic;
  static constexpr int thread_oc = block_oc / threads_oc;
  static_assert(kThreads % alpha == 0 && slice_threads % threads_ic == 0 && block_oc % threads_oc == 0);
  static_assert(thread_oc % 4 == 0 && thread_ic % 4 == 0, "float4 shared-memory reads");
  // Consecutive channels each thread loads and transforms per step (one unit per thread and side).
  static constexpr int filter_channels = kUnitsPerStep * block_oc / kThreads;
  static constexpr int input_channels = kUnitsPerStep * block_ic / kThreads;
  static_assert(filter_channels * kThreads == kUnitsPerStep * block_oc && block_oc % filter_channels == 0);
  static_assert(input_channels * kThreads == kUnitsPerStep * block_ic && block_ic % input_channels == 0);
  static_assert(filter_channels <= 4 && input_channels <= 4 && 4 % filter_channels == 0 &&
                4 % input_channels == 0);
  // Shared memory: Gs[2][alpha][8][B_N] and Ds[2][alpha][8][B_M].
  static constexpr int filter_stage = alpha * kUnitsPerStep * block_oc;
  static constexpr int stage = alpha * kUnitsPerStep * (block_oc + block_ic);
  static constexpr int smem_floats = 2 * stage;
  // Output rounds: As[alpha][B_N / R][B_M + 4] reuses the GEMM buffers; 4 floats of padding avoid bank
  // conflicts between rows (section 5.2).
  static constexpr int out_stride = block_ic + 4;
  static constexpr int rounds() {
    int rounds = 1;
    while (alpha * (block_oc / rounds) * out_stride > smem_floats) rounds *= 2;
    return rounds;
  }
  static constexpr int out_rounds = rounds();
  static_assert(thread_oc % out_rounds == 0);
  static constexpr size_t smem_bytes = sizeof(float) * smem_floats;
};

template <int V>
__global__ void __launch_bounds__(kThreads, kVariants[V].shape(Path::kFp32).blocks_per_sm) omega_kernel(OmegaArgs args) {
  using C = OmegaConfig<V>;
  using Tile = typename C::Tile;
  constexpr int alpha = C::alpha, n = C::n, r = C::r, BN = C::block_oc, BM = C::block_ic;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);

  const Problem& p = args.problem;
  // Stacked problem of this block (vmap): offset every tensor to its group.
  const long long group = blockIdx.y;
  args.input += group * p.input_elems();
  args.out_grad += group * p.grad_elems();
  args.filter_grad += group * p.filter_elems();
  args.workspace += group * (args.grid.buckets() - 1) * p.filter_elems();
  const int out_c = int(p.out_c), in_c = int(p.in_c), out_w = int(p.out_w), out_h = int(p.out_h);
  const int in_w = int(p.in_w), in_h = int(p.in_h), filter_h = int(p.filter_h), filter_w = int(p.filter_w);
  const int pad_top = int(p.pad_top), pad_left = int(p.pad_left);

  // Block -> (segment, fh, tile, output-channel block, input-channel block); input channels vary fastest so
  // that neighbouring blocks share their dY and X reads in L2.
  const int ic_blocks = (in_c + BM - 1) / BM, oc_blocks = (out_c + BN - 1) / BN;
  int block = blockIdx.x;
  const int icb = block % ic_blocks;
  block /= ic_blocks;
  const int ocb = block % oc_blocks;
  block /= oc_blocks;
  const int tile = block % (filter_w / n);
  block /= filter_w / n;
  const int fh = block % filter_h;
  const int local_segment = block / filter_h;
  const SegmentGrid& grid = args.grid;
  const int primary_cols = grid.primary_cols();
  const int z = args.kernel == 0 ? (local_segment / primary_cols) * grid.cols() + local_segment % primary_cols
                                 : local_segment * grid.cols() + primary_cols;
  const Segment seg = grid.segment(z);
  const int bucket_index = grid.bucket(z);
  float* bucket = bucket_index == 0 ? args.filter_grad
                                    : args.workspace + (long long)(bucket_index - 1) * p.filter_elems();
  const bool accumulate = args.kernel == 1;

  const int oc0 = ocb * BN, ic0 = icb * BM, f0 = tile * n;
  const RowRange rows = clip_rows(seg.h_begin, seg.h_end, fh, pad_top, in_h);
  const int units_per_row = (seg.w_end - seg.w_begin) / r;
  const int units_per_image = (rows.end - rows.begin) * units_per_row;
  const int batch = int(p.batch);
  const int units = batch * units_per_image;
  const int steps = (units + kUnitsPerStep - 1) / kUnitsPerStep;

  const int tid = threadIdx.x;
  // Each thread loads and transforms `filter_channels` consecutive output channels of one dY unit and
  // `input_channels` consecutive input channels of one X tile per step: one cursor and one address per side,
  // and 64/128-bit loads and shared-memory stores when the channel count and the buffer allow them.
  constexpr int FC = C::filter_channels, IC = C::input_channels;
  const int filter_unit = tid * FC / BN, filter_c = tid * FC % BN;
  const int input_unit = tid * IC / BM, input_c = tid * IC % BM;
  const int oc = oc0 + filter_c, ic = ic0 + input_c;
  const bool grad_vectors = out_c % FC == 0 && reinterpret_cast<uintptr_t>(args.out_grad) % (4 * FC) == 0;
  const bool input_vectors = in_c % IC == 0 && reinterpret_cast<uintptr_t>(args.input) % (4 * IC) == 0;
  float filter_regs[FC][r];
  float input_regs[IC][alpha];

  // Global -> registers for the next step (fetch_data, Algorithm 3 lines 2 and 4). The cursors walk the
  // units without integer division.
  UnitCursor filter_cursor, input_cursor;
  filter_cursor.start(filter_unit, batch, units_per_row);
  input_cursor.start(input_unit, batch, units_per_row);
  const int unit_rows = rows.end - rows.begin;

  auto load = [&] {
    {
      const UnitCursor& u = filter_cursor;
      const bool valid = u.row < unit_rows;
      const int oh = rows.begin + u.row, w0 = seg.w_begin + u.col * r;
      const float* src = args.out_grad + ((u.image * out_h + oh) * out_w + w0) * out_c + oc;
#pragma unroll
      for (int e = 0; e < r; ++e) {
        float v[FC];
        load_channels(v, src + e * out_c, valid, out_c - oc, grad_vectors);
#pragma unroll
        for (int q = 0; q < FC; ++q) filter_regs[q][e] = v[q];
      }
      filter_cursor.advance(kUnitsPerStep, batch, units_per_row);
    }
    {
      const UnitCursor& u = input_cursor;
      const bool valid = u.row < unit_rows;
      const int oh = rows.begin + u.row, w0 = seg.w_begin + u.col * r;
      const float* src = args.input + ((u.image * in_h + oh + fh - pad_top) * in_w) * in_c + ic;
#pragma unroll
      for (int e = 0; e < alpha; ++e) {
        const int col = input_column(w0, f0, e, pad_left);
        float v[IC];
        load_channels(v, src + col * in_c, valid && column_in_bounds(col, in_w), in_c - ic, input_vectors);
#pragma unroll
        for (int q = 0; q < IC; ++q) input_regs[q][e] = v[q];
      }
      input_cursor.advance(kUnitsPerStep, batch, units_per_row);
    }
  };

  // Registers -> transforms -> shared memory (Algorithm 3 lines 3, 5-7).
  auto store = [&](int buffer) {
    float* gs = smem + buffer * C::stage;
    float* ds = gs + C::filter_stage;
    float filter_t[FC][alpha], input_t[IC][alpha];
#pragma unroll
    for (int q = 0; q < FC; ++q) Tile::filter(filter_regs[q], filter_t[q]);
#pragma unroll
    for (int i = 0; i < alpha; ++i)
      store_channels(gs + (i * kUnitsPerStep + filter_unit) * BN + filter_c, filter_t, i);
#pragma unroll
    for (int q = 0; q < IC; ++q) Tile::input(input_regs[q], input_t[q]);
#pragma unroll
    for (int i = 0; i < alpha; ++i)
      store_channels(ds + (i * kUnitsPerStep + input_unit) * BM + input_c, input_t, i);
  };

  // alpha-batched GEMM (Algorithm 3 line 10): this thread's slice and tile.
  const int slice = tid / C::slice_threads, local = tid % C::slice_threads;
  const int ty = local / C::threads_ic, tx = local % C::threads_ic;
  float acc[C::thread_oc][C::thread_ic];
#pragma unroll
  for (int i = 0; i < C::thread_oc; ++i)
#pragma unroll
    for (int j = 0; j < C::thread_ic; ++j) acc[i][j] = 0.0f;

  auto gemm = [&](int buffer) {
    const float* gs = smem + buffer * C::stage + slice * kUnitsPerStep * BN + ty * C::thread_oc;
    const float* ds =
        smem + buffer * C::stage + C::filter_stage + slice * kUnitsPerStep * BM + tx * C::thread_ic;
#pragma unroll
    for (int k = 0; k < kUnitsPerStep; ++k) {
      float a[C::thread_oc], b[C::thread_ic];
#pragma unroll
      for (int i = 0; i < C::thread_oc; i += 4)
        *reinterpret_cast<float4*>(&a[i]) = *reinterpret_cast<const float4*>(gs + k * BN + i);
#pragma unroll
      for (int j = 0; j < C::thread_ic; j += 4)
        *reinterpret_cast<float4*>(&b[j]) = *reinterpret_cast<const float4*>(ds + k * BM + j);
#pragma unroll
      for (int i = 0; i < C::thread_oc; ++i)
#pragma unroll
        for (int j = 0; j < C::thread_ic; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  };

  // Main loop with software pipelining: the next step's global loads are in flight during this step's GEMM.
  if (steps > 0) {
    load();
    store(0);
  }
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) load();
    gemm(s & 1);
    if (s + 1 < steps) store((s + 1) & 1);
    __syncthreads();
  }

  // Output transform in R rounds (write_result, Algorithm 3 lines 12-18).
  constexpr int R = C::out_rounds, rows_per_round = C::thread_oc / R, round_rows = BN / R;
#pragma unroll
  for (int round = 0; round < R; ++round) {
    __syncthreads();
#pragma unroll
    for (int il = 0; il < rows_per_round; ++il)
#pragma unroll
      for (int j = 0; j < C::thread_ic; ++j)
        smem[(slice * round_rows + ty * rows_per_round + il) * C::out_stride + tx * C::thread_ic + j] =
            acc[round * rows_per_round + il][j];
    __syncthreads();
    for (int e = tid; e < round_rows * BM; e += kThreads) {
      const int row = e / BM, col = e % BM;
      const int oc =
          oc0 + (row / rows_per_round) * C::thread_oc + round * rows_per_round + row % rows_per_round;
      const int ic = ic0 + col;
      if (oc >= out_c || ic >= in_c) continue;
      float m[alpha], y[n];
#pragma unroll
      for (int i = 0; i < alpha; ++i) m[i] = smem[(i * round_rows + row) * C::out_stride + col];
      Tile::output(m, y);
      float* dst = bucket + ((oc * filter_h + fh) * filter_w + f0) * in_c + ic;
#pragma unroll
      for (int j = 0; j < n; ++j) dst[j * in_c] = accumulate ? dst[j * in_c] + y[j] : y[j];
    }
  }
}

template <int V>
cudaError_t launch_variant(const OmegaArgs& args, cudaStream_t stream) {
  using C = OmegaConfig<V>;
  const Problem& p = args.problem;
  const long long segments =
      (long long)args.grid.seg_rows * (args.kernel == 0 ? args.grid.primary_cols() : 1);
  const long long blocks = segments * p.filter_h * (p.filter_w / C::n) *
                           ((p.out_c + C::block_oc - 1) / C::block_oc) *
                           ((p.in_c + C::block_ic - 1) / C::block_ic);
  if (blocks > 0x7fffffffLL || args.groups > 65535) return cudaErrorInvalidConfiguration;
  if (cudaError_t e = cudaFuncSetAttribute(omega_kernel<V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(C::smem_bytes));
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaFuncSetAttribute(omega_kernel<V>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared);
      e != cudaSuccess)
    return e;
  omega_kernel<V><<<dim3(unsigned(blocks), unsigned(args.groups)), kThreads, C::smem_bytes, stream>>>(args);
  return cudaGetLastError();
}

// Launches `variant` if its alpha class is AlphaClass (each class is compiled in its own translation unit).
template <int AlphaClass, int... Vs>
cudaError_t launch_in_class(int variant, const OmegaArgs& args, cudaStream_t stream,
                            std::integer_sequence<int, Vs...>) {
  cudaError_t result = cudaErrorInvalidValue;
  (
      [&] {
        if constexpr (kVariants[Vs].alpha_class() == AlphaClass) {
          if (variant == Vs) result = launch_variant<Vs>(args, stream);
        }
      }(),
      ...);
  return result;
}

template <int AlphaClass>
cudaError_t launch_alpha_class(int variant, const OmegaArgs& args, cudaStream_t stream) {
  return launch_in_class<AlphaClass>(variant, args, stream, std::make_integer_sequence<int, kNumVariants>{});
}

}  // namespace winrs::cuda
