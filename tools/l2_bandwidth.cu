// How fast the GPU's SMs read data that sits in L2 (and, for a buffer larger than L2, in memory): every SM
// reads a buffer of the given size over and over with 16-byte loads that skip L1 (ld.global.cg), timed by
// CUDA events. The one-tap filter-gradient blocks move about 48 KB from L2 per 4.2 MFLOP step
// (docs/benchmarks.md, twentieth stop): this says whether L2's read rate caps them.
//   nvcc -O3 -arch=sm_90a tools/l2_bandwidth.cu -o /tmp/l2_bandwidth && /tmp/l2_bandwidth
#include <cuda_runtime.h>

#include <cstdio>

__global__ void read_kernel(const uint4* data, size_t n, int reps, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (int r = 0; r < reps; ++r)
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
      const uint4 v = __ldcg(data + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);  // keeps the loads; never true for the zeroed buffer
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t sizes_mb[] = {4, 8, 16, 24, 32, 40, 1024}, largest_mb = 1024;  // the last: from memory
  uint4* data = nullptr;
  unsigned* sink = nullptr;
  if (cudaMalloc(&data, largest_mb << 20) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) return 1;
  cudaMemset(data, 0, largest_mb << 20);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (size_t mb : sizes_mb) {
    const size_t n = (mb << 20) / sizeof(uint4);
    const int reps = mb == largest_mb ? 4 : int(4096 / mb);
    for (int blocks_per_sm : {2, 4, 8}) {
      const int grid = sms * blocks_per_sm, threads = 256;
      read_kernel<<<grid, threads>>>(data, n, 1, sink);  // warm-up: the buffer into L2
      cudaEventRecord(start);
      read_kernel<<<grid, threads>>>(data, n, reps, sink);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      const double bytes = double(n) * sizeof(uint4) * reps;
      std::printf("{\"buffer_mb\": %zu, \"blocks_per_sm\": %d, \"ms\": %.3f, \"tb_per_s\": %.2f}\n", mb,
                  blocks_per_sm, ms, bytes / (ms * 1e-3) / 1e12);
    }
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
