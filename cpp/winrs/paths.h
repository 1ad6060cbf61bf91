// The arithmetic paths of the alpha-batched GEMM (issue 7; paper section 5): what the activations and output
// gradients are stored in, and how the transformed tiles are multiplied. Transforms always run in FP32
// registers and accumulators are always FP32; a path only says how the GEMM operands are rounded and which
// unit multiplies them. This table drives the planner, the CPU executor (which rounds operands the same way)
// and the CUDA kernel template, whose GEMM policy is chosen by the path at compile time.
#pragma once

namespace winrs {

enum class Path : int {
  kFp32 = 0,    // float32 I/O, float32 operands on CUDA cores (FFMA)
  kTf32x3 = 1,  // float32 I/O, each operand split into TF32 high + TF32 remainder, 3 tensor-core MMAs
                // (CUTLASS's 3xTF32): FP32-level accuracy
  kTf32 = 2,    // float32 I/O, operands rounded to TF32 (10-bit mantissa), tensor cores
  kBf16 = 3,    // bfloat16 I/O and operands, tensor cores
  kFp16 = 4,    // float16 I/O and operands, tensor cores
};
inline constexpr int kNumPaths = 5;

enum class Storage : int { kF32, kBF16, kF16 };  // element type of X and dY in memory
enum class Operand : int { kF32, kTF32, kTF32Split, kBF16, kF16 };

struct PathInfo {
  const char* name;
  Storage storage;
  Operand operand;
  bool tensor_cores;
  // Units (K of the batched GEMM) staged in shared memory per main-loop step: 8 for FP32 and TF32
  // (mma m16n8k8), 16 for the 16-bit types (mma m16n8k16).
  int units_per_step;
};

inline constexpr PathInfo kPaths[kNumPaths] = {
    {"fp32", Storage::kF32, Operand::kF32, false, 8}, {"tf32x3", Storage::kF32, Operand::kTF32Split, true, 8},
    {"tf32", Storage::kF32, Operand::kTF32, true, 8}, {"bf16", Storage::kBF16, Operand::kBF16, true, 16},
    {"fp16", Storage::kF16, Operand::kF16, true, 16},
};

constexpr const PathInfo& path_info(Path p) { return kPaths[static_cast<int>(p)]; }
// Bytes of one X or dY element in memory.
constexpr int storage_bytes(Path p) { return path_info(p).storage == Storage::kF32 ? 4 : 2; }
// The dtype name of the storage, as numpy spells it.
constexpr const char* storage_name(Storage s) {
  return s == Storage::kF32 ? "float32" : s == Storage::kBF16 ? "bfloat16" : "float16";
}
constexpr bool valid_path(int p) { return p >= 0 && p < kNumPaths; }
// Whether a path's products are FP32-accurate (FP32 FMA, or split TF32's three products).
constexpr bool fp32_accurate(Path p) {
  return path_info(p).operand == Operand::kF32 || path_info(p).operand == Operand::kTF32Split;
}

}  // namespace winrs
