// The XLA FFI handler symbols exported to Python (see module.cc).
#pragma once

#include "xla/ffi/api/c_api.h"

namespace winrs::ffi_glue {
// The backward-filter targets' names (winrs_jax/_ffi.py): their attributes change only with a new name. The
// targets from before the GPU's shared memory per block (PlanAttrsV2, launch.h) and before the strides
// (PlanAttrsV1) stay registered, so that exported programs that call them keep running.
inline constexpr char kTarget[] = "winrs_backward_filter_v3", kDepthTarget[] = "winrs_backward_filter_3d_v3";
inline constexpr char kTargetV2[] = "winrs_backward_filter_v2",
                      kDepthTargetV2[] = "winrs_backward_filter_3d_v2";
inline constexpr char kTargetV1[] = "winrs_backward_filter", kDepthTargetV1[] = "winrs_backward_filter_3d";
}  // namespace winrs::ffi_glue

extern "C" XLA_FFI_Error* WinrsBackwardFilterCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilterV2Cpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dV2Cpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilterV1Cpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dV1Cpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsGroupedFilterGradCpu(XLA_FFI_CallFrame* call_frame);
#ifdef WINRS_WITH_CUDA
extern "C" XLA_FFI_Error* WinrsBackwardFilterCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilterV2Cuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dV2Cuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilterV1Cuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dV1Cuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsGroupedFilterGradCuda(XLA_FFI_CallFrame* call_frame);
// Launches of Hopper's TF32 tiles in this process (cuda/wgmma_tf32_taps.cuh): the GPU tests tell them from
// the direct kernel on mma.sync, which gives the same sums.
long long WinrsTf32TileLaunches();
// Launches of the persistent block, either form (cuda/wgmma_persistent.cuh): the GPU tests of stacked
// problems launched one at a time count them.
long long WinrsPersistentLaunches();
#endif
