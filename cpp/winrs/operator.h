// The backward-filter operator of one call, in the habit of CUTLASS's device operators: built from the buffer
// shapes and the planner's inputs, it says whether it can run (the reason when not), how much workspace it
// needs, and holds the one plan that the CPU executor and the CUDA launcher run. The nanobind planner and
// both FFI handlers build it the same way, so Python and the handlers cannot disagree about a plan.
#pragma once

#include <cstdint>
#include <string>

#include "plan.h"
#include "problem.h"

namespace winrs {

struct BackwardFilterOp {
  Problem problem;
  Plan plan;
  // Independent problems of the same shape stacked on leading axes (vmap): each has its own dW and
  // (buckets - 1) x |dW| of workspace, laid out one after the other. An input shared by every problem
  // (leading axes of size 1) has a group stride of 0.
  int64_t groups = 1;
  int64_t input_group_stride = 0, grad_group_stride = 0;  // elements between the problems' X and dY
  // A 3D layer read in place: the problems are its filter depth taps, X and dY shared (strides 0).
  DepthView depth;

  int64_t workspace_elems() const { return groups * plan.workspace_elems; }
};

struct Shapes {
  int64_t input[4];             // N x I_H x I_W x I_C
  int64_t out_grad[4];          // N x O_H x O_W x O_C
  int64_t filter_grad[4];       // O_C x F_H x F_W x I_C
  int64_t pads[4];              // top, bottom, left, right
  int64_t strides[2] = {1, 1};  // rows, columns (problem.h: the filter-row tile only)
  int64_t groups = 1;
  bool input_shared = false, grad_shared = false;  // one X (dY) for every stacked problem
};

// can_implement and initialise in one: fills `op` and returns "" when WinRS can run the problem, else the
// reason (inconsistent shapes, sizes out of range, or what the planner could not plan).
std::string make_backward_filter(const Shapes& shapes, const PlanOptions& options, BackwardFilterOp* op);

// Whether the plan's kernels can read a 3D layer's X in place (DepthView) instead of depth-shifted copies:
// the direct kernel's filter-row and filter-window tiles on tensor cores (cuda/direct_taps.cuh's stager and
// the window's TMA maps address X by depth slice; the CPU executor too), with no residual-column kernel.
bool reads_depth_in_place(const Problem& p, const Plan& plan);

}  // namespace winrs
