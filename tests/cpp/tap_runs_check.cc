// Host check of the T-tap tiles' index math (cpp/winrs/tap_runs.h; run by tests/test_tap_runs.py): for each
// layer, the segments tap_run_grid cuts for 1, 3 and 132 SMs, every tile of the TileScheduler, every step's
// boxes and every MMA's operands (tap_x_place) replayed on coordinates: a K-block of real dY units meets, for
// tap j, X of the same images, at its row plus the filter row and its column plus the filter column; it reads
// only steps of its run; and every term dY[n, oh, ow] X[n, oh + fh - pt, ow + fw - pl] whose X row lies in
// the tensor is summed exactly once. Prints what failed and exits 1, or prints the count of layers checked.
#include <cstdio>
#include <tuple>
#include <utility>
#include <vector>

#include "winrs/tap_runs.h"

namespace {

using winrs::Problem;
using winrs::SegmentGrid;

struct Layer {
  int batch, out_h, out_w, filter_h, filter_w, pad_top, pad_left;
  int width0 = 0;              // the primary columns' width (0: all of them, no residual column)
  bool split = false;          // two positions a step on odd rows: the last column apart (tap_run_even_split)
  int channels = 128;          // input and output channels: a term once per pair of 128-channel blocks
  winrs::TapRunRules rules{};  // as shipped, or as the experiments' switches set them (WINRS_JAX_TAP_RUNS=2:
                               // rows of any length; WINRS_JAX_TAP_BALANCED=0: 3 + 1 cuts)
};

int failures = 0;

void fail(const Layer& l, const char* what, int a = 0, int b = 0) {
  if (++failures <= 20)
    std::printf("FAILED N=%d %dx%d filter %dx%d pads (%d, %d) width0 %d: %s (%d, %d)\n", l.batch, l.out_h,
                l.out_w, l.filter_h, l.filter_w, l.pad_top, l.pad_left, l.width0, what, a, b);
}

// Replays kernel `kernel` of the layer's plan on the T-tap tiles for `sms` SMs, counting terms into `count`.
void replay(const Layer& l, int kernel, int sms, std::vector<int>& count) {
  const int taps = winrs::tap_run_taps(l.filter_w);
  const bool balanced = winrs::tap_run_balanced_cut(l.filter_w, taps, l.rules);
  Problem p{l.batch,
            l.out_h,
            l.out_w,
            l.channels,
            l.out_h,
            l.out_w,
            l.channels,
            l.filter_h,
            l.filter_w,
            l.pad_top,
            l.filter_h - 1 - l.pad_top,
            l.pad_left,
            l.filter_w - 1 - l.pad_left};
  const int width0 = l.width0 ? l.width0 : l.out_w;
  // The planner's one-tap cut: columns of one position, all rows in one band (tap_run_grid replaces it).
  SegmentGrid planned{l.out_h, l.out_w, 1, l.out_h, 1, width0, 1, true, l.batch, 1};
  if (l.split) {
    planned = winrs::tap_run_even_split(p, planned, taps, l.rules);
    if (planned.width0 != l.out_w - 1) return fail(l, "the last column apart", planned.width0);
    if (kernel == 1) {  // one-tap tiles on the last column: every unit of their segments, once per tap
      const winrs::TileScheduler one_tap = winrs::make_scheduler(p, planned, 1, 1, 128, 128);
      for (long long index = 0; index < one_tap.count(); ++index) {
        const winrs::WorkTile work = one_tap.tile(index);
        const winrs::Segment seg = planned.segment(work.segment);
        for (int n = seg.image_begin; n < seg.image_end; ++n)
          for (int oh = seg.h_begin; oh < seg.h_end; ++oh)
            for (int ow = seg.w_begin; ow < seg.w_end; ++ow)
              if (oh + work.fh - l.pad_top >= 0 && oh + work.fh - l.pad_top < l.out_h)
                ++count[(((long long)n * l.out_h + oh) * l.out_w + ow) * l.filter_h * l.filter_w +
                        work.fh * l.filter_w + work.f0];
      }
      return;
    }
  }
  if (!winrs::tap_runs_fit(p, planned, kernel, taps, l.rules))
    return fail(l, "the layer should fit", kernel, taps);
  // The launch's grid: tap_run_grid's cut.
  const SegmentGrid grid = winrs::tap_run_grid(p, planned, kernel, taps, sms, 128, 128,
                                               winrs::kTapRunOverheadSteps, l.rules.max_images);
  const winrs::TileScheduler scheduler = winrs::make_scheduler(p, grid, kernel, taps, 128, 128, 1, balanced);
  // Every block's tiles b, b + sms, ..., as the kernels walk them.
  for (long long block = 0; block < sms; ++block) {
    winrs::BlockTiles tiles{block};
    for (long long index; tiles.next(sms, scheduler.count(), &index);) {
      const winrs::WorkTile work = scheduler.tile(index);
      const winrs::UnitWalk walk = winrs::make_unit_walk(p, grid.segment(work.segment), work.fh, 1);
      const winrs::TapRunWalk runs(p, work, walk, taps, l.rules.max_images);
      const winrs::TapRunShape& shape = runs;
      if (runs.taps < 1 || work.f0 + runs.taps > l.filter_w)
        return fail(l, "tile columns", work.f0, runs.taps);
      if (balanced && runs.taps < taps - 1) return fail(l, "a balanced cut's tile", work.f0, runs.taps);
      if (walk.batch % shape.images != 0) return fail(l, "a part of the batch in whole boxes", walk.batch);
      if (shape.images != (l.batch < l.rules.max_images ? l.batch : l.rules.max_images))
        return fail(l, "boxes of at most max_images", shape.images);
      // No unit past a run's end in a step of real ones (its zero dY would meet real X: NaN from an infinite
      // X).
      if (runs.width % shape.positions != 0) return fail(l, "a run of part of a step", runs.width);
      for (int s = 0; s < runs.steps; ++s) {
        if (!runs.computes(s)) continue;
        const auto st = runs.step(s, walk);
        for (int sub = 0; sub < winrs::kTapRunUnits / winrs::kTapRunBlock; ++sub) {
          const int q = sub * winrs::kTapRunBlock / shape.images,
                    first = sub * winrs::kTapRunBlock % shape.images;
          const int grad_image = runs.grad_image(st, q), ow = runs.grad_col(st, q, walk);
          for (int j = 0; j < runs.taps; ++j) {
            const winrs::TapXPlace at = winrs::tap_x_place(taps, shape.positions, sub, j);
            if (at.back < 0 || at.back > shape.reach || (s - at.back) / runs.run_steps != s / runs.run_steps)
              return fail(l, "X from outside the run", s, at.back);
            const auto from = runs.step(s - at.back, walk);
            const int x_q = at.row / shape.images, x_image = from.image + at.row % shape.images;
            const int x_col = runs.x_col(from, x_q, walk), x_row = runs.x_row(from);
            if (grad_image >= l.batch) continue;  // units past the run: zero dY
            const int n = grad_image + first, fw = work.f0 + j;
            if (x_image != n) return fail(l, "X's images", x_image, n);
            if (x_row != st.oh + work.fh - l.pad_top) return fail(l, "X's row", x_row, st.oh);
            if (x_col != ow + fw - l.pad_left) return fail(l, "X's column", x_col, ow + fw - l.pad_left);
            if (ow < 0 || ow >= l.out_w) return fail(l, "dY's column", ow);
            for (int i = 0; i < winrs::kTapRunBlock; ++i)
              ++count[(((long long)(n + i) * l.out_h + st.oh) * l.out_w + ow) * l.filter_h * l.filter_w +
                      work.fh * l.filter_w + fw];
          }
        }
      }
    }
  }
}

void check(const Layer& l) {
  for (int sms : {1, 3, 132}) {
    std::vector<int> count((size_t)l.batch * l.out_h * l.out_w * l.filter_h * l.filter_w, 0);
    replay(l, 0, sms, count);
    if (l.width0 || l.split) replay(l, 1, sms, count);
    for (int n = 0; n < l.batch; ++n)
      for (int oh = 0; oh < l.out_h; ++oh)
        for (int ow = 0; ow < l.out_w; ++ow)
          for (int fh = 0; fh < l.filter_h; ++fh) {
            const bool real_row = oh + fh - l.pad_top >= 0 && oh + fh - l.pad_top < l.out_h;  // in_h = out_h
            for (int fw = 0; fw < l.filter_w; ++fw) {
              const int c = count[(((size_t)n * l.out_h + oh) * l.out_w + ow) * l.filter_h * l.filter_w +
                                  fh * l.filter_w + fw];
              const int blocks = (l.channels + 127) / 128;  // channel-block pairs, each a term's once
              if (c != (real_row ? blocks * blocks : 0))
                return fail(l, "a term summed other than once per channel blocks", c, sms);
            }
          }
  }
}

// The block step cursor (BlockStepCursor) against the consumers' nested loops over a block's tiles and their
// steps, on tiles of 0 to 3 steps (none at the start, runs of none, none at the end), for blocks of every
// grid. At most the consumers' count + 1 steps walked (one past shows a walk that does not end).
using Steps = std::vector<std::pair<long long, int>>;
void check_step_cursor() {
  for (int pattern = 0; pattern < 729; ++pattern) {  // six tiles of 0, 1 or 2 steps, then 3 in some
    std::vector<int> steps;
    for (int t = 0, rest = pattern; t < 6; ++t, rest /= 3) steps.push_back(rest % 3);
    if (pattern % 7 == 0) steps.push_back(3);
    const long long tiles = (long long)steps.size();
    const auto steps_of = [&](long long index) { return steps[index]; };
    for (long long grid = 1; grid <= tiles + 1; ++grid)
      for (long long block = 0; block < grid; ++block) {
        Steps nested, walked;
        for (long long index = block; index < tiles; index += grid)
          for (int s = 0; s < steps[index]; ++s) nested.emplace_back(index, s);
        const auto next_tile = [&](winrs::BlockTiles& block_tiles, long long* tile) {
          return block_tiles.next(grid, tiles, tile);
        };
        winrs::BlockStepCursor step;
        step.tiles = winrs::BlockTiles{block};
        for (step.seek(next_tile, steps_of); step.valid && walked.size() <= nested.size();
             step.advance(next_tile, steps_of))
          walked.emplace_back(step.tile, step.s);
        if (walked != nested) {
          std::printf("FAILED: the block step cursor on pattern %d, block %lld of %lld: %zu steps, not %zu\n",
                      pattern, block, grid, walked.size(), nested.size());
          ++failures;
          return;
        }
      }
  }
}

}  // namespace

int main() {
  check_step_cursor();
  int layers = 0;
  for (int batch : {32, 64, 128, 192})
    for (int filter_w : {2, 3, 4, 5, 7})
      for (int out_w : {14, 15, 16, 17, 20, 34, 40})
        for (int pad_left : {0, 1, filter_w - 1}) {
          const int taps = winrs::tap_run_taps(filter_w), positions = batch < 64 ? 64 / batch : 1;
          const int reach = (taps - 1 + positions - 1) / positions;
          if (out_w % positions != 0 ||
              winrs::tap_run_steps_per_x_step(filter_w, taps) * reach > out_w / positions)
            continue;
          ++layers;
          check(Layer{batch, 3, out_w, 3, filter_w, 1, pad_left});
          check(Layer{batch, 1, out_w, 1, filter_w, 0, pad_left});  // a 1D layer: columns cut by SMs
        }
  // Rows of any length, as the experiment switch WINRS_JAX_TAP_RUNS=2 runs them (runs shorter than their
  // steps of X alone), filters 3k + 1 wide cut evenly and (WINRS_JAX_TAP_BALANCED=0) 3 + 1.
  for (bool balanced : {true, false})
    for (int batch : {32, 64, 128})
      for (int filter_w : {2, 3, 4, 7})
        for (int out_w = 2; out_w <= 13; out_w += batch == 32 ? 2 : 1) {
          if (!balanced && filter_w % 3 != 1) continue;
          ++layers;
          Layer l{batch, 2, out_w, 3, filter_w, 1, filter_w / 2};
          l.rules.length_rule = false;
          l.rules.balanced = balanced;
          check(l);
        }
  // A batch of 32 on rows of an odd width: T-tap tiles on all columns but the last (tap_run_even_split), as
  // the paper's 2x2, 4x4, 6x6 and 8x8 layers (rows of 127, 63, 63 and 31) run.
  for (int filter_w : {2, 3, 4, 5, 6, 7, 8})
    for (int out_w : {17, 21, 63})
      for (int pad_left : {0, 1, filter_w - 1}) {
        ++layers;
        Layer l{32, 3, out_w, 3, filter_w, 1, pad_left};
        l.split = true;
        check(l);
      }
  // Boxes of 32 images at every batch, as the TF32 tiles take them (TapRunRules::max_images, kTf32Images):
  // two positions a step, rows of an odd width with the last column apart.
  for (int batch : {32, 64, 128})
    for (int filter_w : {2, 3, 4, 5, 7})
      for (int out_w : {16, 17, 21, 34})
        for (int pad_left : {0, 1, filter_w - 1}) {
          ++layers;
          Layer l{batch, 3, out_w, 3, filter_w, 1, pad_left};
          l.rules.max_images = 32;
          l.split = out_w % 2 == 1;
          check(l);
        }
  // Channel blocks (2 and 3 a side, the last partial) and filter rows without steps (a row of one under a
  // filter of three).
  for (int channels : {200, 256, 300})
    for (int out_h : {1, 2, 5}) {
      ++layers;
      Layer l{64, out_h, 20, 3, 3, 1, 1};
      l.channels = channels;
      check(l);
    }
  // Filters 3k + 1 wide cut evenly (4 = 2 + 2, 7 = 3 + 2 + 2, 10 = 3 + 3 + 2 + 2), and 3 + 1, 3 + 3 + 1 and
  // 3 + 3 + 3 + 1 (WINRS_JAX_TAP_BALANCED=0).
  for (bool balanced : {true, false})
    for (int batch : {32, 64, 128})
      for (int filter_w : {4, 7, 10})
        for (int out_w : {16, 20, 34})
          for (int pad_left : {0, 1, filter_w - 1}) {
            ++layers;
            Layer l{batch, 3, out_w, 3, filter_w, 1, pad_left};
            l.rules.balanced = balanced;
            check(l);
          }
  // A residual column of its own (kernel 1) wide enough for runs: 20 primary columns and 18 more.
  for (int batch : {32, 64}) {
    ++layers;
    check(Layer{batch, 2, 38, 3, 3, 1, 1, 20});
  }
  // The row-length rule (tap_run_steps_per_x_step): 7 steps per step of X alone, 8 for filters 3k + 1 wide
  // however cut.
  const auto fits = [](int batch, int width, int filter_w, bool balanced = true) {
    const Problem p{
        batch, 2, width, 128, 2, width, 128, 3, filter_w, 1, 1, filter_w / 2, filter_w - 1 - filter_w / 2};
    return winrs::tap_runs_fit(p, SegmentGrid{2, width, 1, 2, 1, width, 1, true, batch, 1}, 0, 3,
                               winrs::TapRunRules{true, balanced});
  };
  if (!fits(32, 14, 3) || !fits(128, 14, 3) || fits(128, 13, 3) || fits(32, 12, 3) || fits(64, 14, 7) ||
      !fits(64, 16, 7) || fits(64, 15, 4) || !fits(64, 14, 5) || fits(64, 14, 7, false) ||
      !fits(64, 16, 7, false)) {
    std::printf("FAILED: the row-length rule\n");
    ++failures;
  }
  // A layer that must not fit: a batch of 32 on rows of an odd width (but with the last column apart); nor
  // split: rows too short once split (13: 6 steps of 2, under the 7 steps of a 3-wide filter), and a filter
  // 3k + 1 wide cut 3 + 1 (4: measured slower so; cut 2 + 2 by default, split).
  // A row of one position splits into nothing (under WINRS_JAX_TAP_RUNS=2, no length rule): not at all.
  const Problem one{32, 2, 1, 128, 2, 1, 128, 3, 3, 1, 1, 1, 1};
  if (winrs::tap_run_even_split(one, SegmentGrid{2, 1, 1, 2, 1, 1, 1, true, 32, 1}, 3,
                                winrs::TapRunRules{false, true})
          .width0 != 1) {
    std::printf("FAILED: a row of one position split\n");
    ++failures;
  }
  const Problem odd{32, 2, 33, 128, 2, 33, 128, 3, 3, 1, 1, 1, 1},
      short_odd{32, 2, 13, 128, 2, 13, 128, 3, 3, 1, 1, 1, 1},
      four{32, 2, 33, 128, 2, 33, 128, 3, 4, 1, 1, 1, 2};
  const SegmentGrid odd_grid{2, 33, 1, 2, 1, 33, 1, true, 32, 1},
      short_grid{2, 13, 1, 2, 1, 13, 1, true, 32, 1};
  // At a batch of 32, filters 3k + 1 wide split rows of 17 (8 steps of two positions after the split), not
  // rows of 15 (7, under their rule's 8); 3 wide, rows of 15 (the choice's cache key restates this:
  // src/winrs_jax/choice.py, layer_key's odd_rows_split).
  struct SplitCase {
    int filter_w, out_w;
    bool splits;
  };
  for (const SplitCase& c : {SplitCase{4, 17, true}, SplitCase{7, 17, true}, SplitCase{4, 15, false},
                             SplitCase{7, 15, false}, SplitCase{3, 15, true}, SplitCase{2, 15, true}}) {
    const int filter_w = c.filter_w, out_w = c.out_w;
    const bool splits = c.splits;
    const Problem row{
        32, 2, out_w, 128, 2, out_w, 128, 3, filter_w, 1, 1, filter_w / 2, filter_w - 1 - filter_w / 2};
    const SegmentGrid row_grid{2, out_w, 1, 2, 1, out_w, 1, true, 32, 1};
    if ((winrs::tap_run_even_split(row, row_grid, winrs::tap_run_taps(filter_w)).width0 == out_w - 1) !=
        splits) {
      std::printf("FAILED: a batch of 32, filter %d wide, on rows of %d: split %d\n", filter_w, out_w,
                  !splits);
      ++failures;
    }
  }
  if (winrs::tap_runs_fit(odd, odd_grid, 0, 3) || winrs::tap_run_even_split(odd, odd_grid, 3).width0 != 32 ||
      winrs::tap_run_even_split(short_odd, short_grid, 3).width0 != 13 ||
      winrs::tap_run_even_split(four, odd_grid, 3).width0 != 32 ||
      winrs::tap_run_even_split(four, odd_grid, 3, winrs::TapRunRules{true, false}).width0 != 33) {
    std::printf("FAILED: a batch of 32 on rows of 33 positions fits, or its split\n");
    ++failures;
  }
  if (failures) {
    std::printf("%d failures\n", failures);
    return 1;
  }
  std::printf("%d layers checked\n", layers);
  return 0;
}
