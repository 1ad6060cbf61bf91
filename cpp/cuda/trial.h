// Kernels written without a device, off until they have passed kernel_check on one and measured faster:
// WINRS_JAX_TRY lists the ones to run, comma-separated. Names: "taps-per-tap" and "taps-wide" (the filter-row
// tile on wgmma, cuda/wgmma_taps.cuh), "tma" (TMA staging of the 128 x 128 wgmma block, cuda/tma.cuh),
// "grouped-pipeline" (the grouped kernels' 16-bit tiles copied by cp.async while the previous one is summed,
// cuda/grouped.cu). Read at each launch (host only; no device work).
#pragma once

#include <cstdlib>
#include <cstring>

namespace winrs::cuda {

inline bool trying(const char* name) {
  const char* list = std::getenv("WINRS_JAX_TRY");
  const size_t length = std::strlen(name);
  for (const char* p = list; p && *p;) {
    const char* end = std::strchr(p, ',');
    const size_t n = end ? size_t(end - p) : std::strlen(p);
    if (n == length && std::strncmp(p, name, n) == 0) return true;
    p = end ? end + 1 : nullptr;
  }
  return false;
}

}  // namespace winrs::cuda
