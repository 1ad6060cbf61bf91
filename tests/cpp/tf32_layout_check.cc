// Host check of the TF32 T-tap tiles' shared-memory layouts (cpp/winrs/tf32_layout.h; run by
// tests/test_tap_runs.py), for sides of 128 channels and the split-TF32 tiles' X side of 64: the raw and
// K-major indices are bijections of a step's elements, in 16-byte pieces that stay whole; a k8 slice of the
// raw buffer is 256 floats further with the same swizzle (the consumers' fragment loads take immediate
// offsets); the producer's transpose reads every element once without bank conflicts; every tap's K-block of
// X (tap_x_place) starts on a whole k8 slice of one K-major atom, at a 32-byte offset the wgmma descriptor
// can address; and a K-major part (the split tiles' low part follows the high one) keeps 1024-byte alignment.
// Prints what failed and exits 1, or "ok".
#include <cstdio>
#include <vector>

#include "winrs/tap_runs.h"
#include "winrs/tf32_layout.h"

namespace {

int failures = 0;

void expect(bool ok, const char* what, int a = 0, int b = 0) {
  if (!ok && ++failures <= 20) std::printf("FAILED %s (%d, %d)\n", what, a, b);
}

}  // namespace

int main() {
  using namespace winrs;
  for (const int channels : {kTf32SideChannels, kTf32SplitXChannels}) {  // TF32's sides, split TF32's X side
    const int elems = kTf32StepUnits * channels;
    std::vector<int> raw(elems), kmajor(elems);
    for (int k = 0; k < kTf32StepUnits; ++k)
      for (int c = 0; c < channels; ++c) {
        const int r = tf32_raw_index(k, c), m = tf32_kmajor_index(c, k, channels);
        expect(r >= 0 && r < elems, "raw index in range", k, c);
        expect(m >= 0 && m < elems, "K-major index in range", c, k);
        if (r >= 0 && r < elems) ++raw[r];
        if (m >= 0 && m < elems) ++kmajor[m];
        // Four consecutive channels (raw) or units (K-major) from a multiple of 4 are one 16-byte piece.
        expect(r % 4 == c % 4 && (c % 4 != 0 || tf32_raw_index(k, c + 3) == r + 3), "raw piece whole", k, c);
        expect(m % 4 == k % 4 && (k % 4 != 0 || tf32_kmajor_index(c, k + 3, channels) == m + 3),
               "K-major piece whole", c, k);
        if (k + 8 < kTf32StepUnits)
          expect(tf32_raw_index(k + 8, c) == r + 256, "a k8 slice 256 floats on, same swizzle", k, c);
      }
    for (int e = 0; e < elems; ++e) {
      expect(raw[e] == 1, "raw index a bijection", e, raw[e]);
      expect(kmajor[e] == 1, "K-major index a bijection", e, kmajor[e]);
    }
    const Tf32TransposeFaults faults = tf32_transpose_faults(channels);
    expect(faults.worst_ways == 1, "transpose without bank conflicts", faults.worst_ways, channels);
    expect(faults.missed == 0, "transpose reads every element once", faults.missed, channels);
    expect(4 * elems % 1024 == 0, "a K-major part keeps the 1024-byte swizzle alignment", elems, channels);
    for (int taps = 2; taps <= 3; ++taps)
      for (int positions = 1; positions <= 2; ++positions)
        for (int sub = 0; sub < kTapRunUnits / kTapRunBlock; ++sub)
          for (int j = 0; j < taps; ++j)
            for (int half = 0; half < 2; ++half) {
              const TapXPlace x = tap_x_place(taps, positions, sub, j);
              const int row = x.row + 8 * half, bytes = 4 * tf32_kmajor_index(0, row, channels);
              expect(row % 8 == 0 && row + 8 <= kTf32StepUnits, "a whole k8 slice of the step", row, j);
              expect(row % 32 + 8 <= 32, "inside one K-major atom", row, j);
              expect(bytes % 32 == 0, "a 32-byte descriptor offset", bytes, j);
            }
  }
  expect(tf32_transpose_faults(48).missed != 0 && tf32_transpose_faults(256).missed != 0,
         "sides other than whole 32-channel panels up to 128 are refused");
  if (failures) return 1;
  std::printf("ok\n");
  return 0;
}
