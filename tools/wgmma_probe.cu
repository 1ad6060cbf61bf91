// Probe of two properties of wgmma's shared-memory descriptors that the 16-bit filter-row tile on Hopper
// (cuda/wgmma_taps.cuh) relies on, for an MN-major B operand in the 128- and 64-byte swizzled layouts:
//   shift:   a descriptor whose start moves by whole rows (one row per filter tap) reads the rows that were
//            written swizzled by their absolute address (the swizzle follows address bits, base offset 0);
//   overlap: N panels may overlap (LBO = one row: panel p is the rows shifted by p), so that one instruction
//            multiplies the taps' shifted copies of X.
// Each case prints its mismatches against the exact product; the exit status is the number of failed cases
// of the forms the kernel uses (base offset 0). Build and run on a Hopper GPU:
//   nvcc -std=c++17 -O2 "--generate-code=arch=compute_90a,code=[sm_90a]" tools/wgmma_probe.cu -o wgmma_probe
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>

namespace {

__device__ uint64_t descriptor(const void* p, uint32_t lbo, uint32_t sbo, uint32_t base_offset, int swizzle) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  const uint64_t mode = swizzle == 128 ? 1 : 2;
  return uint64_t((a & 0x3FFFF) >> 4) | uint64_t((lbo >> 4) & 0x3FFF) << 16 |
         uint64_t((sbo >> 4) & 0x3FFF) << 32 | uint64_t(base_offset & 7) << 49 | mode << 62;
}

#define D8(i)                                                                                 \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
// clang-format off
#define OPS16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define OPS32 OPS16 ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define OPS48 OPS32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
#define OPS96                                                                                         \
  OPS48                                                                                               \
      ",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70," \
      "%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
// clang-format on
#define TAIL(a, b) "}, %" #a ", %" #b ", 1, 1, 1, 1, 1;\n"

template <int N>
__device__ void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
  if constexpr (N == 32) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " OPS16 TAIL(16, 17)
                 : D8(0), D8(8)
                 : "l"(a), "l"(b));
  } else if constexpr (N == 64) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " OPS32 TAIL(32, 33)
                 : D8(0), D8(8), D8(16), D8(24)
                 : "l"(a), "l"(b));
  } else if constexpr (N == 96) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 " OPS48 TAIL(48, 49)
                 : D8(0), D8(8), D8(16), D8(24), D8(32), D8(40)
                 : "l"(a), "l"(b));
  } else {
    asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 " OPS96 TAIL(96, 97)
                 : D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56), D8(64), D8(72), D8(80),
                   D8(88)
                 : "l"(a), "l"(b));
  }
}

__host__ __device__ float a_value(int m, int k) { return float((m * 5 + k * 3) % 7 - 3); }
__host__ __device__ float x_value(int d, int n) { return float((d * 7 + n * 3) % 11 - 5); }

// D (64 x N) = A (64 x 16) B, B's panel p (of N / Panel) = X rows s + p .. s + p + 15 (overlap) or, with one
// panel, rows s .. s + 15. A is 128-byte swizzled at an aligned start; X rows are Panel elements wide,
// swizzled by `Swizzle` bytes.
template <int N, int Swizzle>
__global__ void probe(float* out, int s, int with_base_offset) {
  constexpr int Panel = Swizzle / 2;  // elements per row
  __shared__ __align__(1024) __nv_bfloat16 a_s[16 * 64];
  __shared__ __align__(1024) __nv_bfloat16 x_s[32 * Panel];
  const int tid = threadIdx.x;
  for (int e = tid; e < 16 * 64; e += 128) {
    const int k = e / 64, m = e % 64;
    a_s[k * 64 + ((m / 8) ^ (k % 8)) * 8 + m % 8] = __float2bfloat16(a_value(m, k));
  }
  for (int e = tid; e < 32 * Panel; e += 128) {
    const int d = e / Panel, n = e % Panel;
    const int phase = Swizzle == 128 ? d % 8 : (d >> 1) % 4;  // address bits 7.. of row d
    x_s[d * Panel + ((n / 8) ^ phase) * 8 + n % 8] = __float2bfloat16(x_value(d, n));
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const __nv_bfloat16* start = x_s + s * Panel;
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(start));
  const uint64_t da = descriptor(a_s, 2048, 1024, 0, 128);
  const uint64_t db =
      descriptor(start, Swizzle, 8 * Swizzle, with_base_offset ? (address >> 7) & 7 : 0, Swizzle);
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  mma<N>(d, da, db);
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  for (int j = 0; j < N / 8; ++j)
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 2; ++q) out[(16 * warp + g + 8 * h) * N + 8 * j + 2 * t + q] = d[4 * j + 2 * h + q];
}

template <int N, int Swizzle>
int run(const char* what, float* device, float* host) {
  constexpr int Panel = Swizzle / 2;
  int failed = 0;
  for (int with_base_offset = 0; with_base_offset < 2; ++with_base_offset) {
    std::printf("%-44s base offset %s:", what, with_base_offset ? "(addr >> 7) & 7" : "0              ");
    bool all = true;
    for (int s = 0; s < 9; ++s) {
      cudaMemset(device, 0, 64 * N * sizeof(float));
      probe<N, Swizzle><<<1, 128>>>(device, s, with_base_offset);
      if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
        std::printf(" s%d: %s\n", s, cudaGetErrorString(e));
        return 1 + failed;
      }
      cudaMemcpy(host, device, 64 * N * sizeof(float), cudaMemcpyDeviceToHost);
      int bad = 0;
      for (int m = 0; m < 64; ++m)
        for (int c = 0; c < N; ++c) {
          float want = 0;
          for (int k = 0; k < 16; ++k) want += a_value(m, k) * x_value(s + c / Panel + k, c % Panel);
          bad += host[m * N + c] != want;
        }
      std::printf(" s%d:%d", s, bad);
      all = all && bad == 0;
    }
    std::printf("  %s\n", all ? "ok" : "MISMATCH");
    failed += !all && !with_base_offset;
  }
  return failed;
}

}  // namespace

int main() {
  float* device = nullptr;
  static float host[64 * 192];
  cudaMalloc(&device, sizeof(host));
  int failed = 0;
  failed += run<64, 128>("128B swizzle, n64, start shifted s rows", device, host);
  failed += run<192, 128>("128B swizzle, n192, 3 panels overlapping", device, host);
  failed += run<32, 64>("64B swizzle, n32, start shifted s rows", device, host);
  failed += run<96, 64>("64B swizzle, n96, 3 panels overlapping", device, host);
  std::printf("%d failed forms (base offset 0)\n", failed);
  return failed;
}
