// Deterministic bucket reduction (paper section 3, phase 3, and section 5.2): dW = sum over the Z buckets,
// in bucket order, with FP32 Kahan compensation. Bucket 0 is dW itself; buckets 1..Z-1 are the workspace.
#pragma once

#include <cstdint>

#include "config.h"

namespace winrs {

WINRS_HD inline float kahan_bucket_sum(const float* dw, const float* workspace, int64_t bucket_elems,
                                       int64_t buckets, int64_t element) {
  float sum = dw[element], compensation = 0.0f;
  for (int64_t b = 1; b < buckets; ++b) {
    const float y = workspace[(b - 1) * bucket_elems + element] - compensation;
    const float t = sum + y;
    compensation = (t - sum) - y;
    sum = t;
  }
  return sum;
}

// Many partial sums (the splits of the direct grouped kernels, up to thousands) are added by `lanes` threads
// each: lane l adds partials l, l + lanes, ... with Kahan compensation, then the lanes' (sum, error) pairs
// merge in a fixed tree (offsets lanes/2, ..., 1) by TwoSum, which loses nothing. The CPU walks the same
// lanes and tree, so both give the same float. lanes is 1 for a few partials, 32 (a warp) for many.
struct Compensated {
  float sum = 0.0f, error = 0.0f;  // the exact total is about sum + error

  WINRS_HD void add(float v) {
    const float y = v + error, t = sum + y;
    error = y - (t - sum);
    sum = t;
  }
  WINRS_HD float value() const { return sum + error; }
};

WINRS_HD inline Compensated merge(const Compensated& a, const Compensated& b) {
  const float s = a.sum + b.sum, z = s - a.sum;
  const float lost = (a.sum - (s - z)) + (b.sum - z);
  return {s, a.error + b.error + lost};
}

WINRS_HD constexpr int split_sum_lanes(int64_t partials) { return partials > 64 ? 32 : 1; }

// Lane `lane`'s share of partial(0), partial(1), ... partial(count - 1).
template <typename Partial>
WINRS_HD Compensated lane_sum(const Partial& partial, int64_t count, int lane, int lanes) {
  Compensated c;
  for (int64_t s = lane; s < count; s += lanes) c.add(partial(s));
  return c;
}

}  // namespace winrs
