// The alpha-batched GEMM on tensor cores (paper section 5.1, FP16 kernels; issue 7): warp-level mma.sync,
// m16n8k16 for bfloat16/float16 (fragments by ldmatrix .trans from the K-major staged operands) and m16n8k8
// for TF32 (fragments by plain 32-bit loads). Split TF32 (3xTF32) turns each FP32 operand into a TF32 high
// part and a TF32 remainder at the fragment load and issues low*high, high*low, then high*high.
//
// Warps and slices: with alpha >= 8 each warp owns alpha / 8 whole slices (B_N x B_M each); with alpha < 8,
// 8 / alpha warps share a slice, split 2 x (8 / alpha / 2) over B_N x B_M. Accumulators are FP32.
#pragma once

#include "cuda/omega_config.cuh"

namespace winrs::cuda {

// Lanes' shared-memory rows and columns for ldmatrix .x4 .trans of m16n8k16 fragments from K-major staged
// operands: A (16 x 16, row-major M x K) from Gs[k][m] as tiles (m 0-7 | 8-15) x (k 0-7 | 8-15); B (16 x 8,
// column-major K x N) from Ds[k][n] for two n-tiles, (k 0-7 | 8-15) x (n-tile 0 | 1).
struct Ldmatrix16Lanes {
  int a_k, a_m, b_k, b_n;
  __device__ explicit Ldmatrix16Lanes(int lane)
      : a_k((lane & 7) + ((lane >> 4) << 3)),
        a_m(((lane >> 3) & 1) * 8),
        b_k((lane & 7) + ((lane >> 3) & 1) * 8),
        b_n((lane >> 4) * 8) {}
};

// The operand words of one FP32 value for the TF32 MMAs: split TF32 makes a TF32 high part and a TF32
// remainder; TF32 rounds the value here where staging left it unrounded (Round: copy staging) and takes it as
// stored otherwise (rounded at the shared-memory store).
template <bool Split, bool Round>
__device__ __forceinline__ void tf32_operand(float v, uint32_t& high, uint32_t& low) {
  if constexpr (Split) {
    high = tf32_bits(v);
    low = tf32_bits(v - __uint_as_float(high));
  } else {
    high = Round ? tf32_bits(v) : __float_as_uint(v);
    low = 0;
  }
}

// Fragments of m16n8k8 from K-major staged FP32 words (g = lane / 4, t = lane % 4): A (rows g | g + 8, k t |
// t + 4) from `base` = Gs + first row + g; B (k t | t + 4, column g) from `base` = Ds + first column + g.
template <int Stride, bool Split, bool Round>
__device__ __forceinline__ void load_tf32_a(const float* base, int t, uint32_t (&high)[4],
                                            uint32_t (&low)[4]) {
  const float v[4] = {base[t * Stride], base[t * Stride + 8], base[(t + 4) * Stride],
                      base[(t + 4) * Stride + 8]};
#pragma unroll
  for (int e = 0; e < 4; ++e) tf32_operand<Split, Round>(v[e], high[e], low[e]);
}
template <int Stride, bool Split, bool Round>
__device__ __forceinline__ void load_tf32_b(const float* base, int t, uint32_t (&high)[2],
                                            uint32_t (&low)[2]) {
  tf32_operand<Split, Round>(base[t * Stride], high[0], low[0]);
  tf32_operand<Split, Round>(base[(t + 4) * Stride], high[1], low[1]);
}

// D += A B for one m16n8k8 tile. Split TF32 issues the small products first (CUTLASS's 3xTF32 order), into a
// fresh partial sum that joins the running sum by an FP32 add: the tensor cores' accumulation does not round
// to nearest, and over the thousands of steps of a long reduction its bias alone cost 10x FP32's error
// (measured on an H100).
template <bool Split>
__device__ __forceinline__ void mma_tf32_product(float (&d)[4], const uint32_t (&a_high)[4],
                                                 const uint32_t (&a_low)[4], const uint32_t (&b_high)[2],
                                                 const uint32_t (&b_low)[2]) {
  if constexpr (Split) {
    float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_tf32(partial, a_low, b_high[0], b_high[1]);
    mma_tf32(partial, a_high, b_low[0], b_low[1]);
    mma_tf32(partial, a_high, b_high[0], b_high[1]);
#pragma unroll
    for (int e = 0; e < 4; ++e) d[e] += partial[e];
  } else {
    mma_tf32(d, a_high, b_high[0], b_high[1]);
  }
}

// Half h (rows g or g + 8) of a warp's accumulator fragments for one m16 row group and NI n-tiles, to the
// output rounds' As[slice][row][col] at `dst` = the row's place + the warp's first column + 2 t.
template <int NI>
__device__ __forceinline__ void stage_fragment_half(float* dst, const float (&acc)[NI][4], int h) {
#pragma unroll
  for (int ni = 0; ni < NI; ++ni)
    *reinterpret_cast<float2*>(dst + ni * 8) = make_float2(acc[ni][2 * h], acc[ni][2 * h + 1]);
}

// Round Round's share of a warp's accumulators, S slices of MI x NI fragments, to the output rounds'
// As[slice][row][col]: fragment group rows (16 mi + 8 h) whose group / RowsPerRound is Round, at row
// owner * RowsPerRound + group % RowsPerRound + g of slice slice0 + s (MmaGemm and TapsGemm).
template <class C, int Round, int RowsPerRound, int S, int MI, int NI>
__device__ __forceinline__ void stage_accumulators(float* out, const float (&acc)[S][MI][NI][4], int slice0,
                                                   int owner, int n0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int group = mi * 16 + h * 8;  // first warp-tile row of this fragment group
        if (group / RowsPerRound != Round) continue;
        const int row = owner * RowsPerRound + group % RowsPerRound + g;
        stage_fragment_half(out + ((slice0 + s) * C::round_rows + row) * C::out_stride + n0 + 2 * t,
                            acc[s][mi], h);
      }
}

template <class C>
struct MmaGemm {
  static constexpr bool sixteen_bit = C::operand == Operand::kBF16 || C::operand == Operand::kF16;
  static constexpr bool split = C::operand == Operand::kTF32Split;
  static constexpr int mma_k = sixteen_bit ? 16 : 8;
  static_assert(C::K == mma_k, "one MMA k-block per main-loop step");

  static constexpr int warps_per_slice = C::alpha >= kWarps ? 1 : kWarps / C::alpha;
  static constexpr int slices_per_warp = C::alpha >= kWarps ? C::alpha / kWarps : 1;
  static_assert(warps_per_slice * C::alpha == kWarps * slices_per_warp);
  static constexpr int warps_m = warps_per_slice >= 2 ? 2 : 1;
  static constexpr int warps_n = warps_per_slice / warps_m;
  static constexpr int WM = C::BN / warps_m, WN = C::BM / warps_n;  // warp tile of a slice
  static constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(MI * 16 * warps_m == C::BN && NI * 8 * warps_n == C::BM);
  // Each load phase overlaps one part of the GEMM: a range of the warp's n-tiles (pairs for ldmatrix .x4).
  static constexpr int ni_per_part = NI / C::phases;
  static_assert(ni_per_part * C::phases == NI && (!sixteen_bit || ni_per_part % 2 == 0));
  // The epilogue's row mapping: each owner (warp row) holds WM consecutive rows of its slice; a round takes
  // WM / R of them, whole 8-row fragment groups.
  static constexpr int owner_rows = WM;
  static constexpr int rows_per_round = WM / C::R;
  static_assert(rows_per_round * C::R == WM && rows_per_round % 8 == 0);

  using Smem = typename C::Smem;
  int slice0, owner, m0, n0, lane;
  float acc[slices_per_warp][MI][NI][4];

  __device__ void init(int tid) {
    const int warp = tid / 32;
    lane = tid % 32;
    slice0 = (warp / warps_per_slice) * slices_per_warp;
    const int in_slice = warp % warps_per_slice;
    owner = in_slice / warps_n;
    m0 = owner * WM;
    n0 = (in_slice % warps_n) * WN;
#pragma unroll
    for (int s = 0; s < slices_per_warp; ++s)
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[s][mi][ni][e] = 0.0f;
  }

  // K-block `sub` of a copy-staged step (OmegaConfig::copy): copy_substeps stage layouts one after another.
  __device__ void run_step(const Smem* step, int sub) { run<0>(step + sub * C::stage); }

  template <int Part>
  __device__ void run(const Smem* stage) {
#pragma unroll
    for (int s = 0; s < slices_per_warp; ++s) {
      const Smem* gs = stage + (slice0 + s) * C::K * C::gs_stride;
      const Smem* ds = stage + C::filter_stage + (slice0 + s) * C::K * C::ds_stride;
      if constexpr (sixteen_bit) {
        run_16bit<Part>(s, gs, ds);
      } else {
        run_tf32<Part>(s, gs, ds);
      }
    }
  }

  template <int Part>
  __device__ void run_16bit(int s, const Smem* gs, const Smem* ds) {
    const Ldmatrix16Lanes l(lane);
    uint32_t a[MI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
      ldmatrix_x4_trans(a[mi], gs + l.a_k * C::gs_stride + m0 + mi * 16 + l.a_m);
#pragma unroll
    for (int nj = Part * ni_per_part; nj < (Part + 1) * ni_per_part; nj += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, ds + l.b_k * C::ds_stride + n0 + nj * 8 + l.b_n);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        mma_16bit<C::operand>(acc[s][mi][nj], a[mi], b[0], b[1]);
        mma_16bit<C::operand>(acc[s][mi][nj + 1], a[mi], b[2], b[3]);
      }
    }
  }

  // TF32 operands were rounded at the shared-memory store, or land unrounded by copy staging and are rounded
  // at the fragment load; split TF32 makes both parts there.
  template <int Part>
  __device__ void run_tf32(int s, const float* gs, const float* ds) {
    const int g = lane >> 2, t = lane & 3;
    uint32_t a_high[MI][4], a_low[MI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
      load_tf32_a<C::gs_stride, split, C::copy>(gs + m0 + mi * 16 + g, t, a_high[mi], a_low[mi]);
#pragma unroll
    for (int ni = Part * ni_per_part; ni < (Part + 1) * ni_per_part; ++ni) {
      uint32_t b_high[2], b_low[2];
      load_tf32_b<C::ds_stride, split, C::copy>(ds + n0 + ni * 8 + g, t, b_high, b_low);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        mma_tf32_product<split>(acc[s][mi][ni], a_high[mi], a_low[mi], b_high, b_low);
    }
  }

  // Writes round Round's accumulators to As[slice][row][col] (row = owner * rows_per_round + local row).
  template <int Round>
  __device__ void stage_round(float* out) const {
    stage_accumulators<C, Round, rows_per_round>(out, acc, slice0, owner, n0, lane);
  }
};

}  // namespace winrs::cuda
