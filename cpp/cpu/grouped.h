// CPU execution of the direct grouped filter gradient (winrs/grouped.h): the same tasks, splits, slot order
// and FP32 FMAs as the CUDA kernel, and the same Kahan sum of the splits.
#pragma once

#include "cpu/backward_filter.h"
#include "winrs/grouped.h"

namespace winrs::cpu {

struct GroupedBuffers {
  const void* input;     // X, N x H x W x C, in the path's storage type
  const void* out_grad;  // dY, N x OH x OW x K, in the path's storage type
  float* filter_grad;    // dW, K x FH x FW x C_g (split 0)
  float* workspace;      // splits 1.. of every stacked problem
};

void grouped_filter_grad(const GroupedOp& op, const GroupedBuffers& b, const ParallelFor& parallel_for);

}  // namespace winrs::cpu
