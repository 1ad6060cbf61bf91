// The filter-window tile on Hopper (variants.h, window_taps): one thread block computes kWindowRows filter
// rows x kDirectTaps filter columns of a 64 x 64 channel block, for bfloat16 and float16.
//
// The filter-row tile (wgmma_taps.cuh) stages a dY row and its X row for one filter row: a 3 x 3 layer's
// blocks read every dY row three times, and each step's four MMAs carry the step's waits. Here a step is a
// piece of one dY row (`width` positions, a divisor of the segment's width) and the three X rows it meets,
// copied by the TMA (one dY box, one X box of 3 rows x (width + 2) positions per 32-channel half; zeros
// outside the tensor stand for the padding); filter row i's operand is the X rows shifted by i x (width + 2)
// rows and filter column j's by j more, so every tap is one descriptor of the same buffer, and the taps of
// a filter row are one m64n96k16 whose three N panels overlap (wgmma_taps.cuh). Both operands are read from
// shared memory (dY as the transposed A): three MMAs per dY K-block.
//
// A block per SM (144 accumulators per thread). Thread 0 issues the copies; a warp releases a buffer when
// the MMAs that read it are done.
#pragma once

#include <cstdint>

#include "cuda/omega.h"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/wgmma_taps.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

// The widest piece of a dY row the window's buffers take (its X rows: width + kDirectTaps - 1 positions).
inline constexpr int kWindowMaxWidth = 62;

// Pieces of the launch's widest segment (kernel 0's columns, or kernel 1's residual column): the divisor of
// its width of at most kWindowMaxWidth whose K-blocks of 16 units are fullest (the larger of equals), 0 where
// none fills three quarters of its K-blocks. Every segment of the launch but its last is a whole number of
// pieces; the last ends at the output's last column (the launch checks), where the boxes read zeros past it.
__host__ __device__ inline int window_piece_width(const SegmentGrid& g, int kernel) {
  const int widest = kernel == 0 ? g.seg_w : g.out_w - g.width0;
  int best = 0, best_fill = 0;  // fill in 1/64ths
  for (int width = kWindowMaxWidth < widest ? kWindowMaxWidth : widest; width >= 1; --width) {
    if (widest % width != 0) continue;
    const int fill = 64 * width / ((width + 15) / 16 * 16);
    if (fill > best_fill) best = width, best_fill = fill;
  }
  return best_fill >= 48 ? best : 0;
}

// Subs: the K-blocks of 16 dY positions that a piece fills (1 to 4). A step takes 4 / Subs pieces (of as
// many dY rows, or images), each in its own K-blocks of dY and its own rows of X, so that every step runs
// four K-blocks: with one piece per step, pieces of 28 positions ran 0.107 ms on 3x3 128:56:64 (bf16, H100).
template <Path P, int Subs>
struct WgmmaWindowConfig : WgmmaPath<P> {
  using Tile = typename TapsConfig<P, kDirectTaps>::Tile;
  using typename WgmmaPath<P>::Smem;

  static constexpr int alpha = kDirectTaps, n = kDirectTaps, r = 1, taps = kDirectTaps;
  static constexpr int rows = kWindowRows, row_passes = 1;  // all filter rows of the tile in one pass
  static constexpr bool window = true;
  static constexpr int BN = kNarrowBlock, BM = kNarrowBlock;
  static constexpr int blocks_per_sm = 1;
  static constexpr int K = 16;
  static constexpr bool chunked = false, copy = true, tma = true;
  static constexpr int copy_substeps = 4, copy_stages = 5;
  static constexpr int copy_units = copy_substeps * K;  // dY rows of a buffer: pieces, each then zeros
  static constexpr int subs = Subs;
  static_assert(Subs >= 1 && Subs <= copy_substeps && copy_substeps % Subs == 0);
  static constexpr int pieces = copy_substeps / Subs;  // per step
  static constexpr int piece_units = Subs * K;         // a piece's dY rows
  // A piece's X rows: kWindowRows rows of up to piece_units + 2 positions, on whole swizzle periods (TMA).
  static constexpr int piece_x_rows = (rows * (piece_units + taps - 1) + 7) / 8 * 8;

  // dY: copy_units rows of 64 channels (128 bytes), 128-byte swizzled; X: two halves of 32 channels (64-byte
  // rows, 64-byte swizzled) of kWindowRows x (width + 2) rows, with room for the last K-block's reads past
  // them (their dY rows are zero). The halves start on the 64-byte swizzle's 512-byte period.
  static constexpr int grad_row = BN, half_channels = BM / 2;
  static_assert(grad_row * sizeof(Smem) == 128 && half_channels * sizeof(Smem) == 64);
  static constexpr int grad_elems = copy_units * grad_row;
  static constexpr int half_rows = 232;  // the most of pieces x piece_x_rows (Subs = 1: 4 x 56), and 8 more
  static_assert(pieces * piece_x_rows + 8 <= half_rows);
  static constexpr int half_elems = half_rows * half_channels;
  static constexpr int copy_step_elems = grad_elems + 2 * half_elems;
  static_assert(copy_step_elems * sizeof(Smem) % 1024 == 0 && half_elems * sizeof(Smem) % 512 == 0);
  static constexpr size_t copy_bytes = size_t(copy_stages) * copy_step_elems * sizeof(Smem);
  static constexpr size_t smem_align = 1024;
  static constexpr size_t sanitizer_slack = 2048;  // as WgmmaTapsConfig's
  static constexpr size_t barrier_offset = copy_bytes + sanitizer_slack;
  static constexpr size_t barrier_bytes = 2 * copy_stages * sizeof(uint64_t);
  static constexpr size_t smem_bytes = copy_bytes + smem_align + sanitizer_slack + barrier_bytes;

  // Output rounds through the same memory: As[row][tap][B_N / R][B_M + 4].
  static constexpr int out_stride = BM + 4;
  static constexpr int R = output_rounds(rows * alpha, BN, out_stride, copy_bytes);
  static constexpr int round_rows = BN / R;
};

// D (64 x 96, FP32) += A (64 x 16) B (16 x 96), both from shared memory as MN-major (transposed) operands.
#define WINRS_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
// clang-format off
#define WINRS_WGMMA_SS_N96(TYPES)                                                                           \
  asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32." TYPES                                          \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "     \
               "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "  \
               "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, 1, 1, 1, 1, 1;\n"          \
               : WINRS_D4(0), WINRS_D4(4), WINRS_D4(8), WINRS_D4(12), WINRS_D4(16), WINRS_D4(20),            \
                 WINRS_D4(24), WINRS_D4(28), WINRS_D4(32), WINRS_D4(36), WINRS_D4(40), WINRS_D4(44)          \
               : "l"(a), "l"(b))
// clang-format on
template <Operand O>
__device__ __forceinline__ void wgmma_m64n96k16(float (&d)[48], uint64_t a, uint64_t b) {
#if WINRS_WGMMA_CODE
  if constexpr (O == Operand::kBF16) {
    WINRS_WGMMA_SS_N96("bf16.bf16");
  } else {
    WINRS_WGMMA_SS_N96("f16.f16");
  }
#endif
}
#undef WINRS_WGMMA_SS_N96
#undef WINRS_D4

// The GEMM policy of WgmmaWindowConfig: warpgroup g multiplies all 64 output channels by input channels
// 32 g .. 32 g + 31 of every tap; warp w holds output channels 16 (w % 4) .. + 15. Filter row i's
// accumulators are acc[i], whose panel j (columns 32 j ..) is filter column j.
template <class C>
struct WgmmaWindowGemm : WgmmaRows<C> {
  using WgmmaRows<C>::rows_per_round;
  using Smem = typename C::Smem;
  static constexpr int panel_acc = C::half_channels / 2;  // accumulators per tap and thread
  static constexpr uint32_t half_bytes = C::half_channels * sizeof(Smem),
                            grad_bytes = C::grad_row * sizeof(Smem);
  int warp, lane;
  float acc[C::rows][C::taps * panel_acc];

  __device__ void init(int tid) {
    warp = tid / 32;
    lane = tid % 32;
#pragma unroll
    for (int i = 0; i < C::rows; ++i)
#pragma unroll
      for (int j = 0; j < C::taps * panel_acc; ++j) acc[i][j] = 0.0f;
  }

  // A step: its K-blocks of dY (piece sub / Subs) by the piece's X rows of every filter row (`line`
  // positions apart), issued and committed, not waited for (retire). The K-block count is fixed: a runtime
  // count (a loop, or conditions or a switch around the MMAs) made ptxas fence or serialize them.
  __device__ void run_step(const Smem* step, int line) {
    const Smem* x = step + C::grad_elems + warp / 4 * C::half_elems;
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < C::copy_substeps; ++sub) {
      const uint64_t a = wgmma_descriptor(step + sub * C::K * C::grad_row, 8 * grad_bytes, 8 * grad_bytes);
      const Smem* piece_x = x + (sub / C::subs * C::piece_x_rows + sub % C::subs * C::K) * C::half_channels;
#pragma unroll
      for (int i = 0; i < C::rows; ++i)
        wgmma_m64n96k16<C::operand>(acc[i], a,
                                    wgmma_descriptor(piece_x + i * line * C::half_channels, half_bytes,
                                                     8 * half_bytes, WgmmaSwizzle::k64));
    }
    wgmma_commit();
  }

  // Waits until at most Pending of the committed steps' MMAs are in flight.
  template <int Pending>
  __device__ void retire() {
    wgmma_wait<Pending>();
#pragma unroll
    for (int i = 0; i < C::rows; ++i)
#pragma unroll
      for (int j = 0; j < C::taps * panel_acc; ++j) pin_register(acc[i][j]);
  }

  template <int Round>
  __device__ void stage_round(float* out) const {
#pragma unroll
    for (int i = 0; i < C::rows; ++i)
#pragma unroll
      for (int j = 0; j < C::taps; ++j)
        stage_wgmma_fragment<C, Round, rows_per_round, panel_acc / 4>(
            out + (i * C::taps + j) * C::round_rows * C::out_stride, acc[i] + j * panel_acc, warp % 4,
            warp / 4 * C::half_channels, lane);
  }
};

// Main loop of the window tile: the segment's dY rows (image fastest, then row) in pieces of `width`
// positions (window_piece_width, the same as the launch's boxes), one piece per step, with all of the
// segment's rows (padding rows read as zeros). dY rows past a piece in a buffer stay zero: the buffers are
// zeroed once (omega_kernel) and no box writes them.
template <class C, class Gemm>
__device__ __forceinline__ void window_main_loop(const OmegaArgs& args, const WorkTile& work,
                                                 const Segment& seg, Gemm& gemm, typename C::Smem* smem,
                                                 uint64_t* full, uint64_t* empty) {
  constexpr int stages = C::copy_stages, step_elems = C::copy_step_elems;
  const Problem& p = args.problem;
  const int width = window_piece_width(args.grid, args.kernel), line = width + C::taps - 1;
  const int batch = int(p.batch), per_line = (seg.w_end - seg.w_begin + width - 1) / width;
  const int total = batch * (seg.h_end - seg.h_begin) * per_line;  // pieces
  const int steps = (total + C::pieces - 1) / C::pieces;
  const int row_offset = work.fh - int(p.pad_top), col_offset = work.f0 - int(p.pad_left);
  const uint32_t step_bytes = C::pieces *
                              uint32_t(width * C::grad_row + 2 * C::rows * line * C::half_channels) *
                              sizeof(typename C::Smem);
  const int tid = threadIdx.x;
  const auto produce = [&](int s) {  // thread 0
    typename C::Smem* stage = smem + s % stages * step_elems;
    uint64_t* bar = full + s % stages;
    mbarrier_arrive_expect(bar, step_bytes);  // boxes outside the tensor count whole, as zeros
#pragma unroll
    for (int b = 0; b < C::pieces; ++b) {
      const int q = s * C::pieces + b, piece = q % per_line, rest = q / per_line;
      // Pieces past the walk's end: an image past the batch, which reads as zeros.
      const int image = q < total ? rest % batch : batch, oh = q < total ? seg.h_begin + rest / batch : 0;
      const int ow = seg.w_begin + piece * width;
      tma_load_4d(stage + b * C::piece_units * C::grad_row, &args.grad_map, bar, work.oc0, ow, oh, image);
#pragma unroll
      for (int half = 0; half < 2; ++half)
        tma_load_4d(stage + C::grad_elems + half * C::half_elems + b * C::piece_x_rows * C::half_channels,
                    &args.input_map, bar, work.ic0 + half * C::half_channels, ow + col_offset,
                    oh + row_offset, image);
    }
  };
  if (tid == 0)
    for (int s = 0; s < stages && s < steps; ++s) produce(s);
  // Thread 0 refills a buffer two steps after its own warp released it, when the other warpgroup has most
  // likely released it too: waiting at once held warpgroup 0 to warpgroup 1's pace at every step.
  constexpr int refill_lag = 2;
  static_assert(stages > refill_lag);
  for (int s = 0; s < steps; ++s) {
    mbarrier_wait(full + s % stages, (s / stages) & 1);
    gemm.run_step(smem + s % stages * step_elems, line);
    // Waited for at once: with the previous step's MMAs waited for instead (as tma_main_loop), ptxas
    // serialized the MMAs (C7515, accumulator registers defined in the pipeline stage).
    gemm.template retire<0>();
    if (tid % 32 == 0) mbarrier_arrive(empty + s % stages);
    const int free = s - refill_lag;
    if (tid == 0 && free >= 0 && free + stages < steps) {
      mbarrier_wait(empty + free % stages, (free / stages) & 1);
      produce(free + stages);
    }
    __syncwarp();  // warp 0 converged again before the next step's .aligned wgmma instructions
  }
}

// Host: the window's maps of dY (boxes of 64 channels x `width` positions of one row) and X (two 32-channel
// halves: boxes of 32 channels x (width + 2) positions x kWindowRows rows); false if the driver refuses.
inline bool encode_window_maps(OmegaArgs* args, int width) {
  const Problem& p = args->problem;
  const cuuint32_t grad_box[4] = {cuuint32_t(kNarrowBlock), cuuint32_t(width), 1, 1};
  const cuuint32_t input_box[4] = {cuuint32_t(kNarrowBlock / 2), cuuint32_t(width + kDirectTaps - 1),
                                   cuuint32_t(kWindowRows), 1};
  return encode_boxes(&args->grad_map, args->out_grad, p.batch, p.out_h, p.out_w, p.out_c, grad_box,
                      CU_TENSOR_MAP_SWIZZLE_128B) &&
         encode_boxes(&args->input_map, args->input, p.batch, p.in_h, p.in_w, p.in_c, input_box,
                      CU_TENSOR_MAP_SWIZZLE_64B);
}

}  // namespace winrs::cuda
