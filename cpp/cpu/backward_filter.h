// CPU execution of a WinRS plan: the same segments, work tiles, kernel pair, buckets and Kahan reduction as
// the GPU, and the same operand rounding as the GPU's arithmetic path (winrs/numeric.h), so the CPU handler
// is the reference for every path and CI tests the index math and rounding of all of them.
#pragma once

#include <cstdint>
#include <functional>

#include "winrs/operator.h"

namespace winrs::cpu {

// Runs body(i) for every i in [0, count), possibly concurrently, and returns when all calls have finished.
// body must not throw.
using ParallelFor = std::function<void(int64_t count, const std::function<void(int64_t)>& body)>;

struct Buffers {
  const void* input;     // X, N x I_H x I_W x I_C, in the path's storage type
  const void* out_grad;  // dY, N x O_H x O_W x O_C, in the path's storage type
  float* filter_grad;    // dW, O_C x F_H x F_W x I_C (bucket 0)
  float* workspace;      // (buckets - 1) x |dW|
};

// Every stacked problem of the operator, one after the other.
void backward_filter(const BackwardFilterOp& op, const Buffers& b, const ParallelFor& parallel_for);

}  // namespace winrs::cpu
