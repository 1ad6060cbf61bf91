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

}  // namespace winrs
