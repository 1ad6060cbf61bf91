// The shared-memory layouts of the TF32 T-tap tiles (cuda/wgmma_tf32_taps.cuh) and their producer's
// transpose, written once for the kernel, its probe (tools/tf32_wgmma_probe.cu) and the host check
// (tests/cpp/tf32_layout_check.cc, run by tests/test_tap_runs.py). A step is 64 units (winrs/tap_runs.h) of
// 128 channels a side, float32; the split-TF32 tiles' X side is 64 channels (kTf32SplitXChannels), its
// K-major buffers laid out and transposed by the same functions at that width.
#pragma once

#include <algorithm>

#include "config.h"

namespace winrs {

inline constexpr int kTf32StepUnits = 64, kTf32SideChannels = 128;
// The split-TF32 tiles' input channels (X, the K-major side): a high and a low K-major buffer of a
// 128-channel side would not fit three stages in shared memory beside the raw rings
// (cuda/wgmma_tf32_taps.cuh).
inline constexpr int kTf32SplitXChannels = 64;
inline constexpr int kTf32Images = 32;  // a step: two positions of 32 images (TapRunRules::max_images)
inline constexpr int kTf32SideElems = kTf32StepUnits * kTf32SideChannels;

// Element (unit k, channel c) of a raw buffer: panels of 32 channels by 64 units, the 16-byte piece of
// channels 4q .. 4q + 3 of unit k at piece q ^ (k % 8) (the TMA's 128-byte swizzle of 128-byte rows).
WINRS_HD constexpr int tf32_raw_index(int k, int c) {
  return c / 32 * kTf32StepUnits * 32 + k * 32 + ((c % 32 / 4) ^ (k % 8)) * 4 + c % 4;
}
// Element (channel n, unit k) of a K-major buffer of `channels` channels: atoms of 32 units by `channels`
// channels, each channel's row of 128 bytes, the piece of units 4q .. 4q + 3 at q ^ (n % 8) (wgmma's K-major
// 128-byte swizzle).
WINRS_HD constexpr int tf32_kmajor_index(int n, int k, int channels = kTf32SideChannels) {
  return k / 32 * channels * 32 + n * 32 + ((k % 32 / 4) ^ (n % 8)) * 4 + k % 4;
}

// Element r (of 4) of a consumer thread's TF32 register fragment (CUTLASS's ALayout_64x8) of k8 slice 0 in a
// raw buffer: channels row and row + 8 (row: its warp's first row + lane / 4), units lane % 4 and lane % 4 +
// 4; slice s is 256 floats further, with the same swizzle (the loads take immediate offsets).
WINRS_HD constexpr int tf32_fragment_offset(int row, int lane, int r) {
  return tf32_raw_index(lane % 4 + 4 * (r / 2), row + 8 * (r % 2));
}

// The producer's transpose (raw X into a K-major buffer) by kTf32TransposeThreads threads: 4 x 4 blocks of
// units x channels, each read by four 16-byte loads (a unit's four channels) and written by four 16-byte
// stores (a channel's four units), so that the block's transpose is the order of its registers. Thread
// `thread`'s block of iteration `it` (of tf32_transpose_its(channels)) has channel group cg (of channels / 4)
// and unit group ug (of 16), the eight lanes of a quarter warp (one pass of 16-byte accesses) on a diagonal
// (ug = cg + d modulo 8), so that neither side meets a bank conflict (tf32_transpose_faults). (Scalar loads
// and 16-byte stores by 128 threads ran about 12 instructions a value, on the producer's critical path:
// stall samples, thirty-eighth stop.)
inline constexpr int kTf32TransposeThreads = 64;
WINRS_HD constexpr int tf32_transpose_its(int channels) {
  return kTf32StepUnits / 4 * (channels / 4) / kTf32TransposeThreads;
}
inline constexpr int kTf32TransposeIts = tf32_transpose_its(kTf32SideChannels);
struct Tf32TransposeBlock {
  int cg, ug;
};
WINRS_HD constexpr Tf32TransposeBlock tf32_transpose_block(int thread, int it, int its = kTf32TransposeIts) {
  const int i = thread % 8, flat = thread / 8 * its + it, d = flat % 8;
  return {8 * (flat / 16) + i, 8 * (flat / 8 % 2) + (i + d) % 8};
}
// A block's load r (its unit 4 ug + r, channels 4 cg ..) and store e (its channel 4 cg + e, units 4 ug ..)
// from the first of each: the swizzles' XOR reaches the piece's low two bits alone (tf32_transpose_faults
// checks them against tf32_raw_index and tf32_kmajor_index).
WINRS_HD constexpr int tf32_block_raw(const Tf32TransposeBlock& b) {
  return tf32_raw_index(4 * b.ug, 4 * b.cg);
}
WINRS_HD constexpr int tf32_block_kmajor(const Tf32TransposeBlock& b, int channels = kTf32SideChannels) {
  return tf32_kmajor_index(4 * b.cg, 4 * b.ug, channels);
}
WINRS_HD constexpr int tf32_block_piece(int first, int r) { return (first ^ 4 * r) + 32 * r; }

// Host: the transpose's worst bank conflict (16-byte pieces of one bank group in one pass of eight lanes; 1
// when there is none) and the elements it does not move exactly once to their place, for a side of
// `channels` channels.
struct Tf32TransposeFaults {
  int worst_ways, missed;
};
inline Tf32TransposeFaults tf32_transpose_faults(int channels = kTf32SideChannels) {
  const int its = tf32_transpose_its(channels), elems = kTf32StepUnits * channels;
  if (channels % 32 != 0 || channels < 32 || channels > kTf32SideChannels) return {1, elems};  // no such side
  int worst = 1, read[kTf32SideElems] = {}, written[kTf32SideElems] = {}, misplaced = 0;
  for (int pass = 0; pass < kTf32TransposeThreads / 8; ++pass)
    for (int it = 0; it < its; ++it)
      for (int r = 0; r < 4; ++r) {
        int loads[8] = {}, stores[8] = {};  // per bank group (16 bytes of the 128 a pass covers)
        for (int lane = 8 * pass; lane < 8 * pass + 8; ++lane) {
          const Tf32TransposeBlock b = tf32_transpose_block(lane, it, its);
          const int load = tf32_block_piece(tf32_block_raw(b), r);
          const int store = tf32_block_piece(tf32_block_kmajor(b, channels), r);
          worst = std::max({worst, ++loads[load / 4 % 8], ++stores[store / 4 % 8]});
          for (int e = 0; e < 4; ++e) {  // value e of load r: unit 4 ug + r, channel 4 cg + e; store e's r-th
            const int stored = tf32_block_piece(tf32_block_kmajor(b, channels), e) + r;
            if (load + e >= elems || stored >= elems) return {worst, elems};
            ++read[load + e];
            ++written[stored];
            misplaced += load + e != tf32_raw_index(4 * b.ug + r, 4 * b.cg + e) ||
                         stored != tf32_kmajor_index(4 * b.cg + e, 4 * b.ug + r, channels);
          }
        }
      }
  int missed = misplaced;
  for (int e = 0; e < elems; ++e) missed += (read[e] != 1) + (written[e] != 1);
  return {worst, missed};
}

}  // namespace winrs
