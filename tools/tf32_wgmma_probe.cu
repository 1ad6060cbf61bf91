// Probe of a TF32 three-tap tile on Hopper's warpgroup MMA, the float32 DEFAULT path's candidate (issue 7).
//
// TF32 wgmma reads shared-memory operands K-major only, and X and dY are channel-major (wgmma.cuh), so the
// 16-bit persistent block's form does not carry over. The form probed here: dY's fragments (A, 64 output
// channels a warpgroup) in registers, loaded by each consumer thread from the raw channel-major buffer (as
// the TMA writes it, 128-byte swizzle) once per step and used by all three taps; X (B, 128 input channels)
// K-major in shared memory, transposed (and rounded to TF32) once per buffer by the producer warpgroup's 128
// threads; tap j reads the buffer j steps back (the 16-bit tile's shift by whole steps).
//   check: one m64n128 product over K = 64 (two 32-unit swizzle atoms) against the exact integer product:
//          the register fragment layout (CUTLASS's ALayout_64x8), the producer's transpose, the K-major
//          descriptor and its k8 slices.
//   rate:  a block per SM, 64-unit steps of 3 taps x 8 slices of m64n128k8 per consumer warpgroup from
//          buffers that stay in shared memory (no global traffic): mode 0 A fixed in registers (the MMAs'
//          ceiling), 1 A loaded from the raw buffer each step, 2 also the producer's transpose of a 64 x 128
//          X buffer each step, with a barrier of all three warpgroups per step.
// The exit status counts the mismatches and the transpose's bank conflicts (checked on the host first, so
// that a machine without a GPU runs that part). Build and run on a Hopper GPU:
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -Icpp "--generate-code=arch=compute_90a,code=[sm_90a]"
//     tools/tf32_wgmma_probe.cu -o probe
// The layouts, the transpose and the MMA are the TF32 tiles' own (cpp/cuda/wgmma_tf32_taps.cuh).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/wgmma_tf32_taps.cuh"

namespace {

using namespace winrs;
using namespace winrs::cuda;

constexpr int kUnits = 64;                    // K of a step
constexpr int kOut = 128;                     // output channels of a block (A rows, two warpgroups of 64)
constexpr int kIn = 128;                      // input channels of a block (N)
constexpr int kTaps = 3;                      // filter columns per tile
constexpr int kStepBytes = kUnits * kIn * 4;  // one X or dY buffer, 32 KB

// A's fragment of k8 slice `slice` for thread (warp, lane) of a warpgroup whose rows start at `row0`: rows
// 16 warp + lane / 4 (+ 8), units 8 slice + lane % 4 (+ 4) (CUTLASS's ALayout_64x8), from the raw
// buffer's offsets of slice 0 for this thread: a slice further is 8 rows (256 floats) on, and
// the swizzle, which depends on the row modulo 8, is the same, so the loads take immediate offsets and the
// compiler keeps no address per slice in registers.
struct FragmentOffsets {
  int o[4];
  __device__ FragmentOffsets(int row0, int warp, int lane) {
#pragma unroll
    for (int r = 0; r < 4; ++r) o[r] = tf32_fragment_offset(row0 + 16 * warp + lane / 4, lane, r);
  }
};
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const float* raw, const FragmentOffsets& f,
                                       int slice) {
#pragma unroll
  for (int r = 0; r < 4; ++r) a[r] = tf32_bits(raw[f.o[r] + 256 * slice]);
}

// Host: the transpose's bank conflicts and coverage (winrs/tf32_layout.h); 0 when it is conflict-free and
// reads every element once.
int transpose_faults() {
  const winrs::Tf32TransposeFaults f = winrs::tf32_transpose_faults();
  std::printf("{\"probe\": \"transpose banks\", \"worst ways\": %d, \"elements not once\": %d}\n",
              f.worst_ways, f.missed);
  return (f.worst_ways - 1) + f.missed;
}

__global__ void check_kernel(const float* a_km, const float* b_nk, float* d_mn) {
  extern __shared__ float4 dynamic[];
  char* base = reinterpret_cast<char*>(dynamic);
  base += (1024 - shared_address(base) % 1024) % 1024;
  float* raw = reinterpret_cast<float*>(base);  // A: 64 units x 64 channels, raw, 16 KB
  float* raw_b = raw + 64 * 64;                 // B: 64 units x 128 channels, raw, 32 KB
  float* kmajor = raw_b + kUnits * kIn;         // B transposed: 128 channels x 64 units, 32 KB
  for (int e = threadIdx.x; e < 64 * 64; e += blockDim.x) raw[tf32_raw_index(e / 64, e % 64)] = a_km[e];
  for (int e = threadIdx.x; e < 128 * 64; e += blockDim.x) raw_b[tf32_raw_index(e % 64, e / 64)] = b_nk[e];
  __syncthreads();
  if (threadIdx.x < winrs::kTf32TransposeThreads)
    tf32_transpose<winrs::kTf32SideChannels, false>(raw_b, kmajor, threadIdx.x);  // as the kernel
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float d[64] = {};
  uint32_t a[8][4];
  const FragmentOffsets offsets(0, warp, lane);
  for (int s = 0; s < 8; ++s) load_a(a[s], raw, offsets, s);
  wgmma_fence();
  for (int s = 0; s < 8; ++s)
    wgmma_tf32_rs<128>(d, a[s], tf32_kmajor_descriptor(kmajor + tf32_kmajor_index(0, 8 * s)));
  wgmma_commit();
  wgmma_wait<0>();
  for (int j = 0; j < 16; ++j)
    for (int v = 0; v < 4; ++v) {
      const int m = 16 * warp + lane / 4 + 8 * (v / 2), n = 8 * j + 2 * (lane % 4) + v % 2;
      d_mn[m * 128 + n] = d[4 * j + v];
    }
}

// Shared memory of the rate kernel: four K-major X buffers (taps read the current one and the two before,
// the producer writes the fourth), two raw dY buffers, one raw X buffer the producer reads.
constexpr int kXBuffers = 4, kGradBuffers = 2;
constexpr int kRateSmem = (kXBuffers + kGradBuffers + 1) * kStepBytes + 1024;

__global__ void __launch_bounds__(384, 1) rate_kernel(int steps, int mode, float* sink) {
  extern __shared__ float4 dynamic[];
  char* base = reinterpret_cast<char*>(dynamic);
  base += (1024 - shared_address(base) % 1024) % 1024;
  float* xs = reinterpret_cast<float*>(base);
  float* grads = xs + kXBuffers * kUnits * kIn;
  float* raw_x = grads + kGradBuffers * kUnits * kOut;
  for (int e = threadIdx.x; e < (kXBuffers + kGradBuffers + 1) * kUnits * kIn; e += blockDim.x)
    xs[e] = float((uint32_t(e) * 2654435761u) >> 8) * 0x1p-24f;  // [0, 1), full mantissas
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  if (threadIdx.x < 128) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (mode < 2) return;
    // (Without a release: the buffer written here may still be read by the MMAs of the step before the last,
    // which a kernel's empty barrier would wait for; the values do not matter to the rate.)
    for (int step = 0; step < steps; ++step) {
      if (threadIdx.x < winrs::kTf32TransposeThreads)  // the kernel's two transposer warps
        tf32_transpose<winrs::kTf32SideChannels, false>(raw_x, xs + (step + 1) % kXBuffers * kUnits * kIn,
                                                        threadIdx.x);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("bar.sync 1, 384;\n" ::: "memory");
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  const int tid = threadIdx.x - 128, group = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
  float acc[kTaps][64];
#pragma unroll
  for (int j = 0; j < kTaps; ++j)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[j][i] = 0.0f;
  // A's registers in two sets of two slices: a step is four groups of 3 taps x 2 slices, and a set is loaded
  // again once the group two before, which read it, is done (wait<1>).
  const FragmentOffsets offsets(64 * group, warp, lane);
  uint32_t a[2][2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < 2; ++q) load_a(a[h][q], grads, offsets, 2 * h + q);
  // Descriptors as X's first buffer's plus a byte offset (in the start address field): no 64-bit address
  // arithmetic per MMA for the compiler to hoist out of the loop into registers.
  const uint64_t x_descriptor = tf32_kmajor_descriptor(xs);
#pragma unroll 1
  for (int step = 0; step < steps; ++step) {
    const float* grad = grads + step % kGradBuffers * kUnits * kOut;
#pragma unroll
    for (int quarter = 0; quarter < 4; ++quarter) {
      const int h = quarter % 2;
      wgmma_wait<1>();
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int r = 0; r < 4; ++r) pin_register(a[h][q][r]);
      if (mode >= 1) {
#pragma unroll
        for (int q = 0; q < 2; ++q) load_a(a[h][q], grad, offsets, 2 * quarter + q);
      }
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < kTaps; ++j) {
        const uint32_t buffer = uint32_t(step - j) % kXBuffers * kStepBytes;
#pragma unroll
        for (int q = 0; q < 2; ++q)
          wgmma_tf32_rs<128>(acc[j], a[h][q],
                             x_descriptor + ((buffer + 4 * tf32_kmajor_index(0, 16 * quarter + 8 * q)) >> 4));
      }
      wgmma_commit();
    }
    if (mode >= 2) asm volatile("bar.sync 1, 384;\n" ::: "memory");
  }
  wgmma_wait<0>();
  float total = 0.0f;
#pragma unroll
  for (int j = 0; j < kTaps; ++j)
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      pin_register(acc[j][i]);
      total += acc[j][i];
    }
  if (total == 12345.678f) sink[blockIdx.x] = total;  // keeps the MMAs
}

int check() {
  std::vector<float> a(64 * 64), b(128 * 64), d(64 * 128);
  for (int k = 0; k < 64; ++k)
    for (int m = 0; m < 64; ++m) a[k * 64 + m] = float((m * 5 + k * 3) % 7 - 3);
  for (int n = 0; n < 128; ++n)
    for (int k = 0; k < 64; ++k) b[n * 64 + k] = float((n * 3 + k * 7) % 5 - 2);
  float *da, *db, *dd;
  cudaMalloc(&da, a.size() * 4);
  cudaMalloc(&db, b.size() * 4);
  cudaMalloc(&dd, d.size() * 4);
  cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
  const int smem = 80 * 1024 + 1024;
  cudaFuncSetAttribute(check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  check_kernel<<<1, 128, smem>>>(da, db, dd);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("check: %s\n", cudaGetErrorString(e));
    return 1;
  }
  cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 128; ++n) {
      float ref = 0.0f;
      for (int k = 0; k < 64; ++k) ref += a[k * 64 + m] * b[n * 64 + k];
      if (d[m * 128 + n] != ref && bad++ < 5)
        std::printf("  D[%d][%d] = %g, expected %g\n", m, n, d[m * 128 + n], ref);
    }
  std::printf("{\"probe\": \"check\", \"mismatches\": %d}\n", bad);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  return bad;
}

void rate(int sms) {
  const int steps = 4000;
  float* sink;
  cudaMalloc(&sink, sms * 4);
  cudaFuncSetAttribute(rate_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRateSmem);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const char* names[] = {"A fixed in registers", "A loaded each step", "and X transposed each step"};
  for (int mode = 0; mode < 3; ++mode) {
    rate_kernel<<<sms, 384, kRateSmem>>>(steps / 10, mode, sink);  // warm-up
    float best = 1e30f;
    for (int r = 0; r < 3; ++r) {
      cudaEventRecord(start);
      rate_kernel<<<sms, 384, kRateSmem>>>(steps, mode, sink);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, start, stop);
      best = ms < best ? ms : best;
    }
    const cudaError_t e = cudaGetLastError();
    const double flops = 2.0 * kOut * kIn * kUnits * kTaps * double(steps) * sms;
    std::printf(
        "{\"probe\": \"rate\", \"mode\": %d, \"what\": \"%s\", \"ms\": %.3f, \"tflops\": %.1f, "
        "\"error\": \"%s\"}\n",
        mode, names[mode], best, flops / best / 1e9, cudaGetErrorString(e));
  }
  cudaFree(sink);
}

}  // namespace

int main() {
  const int faults = transpose_faults();
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    std::printf("no GPU\n");
    return faults + 1;
  }
  const int bad = check();
  rate(sms);
  return faults + bad;
}
