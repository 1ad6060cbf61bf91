// The direct kernel's filter-row tile (variants.h, direct_taps and strided_taps): one thread block computes
// Taps filter columns f0 .. f0 + Taps - 1 of one filter row for a Block x Block channel block (64, or 128 for
// strided 16-bit layers whose channel counts pass 64, variants.h, strided_wide), from dY staged once and X
// staged once with a halo, instead of one block per column that reads both again for every column.
//
// The units of a tile are the dY pixels of its segment, walked along each row over Wv = W_seg + Taps - 1
// positions (the segment's columns, then Taps - 1 positions where dY is zero): at position c of a row, tap j
// needs X at position c + j of the same row, so across a step's units tap j's GEMM operand is the X rows
// staged for the step shifted by j rows. A step copies U units of dY and U + Taps - 1 positions of X by
// cp.async (the halo's positions again at the next step); the GEMM shares each dY fragment among the taps.
// The same alpha-slice accumulator layout as the Omega kernels (slice = tap) feeds the same output rounds.
//
// A column stride s (Stride, problem.h: strided layers read in place) stages X by phase: position c of the
// walk holds X columns (w + c) s + q for q < s, phase q's rows in a block of their own, and tap j = q + s t
// reads phase q from row t on: each phase is a stride-1 walk with ceil(Taps / s) taps (`reach`).
#pragma once

#include "cuda/gemm_mma.cuh"
#include "cuda/omega_config.cuh"
#include "cuda/staging.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

template <Path P, int Taps, int Block = kNarrowBlock, int Stride = 1>
struct TapsConfig {
  // The "transforms" of a tap tile: slice j holds filter column j as it is.
  struct Tile {
    static constexpr int alpha = Taps, n = Taps, r = 1;
    __device__ static void output(const float (&m)[Taps], float (&y)[Taps]) {
#pragma unroll
      for (int j = 0; j < Taps; ++j) y[j] = m[j];
    }
  };
  static constexpr int variant = 0;
  static constexpr Path path = P;
  static constexpr Operand operand = path_info(P).operand;
  static constexpr bool tensor_cores = true, wgmma = false;
  static_assert(path_info(P).tensor_cores);
  using Storage = typename StorageType<path_info(P).storage>::T;
  using Smem = typename SmemType<operand>::T;

  static constexpr int alpha = Taps, n = Taps, r = 1, taps = Taps;
  static constexpr int stride = Stride,
                       reach = (Taps + Stride - 1) / Stride;  // X column stride, taps a phase
  static_assert(Stride >= 1 && Stride <= kMaxTapsStride);
  static constexpr int BN = Block, BM = Block;
  static_assert(Block == kNarrowBlock || (Block == kWideBlock && kSixteenBit<operand>));
  static constexpr int blocks_per_sm = Block == kNarrowBlock ? 2 : 1;  // the wide block's 192 accumulators
  static constexpr int K = path_info(P).units_per_step;                // one MMA k-block
  static constexpr bool chunked = false, copy = true, tma = false;
  static constexpr int copy_substeps = 4, copy_stages = 3;
  static constexpr int copy_units = copy_substeps * K;   // dY units per step
  static constexpr int x_rows = copy_units + reach - 1;  // X positions per step (of each phase)
  // Shared memory per step: Gs[U][B_N + pad] (dY), then Ds[s][U + reach - 1][B_M + pad] (X, by phase); rows
  // padded by 16 (16-bit) or 32 bytes for conflict-free ldmatrix and TF32 fragment loads, as the Omega
  // kernels'.
  static constexpr int pad = 8, gs_stride = BN + pad, ds_stride = BM + pad;
  static constexpr int filter_stage = copy_units * gs_stride;
  static constexpr int copy_step_elems = filter_stage + Stride * x_rows * ds_stride;
  static constexpr size_t copy_bytes = size_t(copy_stages) * copy_step_elems * sizeof(Smem);

  // Output rounds (Algorithm 3, lines 12-18) through the same memory: As[Taps][B_N / R][B_M + 4] floats.
  static constexpr int out_stride = BM + 4;
  static constexpr int R = output_rounds(alpha, BN, out_stride, copy_bytes);
  static constexpr int round_rows = BN / R;
  static constexpr size_t smem_bytes = copy_bytes, smem_align = 16;
  static_assert(smem_bytes == size_t(taps_smem_bytes(P, Taps, Block, Stride)),
                "the planner's count (smem.h)");
  // Element offsets in a step of row d's piece at channel c of dY and of X's phase q (TapsStager), and the X
  // row of a step from which tap j reads.
  __device__ static constexpr int grad_offset(int d, int c) { return d * gs_stride + c; }
  __device__ static constexpr int input_offset(int d, int c, int q = 0) {
    return filter_stage + (q * x_rows + d) * ds_stride + c;
  }
  static constexpr int tap_row(int j) { return j % Stride * x_rows + j / Stride; }
};

// Copies a step's dY units and X positions (see above): piece p = tid + 256 i is 16 bytes of row p / kPerUnit
// of the step, dY and X alike, so that the two sides share the row's place in the walk (two multiply-high
// divisions); the last pieces are the X halo's.
template <class C>
struct TapsStager : StagingGeometry {
  using T = typename C::Storage;
  using Smem = typename C::Smem;
  static constexpr int kElements = 16 / int(sizeof(T));
  static constexpr int kPerUnit = C::BN / kElements;
  static constexpr int kGradPieces = C::copy_units * kPerUnit,
                       kInputPieces = C::x_rows * kPerUnit;  // a phase's
  static constexpr int kIterations = (kInputPieces + kThreads - 1) / kThreads;
  static_assert(C::BN == C::BM && kGradPieces % kThreads == 0 && sizeof(T) == sizeof(Smem));

  const T* out_grad;  // at the block's first channel
  const T* input;
  int channel, first_row;  // this thread's channels within the block, its first row of a step
  int next_unit;           // the first position of the next step
  bool oc_valid, ic_valid;
  int batch, rows, row_begin, w_begin, seg_w, positions;  // positions per row: seg_w + reach - 1
  int row_stride;                                         // X rows per dY row (the column stride is C's)
  FastDivider by_positions, by_batch;
  // X's channel of this thread's pieces and X's channels per pixel (the problem's, but a packed 3D layer's).
  int x_channel, x_pixel;
  // A 3D layer read in place: X (whole, not from the walk's first image) by depth slice of this thread's tap
  // `tap` for the walk's images from image0; null otherwise.
  const DepthView* depth;
  int image0, tap;

  __device__ void init(int tid, const Problem& p, const WorkTile& work, const UnitWalk& w, const T* x,
                       const T* dy) {
    init_geometry(p, work);  // input column of tap j: dY column + col_offset + j
    channel = tid % kPerUnit * kElements;
    first_row = tid / kPerUnit;
    next_unit = 0;
    oc_valid = work.oc0 + channel < out_c;
    ic_valid = work.ic0 + channel < in_c;
    out_grad = dy + work.oc0;
    input = x;
    x_channel = work.ic0 + channel;
    x_pixel = in_c;
    batch = w.batch, rows = w.rows, row_begin = w.row_begin, w_begin = w.w_begin, seg_w = w.units_per_row;
    positions = seg_w + C::reach - 1;
    row_stride = int(p.stride_h);
    by_positions.init(positions);
    by_batch.init(batch);
    depth = nullptr;
  }

  __device__ void read_depth(const DepthView& view, int first_image, int problem) {
    if (!view.on()) return;
    depth = &view;
    image0 = first_image;
    tap = view.tap_of(problem, x_channel, in_c);  // a piece's 8 channels are one tap's (channels % 16 == 0)
    x_channel = view.x_channel(x_channel);
    x_pixel = view.x_channels(in_c);
  }

  __device__ int steps() const {
    return int((batch * rows * (long long)positions + C::copy_units - 1) / C::copy_units);
  }

  __device__ void issue(Smem* stage) {
#pragma unroll
    for (int i = 0; i < kIterations; ++i) {
      const int d = first_row + i * (kThreads / kPerUnit);  // row of the step
      if (d >= C::x_rows) continue;                         // the halo's iteration has fewer pieces
      const int u = next_unit + d;
      const int line = by_positions.div(u), c = u - line * positions;  // line: image fastest, then dY row
      const int row = by_batch.div(line), image = line - row * batch;
      const bool valid = row < rows;
      const int oh = row_begin + row, ow = w_begin + c;
      if (i < kGradPieces / kThreads) {
        const bool ok = valid && c < seg_w && oc_valid;
        cp_async_16(stage + C::grad_offset(d, channel),
                    out_grad + (ok ? ((image * out_h + oh) * out_w + ow) * out_c + channel : 0), ok);
      }
      // X's image: the walk's, or of a 3D layer's depth slice (none in the depth padding); one piece a phase.
      const int x_image = depth ? int(depth->input_image(image0 + image, tap)) : image;
      const int in_row = oh * row_stride + row_offset;
#pragma unroll
      for (int q = 0; q < C::stride; ++q) {
        const int in_col = ow * C::stride + q + col_offset;
        const bool ok = valid && x_image >= 0 && column_in_bounds(in_col, in_w) && ic_valid;
        cp_async_16(stage + C::input_offset(d, channel, q),
                    input + (ok ? ((x_image * in_h + in_row) * in_w + in_col) * x_pixel + x_channel : 0), ok);
      }
    }
    next_unit += C::copy_units;
  }
};

// The GEMM of a tap tile on tensor cores: eight warps as 2 x 4 over B_N x B_M, each warp B_N / 2 x B_M / 4
// channels of every tap; per k-block it loads its dY fragments once and its X fragments once per tap.
template <class C>
struct TapsGemm {
  static constexpr bool sixteen_bit = kSixteenBit<C::operand>;
  static constexpr bool split = C::operand == Operand::kTF32Split;
  static constexpr int warps_m = 2, warps_n = kWarps / warps_m;
  static constexpr int WM = C::BN / warps_m, WN = C::BM / warps_n;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(MI * 16 * warps_m == C::BN && NI * 8 * warps_n == C::BM && NI % 2 == 0);
  static constexpr int owner_rows = WM;  // the output rounds' row mapping, as MmaGemm's
  static constexpr int rows_per_round = WM / C::R;
  static_assert(rows_per_round * C::R == WM && rows_per_round % 8 == 0);

  using Smem = typename C::Smem;
  int owner, m0, n0, lane;
  float acc[C::taps][MI][NI][4];

  __device__ void init(int tid) {
    const int warp = tid / 32;
    lane = tid % 32;
    owner = warp / warps_n;
    m0 = owner * WM;
    n0 = (warp % warps_n) * WN;
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][mi][ni][e] = 0.0f;
  }

  // K-block `sub` of a step: dY rows sub K .. sub K + K - 1; tap j's X rows tap_row(j) rows further. Copy
  // staging leaves FP32 words unrounded: TF32 rounds them at the fragment load, split TF32 splits them.
  __device__ void run_step(const Smem* step, int sub) {
    const Smem* gs = step + sub * C::K * C::gs_stride;
    const Smem* ds = step + C::filter_stage + sub * C::K * C::ds_stride;
    if constexpr (sixteen_bit) {
      const Ldmatrix16Lanes l(lane);
      uint32_t a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        ldmatrix_x4_trans(a[mi], gs + l.a_k * C::gs_stride + m0 + mi * 16 + l.a_m);
#pragma unroll
      for (int j = 0; j < C::taps; ++j)
#pragma unroll
        for (int ni = 0; ni < NI; ni += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, ds + (l.b_k + C::tap_row(j)) * C::ds_stride + n0 + ni * 8 + l.b_n);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            mma_16bit<C::operand>(acc[j][mi][ni], a[mi], b[0], b[1]);
            mma_16bit<C::operand>(acc[j][mi][ni + 1], a[mi], b[2], b[3]);
          }
        }
    } else {
      const int g = lane >> 2, t = lane & 3;
      uint32_t a_high[MI][4], a_low[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        load_tf32_a<C::gs_stride, split, true>(gs + m0 + mi * 16 + g, t, a_high[mi], a_low[mi]);
#pragma unroll
      for (int j = 0; j < C::taps; ++j)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          uint32_t b_high[2], b_low[2];
          load_tf32_b<C::ds_stride, split, true>(ds + C::tap_row(j) * C::ds_stride + n0 + ni * 8 + g, t,
                                                 b_high, b_low);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi)
            mma_tf32_product<split>(acc[j][mi][ni], a_high[mi], a_low[mi], b_high, b_low);
        }
    }
  }

  // Round Round's accumulators to As[tap][row][col], as MmaGemm::stage_round.
  template <int Round>
  __device__ void stage_round(float* out) const {
    stage_accumulators<C, Round, rows_per_round>(out, acc, 0, owner, n0, lane);
  }
};

}  // namespace winrs::cuda
