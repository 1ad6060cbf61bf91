// Standalone check of the CUDA kernels without XLA, for compute-sanitizer: every variant on a small layer
// with exact-size cudaMalloc buffers (so memcheck sees any out-of-bounds access), compared with the CPU
// executor. Build and run (tools/device_check.sh does this):
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Icpp tools/kernel_check.cu cpp/cuda/dispatch.cu
//   \
//     cpp/cuda/omega_alpha*.cu cpp/winrs/plan.cc cpp/cpu/backward_filter.cc -o kernel_check
//   compute-sanitizer --tool memcheck ./kernel_check
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "cpu/backward_filter.h"
#include "cuda/omega.h"
#include "winrs/plan.h"
#include "winrs/variants.h"

namespace {

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

}  // namespace

int main() {
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  int failures = 0;
  // Odd channel counts (scalar loads) and multiples of 4 with partial channel blocks (vector loads).
  for (const auto [in_c, out_c] : {std::pair<int, int>{37, 21}, std::pair<int, int>{36, 100}})
    for (int v = 0; v < winrs::kNumVariants; ++v) {
      const winrs::Variant& var = winrs::kVariants[v];
      // Odd channel counts, both height and width padding, two kernels (v and the direct one), several
      // buckets.
      winrs::Problem p{2, 7, 0, in_c, 0, 0, out_c, 3, var.n == 1 ? 3 : var.n, 1, 1, 1, 0};
      p.out_w = 2 * var.r + 1;
      p.in_w = p.out_w + p.filter_w - 1 - p.pad_left - p.pad_right;
      p.out_h = p.in_h + p.pad_top + p.pad_bottom - p.filter_h + 1;
      winrs::PlanOptions options;
      options.segments = 3;
      options.variant0 = v;
      options.variant1 = 0;
      const winrs::Plan plan = winrs::make_plan(p, options);
      if (!plan.supported) {
        std::printf("%d: plan not supported: %s\n", v, plan.reason.c_str());
        return 1;
      }
      std::vector<float> x(p.input_elems()), dy(p.grad_elems());
      for (float& e : x) e = uniform(gen);
      for (float& e : dy) e = uniform(gen);
      const size_t dw_elems = p.filter_elems(), ws_elems = plan.workspace_elems;

      float *dx, *ddy, *ddw, *dws = nullptr;
      bool ok = check(cudaMalloc(&dx, x.size() * 4), "malloc") &&
                check(cudaMalloc(&ddy, dy.size() * 4), "malloc") &&
                check(cudaMalloc(&ddw, dw_elems * 4), "malloc") &&
                (ws_elems == 0 || check(cudaMalloc(&dws, ws_elems * 4), "malloc"));
      ok = ok && check(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "copy") &&
           check(cudaMemcpy(ddy, dy.data(), dy.size() * 4, cudaMemcpyHostToDevice), "copy");
      winrs::cuda::OmegaArgs args{dx, ddy, ddw, dws, p, plan.grid, 0, 1};
      ok = ok && check(winrs::cuda::launch_omega(plan.variant0, args, 0), "kernel 0");
      if (plan.grid.width0 < plan.grid.out_w) {
        args.kernel = 1;
        ok = ok && check(winrs::cuda::launch_omega(plan.variant1, args, 0), "kernel 1");
      }
      if (plan.buckets > 1)
        ok = ok && check(winrs::cuda::launch_bucket_reduction(ddw, dws, 1, dw_elems, int(plan.buckets), 0),
                         "reduce");
      ok = ok && check(cudaDeviceSynchronize(), "sync");
      std::vector<float> gpu(dw_elems), cpu(dw_elems), cpu_ws(ws_elems);
      ok = ok && check(cudaMemcpy(gpu.data(), ddw, dw_elems * 4, cudaMemcpyDeviceToHost), "copy back");
      winrs::cpu::backward_filter(p, plan.variant0, plan.variant1, plan.grid,
                                  {x.data(), dy.data(), cpu.data(), cpu_ws.data()},
                                  [](int64_t count, const std::function<void(int64_t)>& body) {
                                    for (int64_t i = 0; i < count; ++i) body(i);
                                  });
      double worst = 0, scale = 0;
      for (size_t i = 0; i < dw_elems; ++i) {
        worst = std::fmax(worst, std::fabs(double(gpu[i]) - cpu[i]));
        scale = std::fmax(scale, std::fabs(double(cpu[i])));
      }
      const bool close = worst <= (var.alpha_class() == 16 ? 5e-4 : 2e-5) * scale;
      std::printf("Omega_%d(%d, %d): Z=%lld, max |gpu - cpu| / max |cpu| = %.2e %s\n", var.alpha_class(),
                  var.n, var.r, (long long)plan.segments, worst / scale, ok && close ? "ok" : "FAILED");
      failures += !(ok && close);
      cudaFree(dx);
      cudaFree(ddy);
      cudaFree(ddw);
      cudaFree(dws);
    }
  std::printf("%d failures\n", failures);
  return failures != 0;
}
