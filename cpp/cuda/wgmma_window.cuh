// The filter-window tile on Hopper (variants.h, window_taps): one thread block computes kWindowRows filter
// rows x kDirectTaps filter columns of a 64 x 64 channel block, for bfloat16 and float16.
//
// The filter-row tile (wgmma_taps.cuh) stages a dY row and its X row for one filter row: a 3 x 3 layer's
// blocks read every dY row three times. Here a block walks its segment's images one after another, each in
// runs of all the rows of a piece of `width` positions (a divisor of the segment's width), a step taking
// the next rows of the run (one per piece of the step): a piece of dY row t meets X rows t, t + 1 and t + 2
// (from the filter's first row of the tile, padding rows included), and rows t + 1 and t + 2 meet two of
// them again. So a step copies its dY rows and only the X rows that no earlier step of the run brought (two
// more at the top of a run), each as one TMA box of several rows, into its buffer, where the next step also
// finds them: a buffer outlives its step (reach below). Filter row i's operand for a piece is its X row
// t + i; its three taps are one m64n192k16 whose three 64-channel N panels overlap in memory, one position
// apart (the 128-byte swizzle's form of wgmma_taps.cuh's m64n96k16). Both operands are read from shared
// memory (dY as the transposed A). Zeros outside the tensor stand for the padding, and for the rows that
// round a run up to whole steps (its segment ends at the last row: WgmmaWindowConfig). The fifteenth stop's
// form copied three X rows per piece, a box per piece: 37% of its warps' samples waited for the copies; a
// box per piece and per X row (8-10 a step) made steps of 16-wide pieces 2-3x slower again (H100, Nsight
// Compute, 2026-11-24): the copies' cost follows the boxes more than their bytes.
//
// Three warpgroups, a block per SM (96 accumulators per thread), one per filter row. Thread 0 issues the
// copies; a warp releases a buffer when the MMAs that read it are done.
#pragma once

#include <cstdint>

#include "cuda/direct_taps.cuh"
#include "cuda/omega.h"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

// Pieces of the launch's widest segment (kernel 0's columns, or kernel 1's residual column):
// window_piece_width of schedule.h. Every segment of the launch but its last is a whole number of pieces; the
// last ends at the output's last column (the launch checks), where the boxes read zeros past it.
__host__ __device__ inline int window_piece_width(const SegmentGrid& g, int kernel) {
  return winrs::window_piece_width(kernel == 0 ? g.seg_w : g.out_w - g.width0);
}

// Subs: the K-blocks of 16 dY positions that a piece takes (1, 2, 3 or 4). A step takes 4 / Subs pieces (one
// of 3), the next rows of a run, each in its own K-blocks of dY, so that every step runs four K-blocks
// (three). A run takes whole steps: rows past the segment's end read as zeros, so the launch needs segments
// that end at dY's last row (one band of rows, the window's plans).
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
  static constexpr int copy_substeps = Subs == 3 ? 3 : 4;  // K-blocks per step
  static constexpr int copy_units = copy_substeps * K;     // dY rows of a buffer: pieces, each then zeros
  static constexpr int subs = Subs;
  static_assert(Subs >= 1 && Subs <= 4 && copy_substeps % Subs == 0);
  static constexpr int pieces = copy_substeps / Subs;  // per step: dY rows of a run
  static constexpr int piece_units = Subs * K;         // a piece's dY rows
  // X rows a step copies: `pieces` (one box), at the top of a run first_x_rows (rows 0 .. 2 pieces - 1 in
  // two boxes; one piece: rows 0 .. 2 in three).
  static constexpr int x_box_rows = pieces;
  static constexpr int first_x_boxes = pieces == 1 ? kWindowRows : 2;
  static constexpr int first_x_rows = first_x_boxes * x_box_rows;
  // dY rows a step copies: one box of the step's rows where the pieces fill their K-blocks (the rows lie
  // piece_units apart, as the K-blocks take them), else a box per piece.
  __host__ __device__ static constexpr int grad_box_rows(int width) {
    return width == piece_units ? pieces : 1;
  }
  // Steps back that a piece's X rows come from: a buffer is refilled only after the last step reading it.
  static constexpr int reach = pieces == 1 ? kWindowRows - 1 : 1;

  // dY: copy_units rows of 64 output channels, X: first_x_rows rows of up to piece_units + 2 positions of 64
  // input channels (128 bytes), both 128-byte swizzled. The X rows of a step lie width + 2 positions apart,
  // and a piece's last K-block reads up to piece_units + 2 positions from its row's start: within that room.
  // Reads past a step's rows meet zeros or older rows, with dY zeros: finite.
  static constexpr int grad_row = BN, x_row = BM;
  static_assert(grad_row * sizeof(Smem) == 128 && x_row * sizeof(Smem) == 128);
  static constexpr int grad_elems = copy_units * grad_row;
  static constexpr int x_rows = (first_x_rows * (piece_units + taps - 1) + 7) / 8 * 8;
  static constexpr int copy_step_elems = (grad_elems + x_rows * x_row + 511) / 512 * 512;  // 1 KB multiples
  static_assert(copy_step_elems * sizeof(Smem) % 1024 == 0);
  // As many buffers as fit in about 210 KB, at most 7: Subs 4 (33 KB) 6, Subs 3, 2 and 1 (25-26 KB) 7.
  static constexpr int copy_stages =
      int(215040 / (copy_step_elems * sizeof(Smem))) < 7 ? int(215040 / (copy_step_elems * sizeof(Smem))) : 7;
  static_assert(copy_stages > reach + 1);
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

  // Where X row k of a run is, for a step whose first row is t0: `back` steps before it, at row `place` of
  // that step's X rows. The top of the run brought rows 0 .. first_x_rows - 1; the step from t0' > 0 brought
  // rows t0' + 2 .. t0' + pieces + 1.
  __host__ __device__ static constexpr void find_x_row(int t0, int k, int* back, int* place) {
    const int from = k < first_x_rows ? 0 : (k - (kWindowRows - 1)) / pieces * pieces;
    *back = (t0 - from) / pieces;
    *place = k < first_x_rows ? k : k - (kWindowRows - 1) - from;
  }
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

  // Step s (first run row t0): its K-blocks of dY (piece sub / Subs) by X row t0 + b + i of each piece b (i:
  // this warpgroup's filter row), from the buffer of the step that brought it (X rows `line` positions
  // apart); issued and committed, not waited for (retire). The K-block count is fixed: a runtime count (a
  // loop, or conditions or a switch around the MMAs) made ptxas fence or serialize them.
  __device__ void run_step(const Smem* buffers, int s, int t0, int line) {
    const Smem* x[C::pieces];
#pragma unroll
    for (int b = 0; b < C::pieces; ++b) {
      int back = 0, place = 0;
      C::find_x_row(t0, t0 + b + warp / 4, &back, &place);
      x[b] = buffers + (s - back) % C::copy_stages * C::copy_step_elems + C::grad_elems +
             place * line * C::x_row;
    }
    const Smem* step = buffers + s % C::copy_stages * C::copy_step_elems;
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < C::copy_substeps; ++sub) {
      const uint64_t a = wgmma_descriptor(step + sub * C::K * C::grad_row, 8 * row_bytes, 8 * row_bytes);
      const Smem* piece_x = x[sub / C::subs] + sub % C::subs * C::K * C::x_row;
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

  __device__ void pin() { pin_registers(acc); }

  template <int Round>
  __device__ void stage_round(float* out) const {
#pragma unroll
    for (int j = 0; j < C::taps; ++j)
      stage_wgmma_fragment<C, Round, rows_per_round, panel_acc / 4>(
          out + (warp / 4 * C::taps + j) * C::round_rows * C::out_stride, acc + j * panel_acc, warp % 4, 0,
          lane);
  }
};

// Main loop of the window tile: the segment's images (image parts, segments.h) one after another, each in
// runs of all its rows for one piece of `width` positions (window_piece_width, the same as the launch's
// boxes), a step taking the next C::pieces rows of a run. dY rows past a piece in a buffer stay zero: the
// buffers are zeroed once (omega_kernel) and no box writes them. The maps' boxes: encode_window_maps.
template <class C, class Gemm>
__device__ __forceinline__ void window_main_loop(const OmegaArgs& args, const WorkTile& work,
                                                 const Segment& seg, Gemm& gemm, typename C::Smem* smem,
                                                 uint64_t* full, uint64_t* empty) {
  using Smem = typename C::Smem;
  constexpr int stages = C::copy_stages, step_elems = C::copy_step_elems;
  const Problem& p = args.problem;
  const int width = window_piece_width(args.grid, args.kernel), line = width + C::taps - 1;
  const int per_line = (seg.w_end - seg.w_begin + width - 1) / width;
  const int run_steps = (seg.h_end - seg.h_begin + C::pieces - 1) / C::pieces;
  const int steps = (seg.image_end - seg.image_begin) * per_line * run_steps;
  const int row_offset = seg.h_begin + work.fh - int(p.pad_top), col_offset = work.f0 - int(p.pad_left);
  const uint32_t grad_bytes = uint32_t(C::pieces * width * C::grad_row * sizeof(Smem)),
                 x_box_bytes = uint32_t(C::x_box_rows * line * C::x_row * sizeof(Smem));
  const int tid = threadIdx.x;
  const DepthView& depth = args.depth;
  const int tap = int(blockIdx.y);   // a 3D layer's filter depth tap (its problems)
  const auto produce = [&](int s) {  // thread 0
    Smem* stage = smem + s % stages * step_elems;
    uint64_t* bar = full + s % stages;
    const int run = s / run_steps, t0 = s % run_steps * C::pieces;
    const int image = seg.image_begin + run / per_line, ow = seg.w_begin + run % per_line * width;
    const int x_boxes = t0 == 0 ? C::first_x_boxes : 1;
    // Boxes outside the tensor count whole, as zeros (rows past dY's last one: the run's last step).
    mbarrier_arrive_expect(bar, grad_bytes + x_boxes * x_box_bytes);
    if (C::grad_box_rows(width) == 1) {
      for (int b = 0; b < C::pieces; ++b)
        tma_load_4d(stage + b * C::piece_units * C::grad_row, &args.grad_map, bar, work.oc0, ow,
                    seg.h_begin + t0 + b, image);
    } else {
      tma_load_4d(stage, &args.grad_map, bar, work.oc0, ow, seg.h_begin + t0, image);
    }
    const int first_x = t0 == 0 ? 0 : t0 + kWindowRows - 1;
    // X's sample and depth slice (0 in 2D; a 3D layer's in the depth padding reads zeros).
    const int x_image = depth.on() ? image / depth.out_depth : image,
              x_slice = depth.on() ? depth.slice(image, tap) : 0;
    for (int box = 0; box < x_boxes; ++box)
      tma_load_5d(stage + C::grad_elems + box * C::x_box_rows * line * C::x_row, &args.input_map, bar,
                  work.ic0, ow + col_offset, row_offset + first_x + box * C::x_box_rows, x_slice, x_image);
  };
  if (tid == 0)
    for (int s = 0; s < stages && s < steps; ++s) produce(s);
  // The accumulators' zeros pinned before the loop: defined on a path apart from the loop's (no steps), ptxas
  // counted them as defined while a step's MMAs were in flight and serialized all MMAs (C7515).
  gemm.pin();
  // A step's MMAs run while the next step's are issued: each step waits for the previous one's, then releases
  // its buffer. Once every warp has released step s - 1, thread 0 refills the buffer of step s - 1 - reach,
  // the last whose X rows step s - 1 read.
  int t0 = 0;  // the step's first run row
  for (int s = 0; s < steps; ++s) {
    mbarrier_wait(full + s % stages, (s / stages) & 1);
    gemm.run_step(smem, s, t0, line);
    gemm.template retire<1>();
    if (s > 0 && tid % 32 == 0) mbarrier_arrive(empty + (s - 1) % stages);
    const int free = s - 1 - C::reach;
    if (tid == 0 && free >= 0 && free + stages < steps) {
      mbarrier_wait(empty + (s - 1) % stages, ((s - 1) / stages) & 1);
      produce(free + stages);
    }
    __syncwarp();  // warp 0 converged again before the next step's .aligned wgmma instructions
    t0 += C::pieces;
    if (t0 == run_steps * C::pieces) t0 = 0;
  }
  gemm.template retire<0>();
}

// Host: C's maps of dY (boxes of 64 channels x `width` positions x C::grad_box_rows rows) and X (64 channels
// x (width + 2) positions x C::x_box_rows rows), X's as N x D x H x W x C (D = 1 in 2D: a 3D layer's depth
// slices by coordinate, so no copies); false if the driver refuses.
template <class C>
bool encode_window_maps(OmegaArgs* args, int width) {
  const Problem& p = args->problem;
  const DepthView& depth = args->depth;
  const cuuint32_t grad_box[4] = {cuuint32_t(kNarrowBlock), cuuint32_t(width),
                                  cuuint32_t(C::grad_box_rows(width)), 1};
  const cuuint32_t input_box[5] = {cuuint32_t(kNarrowBlock), cuuint32_t(width + kDirectTaps - 1),
                                   cuuint32_t(C::x_box_rows), 1, 1};
  const long long slices = depth.on() ? depth.in_depth : 1,
                  samples = depth.on() ? p.batch / depth.out_depth : p.batch;
  const cuuint64_t input_dims[5] = {cuuint64_t(p.in_c), cuuint64_t(p.in_w), cuuint64_t(p.in_h),
                                    cuuint64_t(slices), cuuint64_t(samples)};
  return encode_boxes(&args->grad_map, args->out_grad, 2, p.batch, p.out_h, p.out_w, p.out_c, grad_box,
                      CU_TENSOR_MAP_SWIZZLE_128B) &&
         encode_tensor<5>(&args->input_map, args->input, 2, input_dims, input_box,
                          CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace winrs::cuda
