// Rounding of FP32 values to the GEMM operand types, written once for the host (the CPU executor emulates the
// tensor-core paths with it) and matching the device conversions the kernels use:
//   TF32, BF16 and FP16: nearest, ties to even (TF32: cvt.rn.tf32.f32 on sm_90, cuda/device.cuh, tf32_bits).
// The rounded value is returned as a float; a product of two rounded operands is exact in FP32 for all three
// types (at most 11 x 11 significant bits), so the CPU's FP32 FMA reproduces the tensor cores' products and
// only the order of the FP32 accumulation differs.
#pragma once

#include <cstdint>
#include <cstring>

#include "config.h"
#include "paths.h"

namespace winrs {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

WINRS_HD constexpr bool is_finite_bits(uint32_t u) { return (u & 0x7f800000u) != 0x7f800000u; }

// The TF32 value of an FP32 value's bits, as FP32 bits: infinities and NaNs kept, else just under half of the
// 13 dropped bits plus the kept last bit added, so that the magnitude rounds to nearest, ties to the even
// neighbour. The CPU executor's rounding and the kernels' before sm_90 (cuda/device.cuh, tf32_bits).
WINRS_HD constexpr uint32_t tf32_rounded_bits(uint32_t u) {
  return is_finite_bits(u) ? (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u : u;
}

inline float round_tf32(float f) { return bits_float(tf32_rounded_bits(float_bits(f))); }

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline float round_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// IEEE binary16, nearest-even, with subnormals, overflow to infinity and NaN kept.
inline uint16_t float_to_f16_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (abs >= 0x38800000u) {                                 // normal half (>= 2^-14)
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal half: value = m x 2^-24, m = round(abs_value x 2^24).
  const uint32_t exponent = abs >> 23;
  if (exponent < 102) return sign;  // below half of the smallest subnormal (2^-25)
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 24-bit mantissa x 2^(e-150) -> units of 2^-24
  uint32_t m = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u))) ++m;
  return uint16_t(sign | m);
}

inline float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  float value = float(mantissa) * (1.0f / 16777216.0f);  // subnormal: m x 2^-24, exact
  return sign ? -value : value;
}

inline float round_f16(float f) { return f16_bits_to_float(float_to_f16_bits(f)); }

// One element of X or dY stored as S, as a float (exact): the CPU executors' reads.
template <Storage S>
float load_storage(const void* base, int64_t index) {
  if constexpr (S == Storage::kF32) {
    return static_cast<const float*>(base)[index];
  } else {
    uint16_t bits;
    std::memcpy(&bits, static_cast<const char*>(base) + 2 * index, 2);
    return S == Storage::kBF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
  }
}

// The operand a path feeds the tensor cores (or the FFMA), for one transformed value.
inline float round_operand(Operand op, float f) {
  switch (op) {
    case Operand::kTF32:
      return round_tf32(f);
    case Operand::kBF16:
      return round_bf16(f);
    case Operand::kF16:
      return round_f16(f);
    default:  // kF32, and kTF32Split whose two parts are made by split_tf32
      return f;
  }
}

// 3xTF32: f ~ high + low with both parts TF32; the products high*high + high*low + low*high keep about 21
// significant bits, FP32-level accuracy (the low*low term is below FP32's rounding and is dropped).
struct SplitTf32 {
  float high, low;
};
inline SplitTf32 split_tf32(float f) {
  const float high = round_tf32(f);
  return {high, round_tf32(f - high)};
}

}  // namespace winrs
