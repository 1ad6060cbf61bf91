// The WinRS planner (paper section 4): kernel pair (4.1), baseline segment count Z^ (Algorithm 1) and
// segment shape (Algorithm 2). Host-only; computed once per layer at trace time.
#pragma once

#include <cstdint>
#include <string>

#include "paths.h"
#include "problem.h"
#include "segments.h"
#include "variants.h"

namespace winrs {

// The planner's inputs besides the problem. They are also the FFI call's attributes: each handler derives the
// same deterministic plan from them and its buffer shapes, so the plan exists in one form only.
struct PlanOptions {
  Path path = Path::kFp32;  // arithmetic of the batched GEMM (paths.h)
  // The arithmetic XLA uses for the same dtype and precision (float32 HIGHEST: kFp32, DEFAULT on a GPU:
  // kTf32, bfloat16: kBf16, float16: kFp16). It sets the accuracy budget the kernels must meet (plan.cc).
  Path reference = Path::kFp32;
  int sm_count = 132;  // streaming multiprocessors of the target GPU (H100 SXM by default)
  int segments = 0;    // > 0 forces the baseline segment count Z^ (Algorithm 2 still shapes it)
  int buckets = 0;     // > 0 caps the bucket count B (segments.h; the workspace) in place of max_buckets
  int variant0 = -1;   // >= 0 forces the kernel pair (for tests and kernel tuning)
  int variant1 = -1;
  // Segments add into dW by atomic adds in any order (segments.h): no buckets and no workspace, but the
  // result's last bits vary between runs on the GPU. Excludes `buckets`.
  bool atomic = false;
  // Problems that share the GPU in one launch (a 3D layer's filter depth taps read in place): the
  // filter-window tile's segments fill its waves with all of them (plan.cc, window_segments).
  int problems = 1;
  // The target GPU's opt-in shared memory per block (smem.h): tiles whose kernels need more are not planned
  // (the problem carries it to the launch, operator.cc).
  int64_t smem_per_block = kHopperSmemPerBlock;
};

struct Plan {
  bool supported = false;
  std::string reason;  // why WinRS is not used, when !supported
  int variant0 = -1, variant1 = -1;
  SegmentGrid grid{};
  int64_t segments = 0;  // Z
  int64_t buckets = 0;   // B float32 partial sums of dW, the first dW itself; grid.chain() links per bucket
                         // (1 with atomic adds, grid.atomic)
  // The workspace, in 4-byte words: buckets 1..B-1, then a semaphore per bucket and work tile of each kernel
  // whose chains have more than one link (zero otherwise), which orders the links on the GPU.
  int64_t semaphores[2] = {0, 0};
  int64_t workspace_elems = 0;   // (B - 1) x |dW| + semaphores[0] + semaphores[1]
  double baseline_segments = 0;  // Z^ after Algorithm 1 (or the forced value)
  Path path = Path::kFp32;
  // The cost model's time: direct FLOPs of each kernel's columns over the variant's measured effective
  // throughput on the path (variants.h). Compares paths of equal accuracy; not a measurement.
  double predicted_seconds = 0;
};

// Kernel pair of section 4.1, or variant0 = -1 when the filter width has no divisor in 2..9.
struct KernelPair {
  int variant0 = -1, variant1 = -1;
  int64_t width0 = 0;  // k0 * r0: output-gradient columns run by kernel 0; the rest, k1 * r1, by kernel 1
};

// Issue 7's accuracy promise: the largest errors (variants.h, both protocols) a kernel may have when XLA
// would compute the same gradient with the `reference` arithmetic.
struct AccuracyBudget {
  double mare;          // the paper's protocol
  double signed_error;  // zero-mean inputs
  bool admits(const KernelShape& k) const { return k.mare <= mare && k.signed_error <= signed_error; }
};
AccuracyBudget accuracy_budget(Path reference);
// The budget's multiple of XLA's error: 4 at float32 HIGHEST (the FP32-accurate paths), 2 in the
// reduced-precision types.
inline double accuracy_factor(Path reference) { return fp32_accurate(reference) ? 4.0 : 2.0; }
// XLA's measured error on zero-mean inputs where it computes with the `reference` arithmetic (plan.cc).
double xla_signed_error(Path reference);
// Considers only variants whose errors on `path` the budget admits.
KernelPair choose_kernel_pair(int64_t filter_w, int64_t out_w, Path path, const AccuracyBudget& budget,
                              int64_t smem_per_block);
// The largest share k0 * r0 of out_w for variant0 such that variant1 covers the rest exactly; 0 if none.
int64_t primary_width(int variant0, int variant1, int64_t out_w);
double baseline_segment_count(const Problem& p, const KernelPair& pair, const PlanOptions& options);
// Workspace bound: at most this many buckets (the first is dW itself), see kWorkspaceShare in plan.cc. More
// segments than buckets form chains (segments.h).
int64_t max_buckets(const Problem& p, Path path);
// The plan of a problem, or plan.reason saying why WinRS cannot run it (an inconsistent problem, a filter
// width without a Winograd divisor, forced options that do not fit). Deterministic.
Plan make_plan(const Problem& p, const PlanOptions& options);
std::string validate_problem(const Problem& p);  // empty when the shape is consistent

}  // namespace winrs
