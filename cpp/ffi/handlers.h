// The XLA FFI handler symbols exported to Python (see module.cc).
#pragma once

#include "xla/ffi/api/c_api.h"

extern "C" XLA_FFI_Error* WinrsBackwardFilterCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsGroupedFilterGradCpu(XLA_FFI_CallFrame* call_frame);
#ifdef WINRS_WITH_CUDA
extern "C" XLA_FFI_Error* WinrsBackwardFilterCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsBackwardFilter3dCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* WinrsGroupedFilterGradCuda(XLA_FFI_CallFrame* call_frame);
#endif
