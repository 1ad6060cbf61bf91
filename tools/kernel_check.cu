// Standalone check of the CUDA kernels without XLA, for compute-sanitizer: every variant on every arithmetic
// path, on small layers with exact-size cudaMalloc buffers (so memcheck sees any out-of-bounds access),
// compared with the CPU executor of the same path (same operand rounding; only the FP32 summation order
// differs). tools/device_check.sh builds and runs it:
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Icpp -I<build>/omega tools/kernel_check.cu
//     cpp/cuda/dispatch.cu <build>/omega/*.cu cpp/winrs/plan.cc cpp/winrs/operator.cc
//     cpp/cpu/backward_filter.cc -o kernel_check
//   compute-sanitizer --tool memcheck ./kernel_check [path ...]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/backward_filter.h"
#include "cuda/omega.h"
#include "cuda/wgmma_tf32_taps.cuh"
#include "winrs/numeric.h"
#include "winrs/variants.h"

namespace {

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// Worst |gpu - cpu| relative to max |cpu| that still means "same function": the operand rounding is the same
// on both sides, but a transform value that lands near a rounding tie may round differently, so the bound
// follows the variant's own error on the path (its MARE, variants.h); an indexing error is of order 1.
// The alpha-16 output transforms multiply such a flip by the largest coefficients: TF32 Omega_16(9, 8)
// reached 11.4x its MARE in max error (2026-11-23), hence 25x there.
// Both sides also sum each dW element's `positions` terms in FP32, in different orders: for direct sums of
// the positive inputs here each sum is within (positions - 1) units of 2^-24 of the exact one, relative, so
// the two differ by at most twice that. It matters on the FP32-accurate paths: split TF32 on a batch of 128
// (3,584 positions) differed by 3.3e-6 against 10x its MARE, 3.1e-6 (H100, 2026-11-24).
double tolerance(winrs::Path path, int variant, int64_t positions) {
  const winrs::Variant& var = winrs::kVariants[variant];
  const double summation = 2.0 * double(positions - 1) * std::ldexp(1.0, -24);
  return std::fmax(1e-6, (var.alpha_class() == 16 ? 25 : 10) * var.shape(path).mare) + summation;
}

// Inputs in the path's storage type (16-bit values as their bit patterns).
std::vector<char> random_tensor(int64_t elems, winrs::Storage storage, float scale, std::mt19937& gen) {
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const size_t element = storage == winrs::Storage::kF32 ? 4 : 2;
  std::vector<char> out(elems * element);
  for (int64_t i = 0; i < elems; ++i) {
    const float v = scale * uniform(gen);
    if (storage == winrs::Storage::kF32) {
      std::memcpy(&out[i * 4], &v, 4);
    } else {
      const uint16_t bits =
          storage == winrs::Storage::kBF16 ? winrs::float_to_bf16_bits(v) : winrs::float_to_f16_bits(v);
      std::memcpy(&out[i * 2], &bits, 2);
    }
  }
  return out;
}

// The dY map of a case: batch x out_h x out_w (0: 2 r + 1 columns), cut into `segments` segments; the filter
// width (0: n, or 3 for the direct kernel); X this many bytes past an aligned address (XLA's buffers are
// aligned; the copy-staged kernels need 16 bytes).
struct Layer {
  int64_t batch = 2, out_h = 7, out_w = 0;
  int segments = 3;  // 0: the planner's choice
  int64_t filter_w = 0;
  int misalign = 0;
  int sm_count = 132;
};

bool run_case(winrs::Path path, int v, int in_c, int out_c, int buckets, bool atomic, std::mt19937& gen,
              Layer layer = {}) {
  const winrs::Variant& var = winrs::kVariants[v];
  const winrs::PathInfo& info = winrs::path_info(path);
  // Height and width padding, two kernels (v and the direct one), several segments, one bucket each, all
  // in one chain (buckets = 1) or adding atomically.
  const int64_t filter_w = layer.filter_w > 0 ? layer.filter_w : var.n == 1 ? 3 : var.n;
  const int64_t out_w = layer.out_w > 0 ? layer.out_w : 2 * var.r + 1;
  const int64_t in_w = out_w + filter_w - 1 - 1;
  winrs::Shapes shapes{{layer.batch, layer.out_h, in_w, in_c},
                       {layer.batch, layer.out_h, out_w, out_c},
                       {out_c, 3, filter_w, in_c},
                       {1, 1, 1, 0}};
  winrs::PlanOptions options;
  options.path = options.reference = path;
  options.segments = layer.segments;
  options.sm_count = layer.sm_count;
  options.buckets = buckets;
  options.atomic = atomic;
  options.variant0 = v;
  options.variant1 = 0;
  winrs::BackwardFilterOp op;
  if (std::string error = winrs::make_backward_filter(shapes, options, &op); !error.empty()) {
    std::printf("%s %d: plan not supported: %s\n", info.name, v, error.c_str());
    return false;
  }
  const winrs::Problem& p = op.problem;
  const float grad_scale = path == winrs::Path::kFp16 ? 1e-2f : 1.0f;  // the paper's FP16 protocol
  const std::vector<char> x = random_tensor(p.input_elems(), info.storage, 1.0f, gen);
  const std::vector<char> dy = random_tensor(p.grad_elems(), info.storage, grad_scale, gen);
  const size_t dw_elems = p.filter_elems(), ws_elems = op.workspace_elems();

  void *dx_alloc = nullptr, *ddy = nullptr;
  float *ddw = nullptr, *dws = nullptr;
  bool ok = check(cudaMalloc(&dx_alloc, x.size() + layer.misalign), "malloc") &&
            check(cudaMalloc(&ddy, dy.size()), "malloc") && check(cudaMalloc(&ddw, dw_elems * 4), "malloc") &&
            (ws_elems == 0 || check(cudaMalloc(&dws, ws_elems * 4), "malloc"));
  void* dx = static_cast<char*>(dx_alloc) + layer.misalign;
  ok = ok && check(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice), "copy") &&
       check(cudaMemcpy(ddy, dy.data(), dy.size(), cudaMemcpyHostToDevice), "copy");
  // dW starts as NaNs: every element must be written (or zeroed before atomic adds).
  ok = ok && check(cudaMemset(ddw, 0xff, dw_elems * 4), "memset");
  const char* stage = "";
  // The filter-row tile, which the plan counts by channel counts alone, refuses a misaligned X
  // (launch_direct); every other kernel falls back to register staging and must compute dW.
  const bool refused =
      layer.misalign % 16 != 0 && v == 0 && winrs::tile_shape(0, path, p).columns == winrs::kDirectTaps;
  if (ok && refused) {
    const cudaError_t e = winrs::cuda::run_backward_filter(op, dx, ddy, ddw, dws, 0, &stage);
    std::printf("%-6s direct %3d:%-3d X misaligned by %d bytes: %s (%s)\n", info.name, in_c, out_c,
                layer.misalign, e == cudaErrorMisalignedAddress ? "refused ok" : "FAILED",
                cudaGetErrorString(e));
    cudaFree(dx_alloc);
    cudaFree(ddy);
    cudaFree(ddw);
    cudaFree(dws);
    return e == cudaErrorMisalignedAddress;
  }
  ok = ok && check(winrs::cuda::run_backward_filter(op, dx, ddy, ddw, dws, 0, &stage), stage);
  ok = ok && check(cudaDeviceSynchronize(), "sync");
  std::vector<float> gpu(dw_elems), cpu(dw_elems), cpu_ws(ws_elems);
  ok = ok && check(cudaMemcpy(gpu.data(), ddw, dw_elems * 4, cudaMemcpyDeviceToHost), "copy back");
  winrs::cpu::backward_filter(op, {x.data(), dy.data(), cpu.data(), cpu_ws.data()},
                              [](int64_t count, const std::function<void(int64_t)>& body) {
                                for (int64_t i = 0; i < count; ++i) body(i);
                              });
  double worst = 0, scale = 0;
  bool finite = true;
  for (size_t i = 0; i < dw_elems; ++i) {
    finite = finite && std::isfinite(gpu[i]);
    worst = std::fmax(worst, std::fabs(double(gpu[i]) - cpu[i]));
    scale = std::fmax(scale, std::fabs(double(cpu[i])));
  }
  const bool close = finite && worst <= tolerance(path, v, p.batch * p.out_h * p.out_w) * scale;
  std::printf(
      "%-6s Omega_%d(%d, %d) %3d:%-3d %lldx%lldx%lld fw %lld Z=%lld (%d image parts) B=%lld%s  max |gpu - "
      "cpu| / "
      "max |cpu| = %.2e %s\n",
      info.name, var.alpha_class(), var.n, var.r, in_c, out_c, (long long)layer.batch, (long long)layer.out_h,
      (long long)out_w, (long long)filter_w, (long long)op.plan.segments, op.plan.grid.image_parts,
      (long long)op.plan.buckets, atomic ? " atomic" : "", worst / scale, ok && close ? "ok" : "FAILED");
  cudaFree(dx_alloc);
  cudaFree(ddy);
  cudaFree(ddw);
  cudaFree(dws);
  return ok && close;
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937 gen(0);
  int failures = 0, cases = 0;
  for (int path = 0; path < winrs::kNumPaths; ++path) {
    bool wanted = argc == 1;
    for (int a = 1; a < argc; ++a) wanted = wanted || std::string(argv[a]) == winrs::kPaths[path].name;
    if (!wanted) continue;
    // Odd channel counts (scalar loads), multiples of 4 with partial channel blocks (vector loads), and
    // counts spanning several blocks of the tensor-core shapes; those in one chain of segments, or adding
    // atomically (one channel at a time, or four with sm_90's vector atomics where in_c % 4 == 0).
    for (const auto& [in_c, out_c, buckets, atomic] : {std::tuple{37, 21, 0, false},
                                                       std::tuple{36, 100, 0, false},
                                                       {130, 70, 1, false},
                                                       {130, 70, 0, true},
                                                       {36, 100, 0, true}})
      for (int v = 0; v < winrs::kNumVariants; ++v, ++cases)
        failures += !run_case(static_cast<winrs::Path>(path), v, in_c, out_c, buckets, atomic, gen);
    // The direct kernel's copy staging (channels in 16-byte pieces) over many steps of its pipeline: an odd
    // batch, partial channel blocks (136, 72), one block (40:56, 64:64); filter widths of 3 and 6 run its
    // filter-row tile on the tensor-core paths where a channel count is at most 64 (width 5 in 16 bits only,
    // the last tile's column past the filter dropped), segments narrower than a step (width 5), two
    // input-channel blocks (72:40), three output-channel blocks (24:200).
    // Where both pass 64 the 128 x 128 block runs: by wgmma on Hopper in 16 bits (run again with
    // WINRS_JAX_WGMMA=0 for the mma.sync kernels), chained and adding atomically.
    for (const auto& [in_c, out_c, buckets, atomic, out_w, filter_w] :
         {std::tuple{136, 72, 0, false, 17, 3}, std::tuple{40, 56, 1, false, 17, 3},
          std::tuple{64, 64, 0, true, 17, 3}, std::tuple{136, 72, 0, true, 17, 3},
          std::tuple{48, 40, 0, false, 5, 6}, std::tuple{48, 40, 1, false, 23, 5},
          std::tuple{200, 136, 1, false, 19, 5}, std::tuple{72, 264, 0, true, 11, 6},
          std::tuple{72, 40, 0, true, 17, 3}, std::tuple{24, 200, 1, false, 13, 3}}) {
      ++cases;
      failures += !run_case(static_cast<winrs::Path>(path), 0, in_c, out_c, buckets, atomic, gen,
                            Layer{3, 20, out_w, 2, filter_w});
    }
    // Batches of 64 and 32 images (the 128 x 128 wgmma block's TMA staging copies a pixel of 64 images per
    // step, or 64 / batch pixels, the last step of a segment partly past its end) and 16 (cp.async staging):
    // partial channel panels (72, 136), padding on both sides, chained and atomic; a batch of 128 (two steps
    // per pixel), the last output-channel block of 192 half past the tensor.
    for (const auto& [batch, in_c, out_c, buckets, atomic, filter_w] :
         {std::tuple{64, 136, 72, 0, true, 3}, std::tuple{64, 200, 136, 1, false, 5},
          std::tuple{64, 72, 264, 0, true, 6}, std::tuple{32, 136, 72, 1, false, 3},
          std::tuple{16, 200, 136, 0, true, 5}, std::tuple{64, 136, 72, 0, false, 2},
          std::tuple{64, 128, 192, 0, true, 3}, std::tuple{128, 192, 256, 1, false, 5}}) {
      ++cases;
      failures += !run_case(static_cast<winrs::Path>(path), 0, in_c, out_c, buckets, atomic, gen,
                            Layer{batch, 4, 7, 2, filter_w});
    }
    // The persistent block's T-tap tiles (16 bits on Hopper; atomic plans, rows of at least seven steps per
    // step of X alone, eight for widths 3k + 1, of an even width at a batch of 32: wgmma_persistent.cuh,
    // tap_runs.cuh): three taps (3;
    // 6 = 3 + 3, 5 = 3 + 2 columns; 4 = 2 + 2 and 7 = 3 + 2 + 2 cut evenly, 3 + 1 and 3 + 3 + 1 under
    // WINRS_JAX_TAP_BALANCED=0), two (width 2); batches of 64, 128 and 192 (parts of 64 images, tap_run_grid)
    // and 32 (two positions a step); partial channel panels; the shortest rows that take them (14 at batches
    // of 32 and 128, 16 at width 7) and 15. A batch of 32 on rows of an odd width (33, 17 at widths 4 and 6,
    // 21 at widths 3 and 7): T-tap tiles on all columns but the last, one-tap tiles on that one
    // (tap_run_even_split); on rows of 13 (too short once split), one tap. Again with 3 blocks
    // (WINRS_JAX_PERSISTENT_BLOCKS), each walking many tiles, its ring of buffers running across their runs
    // and their boundaries.
    // (TF32 and split TF32 too, unless WINRS_JAX_TF32_TAPS=0: the tiles of wgmma_tf32_taps.cuh.)
    const bool tf32_tiles = (static_cast<winrs::Path>(path) == winrs::Path::kTf32 ||
                             static_cast<winrs::Path>(path) == winrs::Path::kTf32x3) &&
                            winrs::cuda::tf32_taps_enabled();
    const long long tf32_launches_before = winrs::cuda::tf32_taps_launches.load();
    for (const char* blocks : {"", "3"}) {
      if (winrs::storage_bytes(static_cast<winrs::Path>(path)) != 2 && !tf32_tiles) break;
      setenv("WINRS_JAX_PERSISTENT_BLOCKS", blocks, 1);
      for (const auto& [batch, out_h, out_w, in_c, out_c, filter_w] :
           {std::tuple{64, 2, 20, 136, 72, 3}, std::tuple{64, 1, 17, 72, 136, 6},
            std::tuple{128, 1, 20, 136, 72, 5}, std::tuple{128, 2, 16, 72, 136, 2},
            std::tuple{32, 1, 34, 136, 72, 5}, std::tuple{32, 1, 33, 72, 136, 2},
            std::tuple{32, 1, 36, 72, 136, 2}, std::tuple{192, 1, 16, 72, 136, 3},
            std::tuple{64, 1, 20, 72, 136, 4}, std::tuple{64, 1, 20, 72, 72, 7},
            std::tuple{32, 2, 14, 136, 72, 3}, std::tuple{128, 1, 15, 72, 136, 3},
            std::tuple{128, 2, 14, 136, 72, 3}, std::tuple{32, 1, 17, 72, 136, 6},
            std::tuple{32, 2, 21, 136, 72, 3}, std::tuple{32, 1, 17, 72, 136, 4},
            std::tuple{32, 2, 13, 136, 72, 3}, std::tuple{32, 1, 21, 72, 136, 7},
            std::tuple{64, 1, 16, 136, 72, 7}}) {
        ++cases;
        failures += !run_case(static_cast<winrs::Path>(path), 0, in_c, out_c, 0, true, gen,
                              Layer{batch, out_h, out_w, 2, filter_w});
      }
      unsetenv("WINRS_JAX_PERSISTENT_BLOCKS");
    }
    // The split-TF32 tiles on layers the filter-row tile would take (WINRS_JAX_TF32X3_ROW_TILE_LAYERS=1, an
    // experiment's switch, winrs/tap_runs.h): 64 and 40 input channels against 136 and 200 output channels, 3
    // and 6 wide, a row of odd width at a batch of 32 (its last column on the filter-row tile).
    if (tf32_tiles && static_cast<winrs::Path>(path) == winrs::Path::kTf32x3 &&
        winrs::tf32x3_row_tile_layers_enabled()) {
      const long long row_tile_before = winrs::cuda::tf32_taps_launches.load();
      for (const auto& [batch, out_h, out_w, in_c, out_c, filter_w] :
           {std::tuple{32, 2, 20, 64, 136, 3}, std::tuple{64, 1, 20, 40, 200, 6},
            std::tuple{32, 1, 33, 64, 136, 3}}) {
        ++cases;
        failures += !run_case(static_cast<winrs::Path>(path), 0, in_c, out_c, 0, true, gen,
                              Layer{batch, out_h, out_w, 2, filter_w});
      }
      // Each of them took the tiles (the cases above launch them too).
      const long long row_tile_launches = winrs::cuda::tf32_taps_launches.load() - row_tile_before;
      std::printf("tf32x3 T-tap tile launches on filter-row tile layers: %lld\n", row_tile_launches);
      ++cases;
      failures += row_tile_launches < 3;
    }
    if (tf32_tiles) {  // the cases above must have run the TF32 tiles, not only mma.sync's fallback
      const long long launches = winrs::cuda::tf32_taps_launches.load() - tf32_launches_before;
      std::printf("%s T-tap tile launches: %lld\n", winrs::path_info(static_cast<winrs::Path>(path)).name,
                  launches);
      ++cases;
      failures += launches == 0;
    }
    // More tiles than an H100 has SMs (8 segments x 9 taps x 2 output-channel blocks x 2 of 256 input
    // channels): the persistent 128 x 256 block walks two tiles or more, its ring of buffers running across
    // their boundaries, adding atomically or each segment into its own bucket; chained (buckets 1), the
    // 128 x 128 block takes them.
    for (const auto& [buckets, atomic] : {std::pair{1, false}, std::pair{0, true}, std::pair{0, false}}) {
      ++cases;
      failures +=
          !run_case(static_cast<winrs::Path>(path), 0, 512, 256, buckets, atomic, gen, Layer{32, 8, 7, 8, 3});
    }
    // Long rows on one 128 x 128 channel block (16 bits; the layers of the filter-row tile on 128 x 128
    // channels until the thirty-first stop, variants.h, kWideBlock; the one-tap block runs them now): partial
    // channel panels (120, 72, 96), chained and atomic, rows of 190, 256 and 62 columns. The other paths
    // leave them out (their sums are long for their tolerance).
    for (const auto& [batch, out_h, out_w, in_c, out_c, buckets, atomic] :
         {std::tuple{2, 22, 256, 120, 72, 0, true}, std::tuple{3, 30, 190, 128, 128, 1, false},
          std::tuple{2, 88, 62, 96, 128, 0, false}}) {
      if (winrs::storage_bytes(static_cast<winrs::Path>(path)) != 2) continue;
      ++cases;
      failures += !run_case(static_cast<winrs::Path>(path), 0, in_c, out_c, buckets, atomic, gen,
                            Layer{batch, out_h, out_w, 2, 3});
    }
    // The filter-window tile (16 bits: 3 filter rows x 3 columns of a 64 x 64 block, by the TMA on sm_90; the
    // filter-row tile elsewhere and with WINRS_JAX_WINDOW=0), on its own plans (segments = 0): all rows of a
    // range of images per segment (image parts), its blocks walking runs of rows and reusing X rows. Runs of
    // 5 rows in steps of 2 (28 columns: a dY box per piece) over 1-2 images per part (4 SMs), of 9 rows in
    // steps of one (60), of 4 rows in steps of 4 (16: one dY box of 4 rows) over 2 images per part (3 SMs),
    // of 3 rows in steps of 2 (32) chained, of 2 rows in a step of 4 (the rest zeros); segments of 64, 60,
    // 100, 28, 45 and 14 columns, partial channel blocks (40:56, 64:48, 24:64, 64:16), chained and atomic.
    // Forced segments of several row bands (the first two) run the filter-row tile. The cases above run the
    // filter-row tile (no piece fills its K-blocks).
    for (const auto& [batch, out_h, out_w, in_c, out_c, buckets, atomic, segments, sm_count] :
         {std::tuple{3, 6, 64, 64, 64, 0, true, 3, 132}, std::tuple{2, 5, 60, 40, 56, 1, false, 3, 132},
          std::tuple{3, 6, 64, 64, 64, 0, true, 0, 132}, std::tuple{2, 5, 60, 40, 56, 1, false, 0, 132},
          std::tuple{5, 4, 100, 64, 48, 0, false, 0, 132}, std::tuple{3, 7, 28, 24, 64, 0, true, 0, 132},
          std::tuple{1, 9, 45, 64, 16, 1, false, 0, 132}, std::tuple{3, 5, 14, 64, 64, 0, true, 0, 132},
          std::tuple{7, 5, 28, 64, 64, 0, true, 0, 4}, std::tuple{5, 9, 60, 40, 56, 0, false, 0, 132},
          std::tuple{6, 4, 16, 64, 48, 0, true, 0, 3}, std::tuple{4, 3, 32, 24, 64, 1, false, 0, 132},
          std::tuple{3, 2, 16, 64, 64, 0, true, 0, 132}, std::tuple{2, 6, 35, 64, 96, 0, true, 0, 132}}) {
      if (winrs::storage_bytes(static_cast<winrs::Path>(path)) != 2) continue;
      ++cases;
      failures += !run_case(static_cast<winrs::Path>(path), 0, in_c, out_c, buckets, atomic, gen,
                            Layer{batch, out_h, out_w, segments, 3, 0, sm_count});
    }
    // X 8 bytes off 16-byte alignment: the filter-row tiles (64:64, and 120:72 on 22 x 256, run in 16 bits
    // only) report a misaligned address; the 128 x 128 block (136:72) and a width-2 layer (48:40, one column
    // per block) run register staging and must match the CPU.
    for (const auto& [in_c, out_c, filter_w, out_h, out_w] :
         {std::tuple{64, 64, 3, 9, 17}, {136, 72, 3, 9, 17}, {120, 72, 3, 22, 256}, {48, 40, 2, 9, 17}}) {
      if (out_w > 17 && winrs::storage_bytes(static_cast<winrs::Path>(path)) != 2) continue;
      ++cases;
      failures += !run_case(static_cast<winrs::Path>(path), 0, in_c, out_c, 0, false, gen,
                            Layer{2, out_h, out_w, 2, filter_w, 8});
    }
  }
  std::printf("%d failures in %d cases\n", failures, cases);
  return failures != 0;
}
