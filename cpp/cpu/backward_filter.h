// CPU execution of a WinRS plan: the same segments, kernel pair, buckets and Kahan reduction as the GPU.
#pragma once

#include <cstdint>
#include <functional>

#include "winrs/problem.h"
#include "winrs/segments.h"

namespace winrs::cpu {

// Runs body(i) for every i in [0, count), possibly concurrently, and returns when all calls have finished.
using ParallelFor = std::function<void(int64_t count, const std::function<void(int64_t)>& body)>;

struct Buffers {
  const float* input;     // X, N x I_H x I_W x I_C
  const float* out_grad;  // dY, N x O_H x O_W x O_C
  float* filter_grad;     // dW, O_C x F_H x F_W x I_C (bucket 0)
  float* workspace;       // (Z - 1) buckets of |dW|
};

// Preconditions (checked by winrs::validate_plan): a consistent problem, variants and grid.
void backward_filter(const Problem& p, int variant0, int variant1, const SegmentGrid& grid, const Buffers& b,
                     const ParallelFor& parallel_for);

}  // namespace winrs::cpu
