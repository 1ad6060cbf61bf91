// The shared-memory layouts of the TF32 T-tap tiles (cuda/wgmma_tf32_taps.cuh, a draft) and their producer's
// transpose, written once for the kernel, its probe (tools/tf32_wgmma_probe.cu) and the host check
// (tests/cpp/tf32_layout_check.cc, run by tests/test_tap_runs.py). A step is 64 units (winrs/tap_runs.h) of
// 128 channels a side, float32.
#pragma once

#include "config.h"

namespace winrs {

inline constexpr int kTf32StepUnits = 64, kTf32SideChannels = 128;
inline constexpr int kTf32Images = 32;  // a step: two positions of 32 images (TapRunRules::max_images)
inline constexpr int kTf32SideElems = kTf32StepUnits * kTf32SideChannels;

// Element (unit k, channel c) of a raw buffer: panels of 32 channels by 64 units, the 16-byte piece of
// channels 4q .. 4q + 3 of unit k at piece q ^ (k % 8) (the TMA's 128-byte swizzle of 128-byte rows).
WINRS_HD constexpr int tf32_raw_index(int k, int c) {
  return c / 32 * kTf32StepUnits * 32 + k * 32 + ((c % 32 / 4) ^ (k % 8)) * 4 + c % 4;
}
// Element (channel n, unit k) of a K-major buffer: atoms of 32 units by 128 channels, each channel's row of
// 128 bytes, the piece of units 4q .. 4q + 3 at q ^ (n % 8) (wgmma's K-major 128-byte swizzle).
WINRS_HD constexpr int tf32_kmajor_index(int n, int k) {
  return k / 32 * kTf32SideChannels * 32 + n * 32 + ((k % 32 / 4) ^ (n % 8)) * 4 + k % 4;
}

// Element r (of 4) of a consumer thread's TF32 register fragment (CUTLASS's ALayout_64x8) of k8 slice 0 in a
// raw buffer: channels row and row + 8 (row: its warp's first row + lane / 4), units lane % 4 and lane % 4 +
// 4; slice s is 256 floats further, with the same swizzle (the loads take immediate offsets).
WINRS_HD constexpr int tf32_fragment_offset(int row, int lane, int r) {
  return tf32_raw_index(lane % 4 + 4 * (r / 2), row + 8 * (r % 2));
}

// The producer's transpose (raw X into a K-major buffer) by 128 threads: 4 x 4 blocks of units x channels,
// each read by sixteen 4-byte loads and written by four 16-byte stores. Thread `thread`'s block of iteration
// `it` (of 4) has channel group cg (of 32) and unit group ug (of 16), the eight lanes of a quarter warp on a
// diagonal (ug = cg + d modulo 8); its `step`-th channel (of 4) starts at the quarter's own. So neither side
// meets a bank conflict (tf32_transpose_faults).
struct Tf32TransposeBlock {
  int cg, ug;
};
WINRS_HD constexpr Tf32TransposeBlock tf32_transpose_block(int thread, int it) {
  const int i = thread % 8, flat = thread / 8 * 4 + it, d = flat % 8;
  return {8 * (flat / 16) + i, 8 * (flat / 8 % 2) + (i + d) % 8};
}
WINRS_HD constexpr int tf32_transpose_channel(int thread, int step) { return (step + thread % 32 / 8) % 4; }

// Host: the transpose's worst bank conflict (words of one bank in one pass: 32 lanes for the 4-byte loads, 8
// for the 16-byte stores; 1 when there is none) and the raw elements it does not read exactly once.
struct Tf32TransposeFaults {
  int worst_ways, missed;
};
inline Tf32TransposeFaults tf32_transpose_faults() {
  int worst = 1, seen[kTf32SideElems] = {};
  for (int warp = 0; warp < 4; ++warp)
    for (int it = 0; it < 4; ++it)
      for (int step = 0; step < 4; ++step) {
        for (int r = 0; r < 4; ++r) {
          int words[32][32] = {}, count[32] = {};  // per bank, the distinct words a pass reads
          for (int lane = 0; lane < 32; ++lane) {
            const int thread = 32 * warp + lane, e = tf32_transpose_channel(thread, step);
            const Tf32TransposeBlock b = tf32_transpose_block(thread, it);
            const int word = tf32_raw_index(4 * b.ug + r, 4 * b.cg + e), bank = word % 32;
            ++seen[word];
            bool again = false;
            for (int c = 0; c < count[bank]; ++c) again |= words[bank][c] == word;
            if (!again) words[bank][count[bank]++] = word;
            worst = count[bank] > worst ? count[bank] : worst;
          }
        }
        for (int pass = 0; pass < 4; ++pass) {
          int count[32] = {};
          for (int lane = 8 * pass; lane < 8 * pass + 8; ++lane) {
            const int thread = 32 * warp + lane, e = tf32_transpose_channel(thread, step);
            const Tf32TransposeBlock b = tf32_transpose_block(thread, it);
            const int word = tf32_kmajor_index(4 * b.cg + e, 4 * b.ug);
            for (int w = word; w < word + 4; ++w) worst = ++count[w % 32] > worst ? count[w % 32] : worst;
          }
        }
      }
  int missed = 0;
  for (int v : seen) missed += v != 1;
  return {worst, missed};
}

}  // namespace winrs
