// The filter-window tile on Hopper (variants.h, window_taps): one thread block computes kWindowRows filter
// rows x kDirectTaps filter columns of a 64 x 64 channel block, for bfloat16 and float16.
//
// The filter-row tile (wgmma_taps.cuh) stages a dY row and its X row for one filter row: a 3 x 3 layer's
// blocks read every dY row three times, and each step's four MMAs carry the step's waits. Here a step is a
// piece of one dY row (`width` positions, a divisor of the segment's width) and the three X rows it meets,
// copied by the TMA (one dY box, one X box of 3 rows x (width + 2) positions of 64 channels; zeros outside
// the tensor stand for the padding); filter row i's operand is the X rows shifted by i x (width + 2) rows and
// filter column j's by j more, so every tap is one descriptor of the same buffer. Warpgroup i computes filter
// row i: its three taps are one m64n192k16 whose three 64-channel N panels overlap in memory, one row apart
// (the 128-byte swizzle's form of wgmma_taps.cuh's m64n96k16). Both operands are read from shared memory
// (dY as the transposed A).
//
// Three warpgroups, a block per SM (96 accumulators per thread). Thread 0 issues the copies; a warp releases
// a buffer when the MMAs that read it are done.
#pragma once

#include <cstdint>

#include "cuda/direct_taps.cuh"
#include "cuda/omega.h"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"
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

// Subs: the K-blocks of 16 dY positions that a piece takes (1, 2 or 4). A step takes 4 / Subs pieces (of as
// many dY rows, or images), each in its own K-blocks of dY and its own rows of X, so that every step runs
// four K-blocks.
template <Path P, int Subs>
struct WgmmaWindowConfig : WgmmaPath<P> {
  using Tile = typename TapsConfig<P, kDirectTaps>::Tile;
  using typename WgmmaPath<P>::Smem;

  static constexpr int alpha = kDirectTaps, n = kDirectTaps, r = 1, taps = kDirectTaps;
  static constexpr int rows = kWindowRows;
  static constexpr bool window = true;
  static constexpr int threads = rows * 128;  // a warpgroup per filter row
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

  // dY: copy_units rows of 64 output channels, X: x_rows rows of 64 input channels (128 bytes), both
  // 128-byte swizzled, with room in X for the last K-block's reads past its pieces (their dY rows are zero).
  static constexpr int grad_row = BN, x_row = BM;
  static_assert(grad_row * sizeof(Smem) == 128 && x_row * sizeof(Smem) == 128);
  static constexpr int grad_elems = copy_units * grad_row;
  static constexpr int x_rows = 232;  // the most of pieces x piece_x_rows (Subs = 1: 4 x 56), and 8 more
  static_assert(pieces * piece_x_rows + 8 <= x_rows && x_rows % 8 == 0);
  static constexpr int copy_step_elems = grad_elems + x_rows * x_row;
  static_assert(copy_step_elems * sizeof(Smem) % 1024 == 0);
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

// D (64 x 192, FP32) += A (64 x 16) B (16 x 192), both from shared memory as MN-major (transposed) operands.
#define WINRS_D8(i)                                                                           \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
// clang-format off
#define WINRS_WGMMA_SS_N192(TYPES)                                                                        \
  asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32." TYPES                                       \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "   \
               "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "\
               "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "\
               "%55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, "\
               "%73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, "\
               "%91, %92, %93, %94, %95}, %96, %97, 1, 1, 1, 1, 1;\n"                                     \
               : WINRS_D8(0), WINRS_D8(8), WINRS_D8(16), WINRS_D8(24), WINRS_D8(32), WINRS_D8(40),         \
                 WINRS_D8(48), WINRS_D8(56), WINRS_D8(64), WINRS_D8(72), WINRS_D8(80), WINRS_D8(88)        \
               : "l"(a), "l"(b))
// clang-format on
template <Operand O>
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], uint64_t a, uint64_t b) {
#if WINRS_WGMMA_CODE
  if constexpr (O == Operand::kBF16) {
    WINRS_WGMMA_SS_N192("bf16.bf16");
  } else {
    WINRS_WGMMA_SS_N192("f16.f16");
  }
#endif
}
#undef WINRS_WGMMA_SS_N192
#undef WINRS_D8

// The GEMM policy of WgmmaWindowConfig: warpgroup i (warps 4 i .. 4 i + 3) accumulates filter row i, all 64
// output channels by all 64 input channels of its three taps; warp w holds output channels 16 (w % 4) ..
// + 15, and its accumulator panel j (columns 64 j ..) is filter column j.
template <class C>
struct WgmmaWindowGemm : WgmmaRows<C> {
  using WgmmaRows<C>::rows_per_round;
  using Smem = typename C::Smem;
  static constexpr int panel_acc = C::x_row / 2;  // accumulators per tap and thread
  static constexpr uint32_t row_bytes = 128;
  int warp, lane;
  float acc[C::taps * panel_acc];

  __device__ void init(int tid) {
    warp = tid / 32;
    lane = tid % 32;
#pragma unroll
    for (int j = 0; j < C::taps * panel_acc; ++j) acc[j] = 0.0f;
  }

  // A step: its K-blocks of dY (piece sub / Subs) by the piece's X rows of this warpgroup's filter row (X row
  // i x `line` of the piece), issued and committed, not waited for (retire). The K-block count is fixed: a
  // runtime count (a loop, or conditions or a switch around the MMAs) made ptxas fence or serialize them.
  __device__ void run_step(const Smem* step, int line) {
    const Smem* x = step + C::grad_elems + warp / 4 * line * C::x_row;
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < C::copy_substeps; ++sub) {
      const uint64_t a = wgmma_descriptor(step + sub * C::K * C::grad_row, 8 * row_bytes, 8 * row_bytes);
      const Smem* piece_x = x + (sub / C::subs * C::piece_x_rows + sub % C::subs * C::K) * C::x_row;
      wgmma_m64n192k16<C::operand>(acc, a, wgmma_descriptor(piece_x, row_bytes, 8 * row_bytes));
    }
    wgmma_commit();
  }

  // Waits until at most Pending of the committed steps' MMAs are in flight.
  template <int Pending>
  __device__ void retire() {
    wgmma_wait<Pending>();
    pin();
  }

  __device__ void pin() {
#pragma unroll
    for (int j = 0; j < C::taps * panel_acc; ++j) pin_register(acc[j]);
  }

  template <int Round>
  __device__ void stage_round(float* out) const {
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
      stage_wgmma_fragment<C, Round, rows_per_round, panel_acc / 4>(
          out + (warp / 4 * C::taps + j) * C::round_rows * C::out_stride, acc + j * panel_acc, warp % 4, 0,
          lane);
  }
};

// Main loop of the window tile: the segment's dY rows (image fastest, then row) in pieces of `width`
// positions (window_piece_width, the same as the launch's boxes), C::pieces pieces per step, with all of the
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
  const uint32_t step_bytes =
      C::pieces * uint32_t(width * C::grad_row + C::rows * line * C::x_row) * sizeof(typename C::Smem);
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
      tma_load_4d(stage + C::grad_elems + b * C::piece_x_rows * C::x_row, &args.input_map, bar, work.ic0,
                  ow + col_offset, oh + row_offset, image);
    }
  };
  if (tid == 0)
    for (int s = 0; s < stages && s < steps; ++s) produce(s);
  // The accumulators' zeros pinned before the loop: defined on a path apart from the loop's (no steps), ptxas
  // counted them as defined while a step's MMAs were in flight and serialized all MMAs (C7515).
  gemm.pin();
  // A step's MMAs run while the next step's are issued: each step waits for the previous one's, then releases
  // its buffer. Thread 0 refills a buffer one step after that, when the other warpgroups have most likely
  // released it too: waiting at once would hold warpgroup 0 to the slowest one's pace at every step.
  constexpr int refill_lag = 2;
  static_assert(stages > refill_lag);
  for (int s = 0; s < steps; ++s) {
    mbarrier_wait(full + s % stages, (s / stages) & 1);
    gemm.run_step(smem + s % stages * step_elems, line);
    gemm.template retire<1>();
    if (s > 0 && tid % 32 == 0) mbarrier_arrive(empty + (s - 1) % stages);
    const int free = s - refill_lag;
    if (tid == 0 && free >= 0 && free + stages < steps) {
      mbarrier_wait(empty + free % stages, (free / stages) & 1);
      produce(free + stages);
    }
    __syncwarp();  // warp 0 converged again before the next step's .aligned wgmma instructions
  }
  gemm.template retire<0>();
}

// Host: the window's maps of dY (boxes of 64 channels x `width` positions of one row) and X (boxes of 64
// channels x (width + 2) positions x kWindowRows rows); false if the driver refuses.
inline bool encode_window_maps(OmegaArgs* args, int width) {
  const Problem& p = args->problem;
  const cuuint32_t grad_box[4] = {cuuint32_t(kNarrowBlock), cuuint32_t(width), 1, 1};
  const cuuint32_t input_box[4] = {cuuint32_t(kNarrowBlock), cuuint32_t(width + kDirectTaps - 1),
                                   cuuint32_t(kWindowRows), 1};
  return encode_boxes(&args->grad_map, args->out_grad, p.batch, p.out_h, p.out_w, p.out_c, grad_box,
                      CU_TENSOR_MAP_SWIZZLE_128B) &&
         encode_boxes(&args->input_map, args->input, p.batch, p.in_h, p.in_w, p.in_c, input_box,
                      CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace winrs::cuda
