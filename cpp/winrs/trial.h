// Kernels and plans written without a device, off until they have passed kernel_check and the GPU tests on
// one and measured faster: WINRS_JAX_TRY lists the ones to run, comma-separated (read at each plan and
// launch, on the host). Names:
// - "taps-per-tap", "taps-wide": the filter-row tile on wgmma (cuda/wgmma_taps.cuh);
// - "tma": TMA staging of the 128 x 128 wgmma block (cuda/tma.cuh);
// - "grouped-pipeline": the grouped kernels' 16-bit tiles copied by cp.async while the previous one is summed
//   (cuda/grouped.cu);
// - "taps-partial", "taps-any-channels": the filter-row tile also for filter widths that are not multiples of
//   its 3 columns, and for any channel counts (variants.h, TapsRule): plans, on every device.
// The Python planner's plan cache and auto mode's decisions (winrs_jax.choice) are keyed by the list too.
#pragma once

#include <cstdlib>
#include <cstring>

#include "variants.h"

namespace winrs {

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

// The filter-row tile's reach under the trials.
inline TapsRule taps_rule() { return {trying("taps-partial"), trying("taps-any-channels")}; }

}  // namespace winrs
