// Shared memory per thread block of the kernels that run on every architecture (mma.sync and FFMA, staged by
// registers or cp.async), for the planner: a GPU gives a block at most its opt-in limit (227 KiB on sm_90,
// 163 KiB on sm_80, 99 KiB on sm_86 and sm_89), and a plan may only choose tiles whose kernels fit the limit
// of the GPU it is made for (PlanOptions::smem_per_block). The CUDA configs (cuda/omega_config.cuh,
// cuda/direct_taps.cuh) assert that their shared memory is what these functions say. Hopper's own kernels
// (wgmma, TMA) run only on sm_90, where every tile fits.
#pragma once

#include <cstdint>

#include "paths.h"

namespace winrs {

inline constexpr int64_t kHopperSmemPerBlock = 227 * 1024;  // the reference H100's opt-in limit

// Bytes of one staged GEMM operand: 16-bit types stay 16-bit, TF32 and split TF32 stage FP32 words.
constexpr int64_t operand_bytes(Path p) {
  return path_info(p).operand == Operand::kBF16 || path_info(p).operand == Operand::kF16 ? 2 : 4;
}
// Elements of padding per staged row: 16 bytes (16-bit) or 32 bytes (FP32 words) on the tensor-core paths.
constexpr int64_t staging_pad(Path p) { return path_info(p).tensor_cores ? 8 : 0; }

// An Omega kernel of transform size alpha and block bn x bm (OmegaConfig): one stage holds alpha x K rows of
// dY (bn) and of X (bm), double buffered; the direct kernel's copy staging (copy = true) holds 3 steps of 4
// stages instead.
constexpr int64_t omega_smem_bytes(int64_t alpha, Path path, int64_t bn, int64_t bm, bool copy) {
  const int64_t rows = alpha * path_info(path).units_per_step;
  const int64_t stage = rows * (bn + staging_pad(path)) + rows * (bm + staging_pad(path));
  const int64_t gemm = 2 * stage * operand_bytes(path), copies = 3 * 4 * stage * operand_bytes(path);
  return copy && copies > gemm ? copies : gemm;
}

// The direct kernel's filter-row tile of `taps` filter columns on a block x block channel block at column
// stride `stride` (TapsConfig): 3 steps, each 4 K-blocks of dY rows and the X rows of each phase.
constexpr int64_t taps_smem_bytes(Path path, int64_t taps, int64_t block, int64_t stride) {
  const int64_t units = 4 * int64_t(path_info(path).units_per_step);
  const int64_t reach = (taps + stride - 1) / stride;
  const int64_t step =
      units * (block + staging_pad(path)) + stride * (units + reach - 1) * (block + staging_pad(path));
  return 3 * step * operand_bytes(path);
}

}  // namespace winrs
