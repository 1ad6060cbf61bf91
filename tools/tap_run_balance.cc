// How evenly the T-tap tiles' grid (winrs/tap_runs.h, tap_run_grid) spreads a layer's work over the SMs, on
// the host: for each layer, the cut tap_run_grid picks for 132 SMs, its tiles, and the share of the busiest
// SM's steps (a tile's steps plus kTapRunOverheadSteps) that the average SM does ("balance": 1.0 when every
// SM has as many). Boxes of 64 images (16 bits) and of 32 (TF32, kTf32Images).
//
//   g++ -std=c++17 -O2 -Icpp tools/tap_run_balance.cc -o /tmp/tap_run_balance
//   python tools/suite_layers.py paper real | /tmp/tap_run_balance
//
// Input: one layer a line, "suite N OH OW CIN COUT FH FW PAD_TOP PAD_LEFT" (unstrided 2D, output size =
// input).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "winrs/tap_runs.h"
#include "winrs/tf32_layout.h"

int main() {
  using namespace winrs;
  constexpr int kSms = 132;
  char suite[32];
  int n, oh, ow, ci, co, fh, fw, pt, pl;
  while (std::scanf("%31s %d %d %d %d %d %d %d %d %d", suite, &n, &oh, &ow, &ci, &co, &fh, &fw, &pt, &pl) ==
         10) {
    for (int max_images : {kTapRunUnits, kTf32Images}) {
      const Problem p{n, oh, ow, ci, oh, ow, co, fh, fw, pt, fh - 1 - pt, pl, fw - 1 - pl};
      TapRunRules rules;
      rules.max_images = max_images;
      const int taps = tap_run_taps(fw);
      // The planner's one-tap cut (all rows in one band, columns of one position), split as the launch does.
      const SegmentGrid planned =
          tap_run_even_split(p, SegmentGrid{oh, ow, 1, oh, 1, ow, 1, true, n, 1}, taps, rules);
      std::printf("%-6s %dx%d %d:%dx%d:%d->%d boxes of %d: ", suite, fh, fw, n, oh, ow, ci, co, max_images);
      if (!tap_runs_fit(p, planned, 0, taps, rules)) {
        std::printf("not T-tap tiles\n");
        continue;
      }
      const SegmentGrid grid =
          tap_run_grid(p, planned, 0, taps, kSms, 128, 128, kTapRunOverheadSteps, max_images);
      const TileScheduler scheduler =
          make_scheduler(p, grid, 0, taps, 128, 128, 1, tap_run_balanced_cut(fw, taps, rules));
      std::vector<double> load(kSms, 0.0);
      double total = 0;
      for (long long index = 0; index < scheduler.count(); ++index) {  // block b walks tiles b, b + G, ...
        const WorkTile work = scheduler.tile(index);
        const UnitWalk walk = make_unit_walk(p, grid.segment(work.segment), work.fh, 1);
        const double steps = TapRunWalk(p, work, walk, taps, max_images).steps + kTapRunOverheadSteps;
        load[index % kSms] += steps;
        total += steps;
      }
      const double tiles_max = *std::max_element(load.begin(), load.end());
      std::printf("%lld tiles (bands of %d rows, columns of %d, %d image parts), balance %.2f\n",
                  scheduler.count(), grid.seg_h, grid.seg_w, grid.image_parts, total / (kSms * tiles_max));
    }
  }
  return 0;
}
