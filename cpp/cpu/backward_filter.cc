#include "cpu/backward_filter.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "cpu/lanes.h"
#include "winrs/numeric.h"
#include "winrs/reduction.h"
#include "winrs/schedule.h"
#include "winrs/tile.h"
#include "winrs/variants.h"

namespace winrs::cpu {
namespace {

// CPU cache block: 64 output x 64 input channels per work tile, 16 units per batched-GEMM step, and a 4 x 16
// register tile in the GEMM. Unrelated to the GPU's B_N x B_M; the plan (segments, kernels, buckets) and the
// decomposition into work tiles (winrs/schedule.h) are shared.
constexpr int kBlockOc = 64, kBlockIc = 64, kUnitsPerStep = 16;
constexpr int kLanes = 16, kMicroOc = 4;
using Vec = Lanes<kLanes>;

template <Storage S>
Vec load_lanes(const void* base, int64_t index, int valid) {
  Vec v(0.0);
  for (int l = 0; l < std::min(valid, kLanes); ++l) v.v[l] = load_storage<S>(base, index + l);
  return v;
}

// Transformed tiles of one step as GEMM operands: `high` holds the operand rounded to the path's type;
// for split TF32, `low` holds the TF32 remainder.
struct Operands {
  std::vector<float> high, low;
  Operands(size_t size, bool split) : high(size, 0.0f), low(split ? size : 0, 0.0f) {}

  void set(Operand op, size_t i, float value) {
    if (op == Operand::kTF32Split) {
      const SplitTf32 s = split_tf32(value);
      high[i] = s.high;
      low[i] = s.low;
    } else {
      high[i] = round_operand(op, value);
    }
  }
};

// M[oc][ic] += sum_k Wt[k][oc] * Xt[k][ic] for one alpha slice of the batched GEMM (Algorithm 3, line 10).
void gemm_step(float* m, const float* wt, const float* xt, int units, int oc_end, int ic_end) {
  for (int oc = 0; oc < oc_end; oc += kMicroOc) {
    for (int ic = 0; ic < ic_end; ic += kLanes) {
      float acc[kMicroOc][kLanes];
      for (int a = 0; a < kMicroOc; ++a)
        for (int l = 0; l < kLanes; ++l) acc[a][l] = m[(oc + a) * kBlockIc + ic + l];
      for (int k = 0; k < units; ++k) {
        const float* x = xt + k * kBlockIc + ic;
        const float* w = wt + k * kBlockOc + oc;
        for (int a = 0; a < kMicroOc; ++a)
          for (int l = 0; l < kLanes; ++l) acc[a][l] += w[a] * x[l];
      }
      for (int a = 0; a < kMicroOc; ++a)
        for (int l = 0; l < kLanes; ++l) m[(oc + a) * kBlockIc + ic + l] = acc[a][l];
    }
  }
}

struct TileContext {
  const Problem* p;
  const void* input;
  const void* out_grad;
  float* bucket;
  bool accumulate;  // add into the bucket: kernel 1, or a later link of a chain (segments.h)
  DepthView depth;  // a 3D layer read in place: X's images and channels of problem `problem`'s
  int problem;
};

// One work tile: filter row fh, filter-gradient columns f0..f0+n, one channel block, one segment.
template <int V, Path P>
void run_tile(const TileContext& c, const Segment& seg, const WorkTile& t) {
  using Tile = TileMath<V>;
  constexpr int alpha = Tile::alpha, n = Tile::n, r = Tile::r;
  constexpr Storage S = path_info(P).storage;
  constexpr Operand op = path_info(P).operand;
  constexpr bool split = op == Operand::kTF32Split;
  const Problem& p = *c.p;
  const int noc = int(std::min<int64_t>(kBlockOc, p.out_c - t.oc0));
  const int nic = int(std::min<int64_t>(kBlockIc, p.in_c - t.ic0));
  const int oc_end = (noc + kMicroOc - 1) / kMicroOc * kMicroOc,
            ic_end = (nic + kLanes - 1) / kLanes * kLanes;

  const UnitWalk walk = make_unit_walk(p, seg, t.fh, r);
  const int units = walk.units();

  std::vector<float> m(size_t(alpha) * kBlockOc * kBlockIc, 0.0f);
  Operands wt(size_t(alpha) * kUnitsPerStep * kBlockOc, split),
      xt(size_t(alpha) * kUnitsPerStep * kBlockIc, split);

  UnitCursor u;
  u.start(0, walk);
  for (int first = 0; first < units; first += kUnitsPerStep) {
    const int step = std::min(kUnitsPerStep, units - first);
    for (int k = 0; k < step; ++k, u.advance(1, walk)) {
      const int64_t oh = u.out_row(walk), w0 = u.out_col(walk);

      // Filter transform of the output-gradient unit dY[image, oh, w0 .. w0+r).
      const int64_t image = walk.image0 + u.image;
      const int64_t grad = ((image * p.out_h + oh) * p.out_w + w0) * p.out_c + t.oc0;
      for (int oc = 0; oc < noc; oc += kLanes) {
        Vec w[r], tr[alpha];
        for (int q = 0; q < r; ++q) w[q] = load_lanes<S>(c.out_grad, grad + q * p.out_c + oc, noc - oc);
        Tile::filter(w, tr);
        for (int i = 0; i < alpha; ++i)
          for (int l = 0; l < std::min(kLanes, noc - oc); ++l)
            wt.set(op, (size_t(i) * kUnitsPerStep + k) * kBlockOc + oc + l, tr[i].v[l]);
      }

      // Input transform of the tile X[image, oh s_h + fh - pad_top, w0 s_w + f0 - pad_left .. + alpha) (of a
      // 3D layer's depth slice, none in the depth padding; a packed layer's lanes are one tap's channels).
      const int64_t x_row = oh * p.stride_h + t.fh - p.pad_top, x_pixel = c.depth.x_channels(int(p.in_c));
      for (int ic = 0; ic < nic; ic += kLanes) {
        const int channel = int(t.ic0) + ic;
        const int64_t x_image =
            c.depth.on() ? c.depth.input_image(int(image), c.depth.tap_of(c.problem, channel, int(p.in_c)))
                         : image;
        const int64_t row = (x_image * p.in_h + x_row) * p.in_w * x_pixel + c.depth.x_channel(channel);
        Vec x[alpha], tr[alpha];
        for (int e = 0; e < alpha; ++e) {
          const int col = input_column(int(w0), t.f0, e, int(p.pad_left), int(p.stride_w));
          x[e] = x_image >= 0 && column_in_bounds(col, int(p.in_w))
                     ? load_lanes<S>(c.input, row + int64_t(col) * x_pixel, nic - ic)
                     : Vec(0.0);
        }
        Tile::input(x, tr);
        for (int i = 0; i < alpha; ++i)
          for (int l = 0; l < std::min(kLanes, nic - ic); ++l)
            xt.set(op, (size_t(i) * kUnitsPerStep + k) * kBlockIc + ic + l, tr[i].v[l]);
      }
    }
    for (int i = 0; i < alpha; ++i) {
      float* slice = &m[size_t(i) * kBlockOc * kBlockIc];
      const size_t w_at = size_t(i) * kUnitsPerStep * kBlockOc, x_at = size_t(i) * kUnitsPerStep * kBlockIc;
      if constexpr (split) {  // the small products first, as the tensor-core kernels issue them
        gemm_step(slice, &wt.low[w_at], &xt.high[x_at], step, oc_end, ic_end);
        gemm_step(slice, &wt.high[w_at], &xt.low[x_at], step, oc_end, ic_end);
      }
      gemm_step(slice, &wt.high[w_at], &xt.high[x_at], step, oc_end, ic_end);
    }
  }

  // Output transform into this segment's bucket.
  for (int oc = 0; oc < noc; ++oc) {
    for (int ic = 0; ic < nic; ic += kLanes) {
      Vec acc[alpha], y[n];
      for (int i = 0; i < alpha; ++i)
        std::copy_n(&m[(size_t(i) * kBlockOc + oc) * kBlockIc + ic], kLanes, acc[i].v);
      Tile::output(acc, y);
      for (int j = 0; j < n; ++j) {
        float* dst =
            c.bucket + (((t.oc0 + oc) * p.filter_h + t.fh) * p.filter_w + t.f0 + j) * p.in_c + t.ic0 + ic;
        for (int l = 0; l < std::min(kLanes, nic - ic); ++l)
          dst[l] = c.accumulate ? dst[l] + y[j].v[l] : y[j].v[l];
      }
    }
  }
}

using TileFn = void (*)(const TileContext&, const Segment&, const WorkTile&);

template <Path P, int... Vs>
constexpr auto make_tile_table(std::integer_sequence<int, Vs...>) {
  return std::array<TileFn, sizeof...(Vs)>{&run_tile<Vs, P>...};
}

template <int... Ps>
constexpr auto make_path_table(std::integer_sequence<int, Ps...>) {
  return std::array<std::array<TileFn, kNumVariants>, sizeof...(Ps)>{
      make_tile_table<static_cast<Path>(Ps)>(std::make_integer_sequence<int, kNumVariants>{})...};
}
constexpr auto kTileFns = make_path_table(std::make_integer_sequence<int, kNumPaths>{});

void run_problem(const BackwardFilterOp& op, const Buffers& b, int64_t group,
                 const ParallelFor& parallel_for) {
  const Problem& p = op.problem;
  const Plan& plan = op.plan;
  const int64_t bucket_elems = p.filter_elems();

  // Kernel 0's segments write or add into their buckets, then kernel 1's add into theirs (segments.h), in the
  // same order as the two GPU launches; the links of the chains run one after the other, as the GPU's
  // semaphores order them (atomic adds: one chain, in the same link order).
  for (int kernel = 0; kernel < 2; ++kernel) {
    const int variant = kernel == 0 ? plan.variant0 : plan.variant1;
    const TileScheduler scheduler =
        make_scheduler(p, plan.grid, kernel, kVariants[variant].n, kBlockOc, kBlockIc);
    const TileFn fn = kTileFns[static_cast<int>(plan.path)][variant];
    for (int link = 0; link < plan.grid.chain(kernel); ++link) {
      const int64_t first = scheduler.link_begin(link);
      parallel_for(scheduler.link_begin(link + 1) - first, [&](int64_t index) {
        const WorkTile t = scheduler.tile(first + index);
        const int bucket = plan.grid.bucket_of(t.local);
        const TileContext c{&p,
                            b.input,
                            b.out_grad,
                            bucket == 0 ? b.filter_grad : b.workspace + (bucket - 1) * bucket_elems,
                            kernel == 1 || link > 0,
                            op.depth,
                            int(group)};
        fn(c, plan.grid.segment(t.segment), t);
      });
    }
  }

  const int buckets = plan.grid.buckets();
  if (buckets > 1) {
    constexpr int64_t kChunk = 4096;
    parallel_for((bucket_elems + kChunk - 1) / kChunk, [&](int64_t chunk) {
      const int64_t end = std::min(bucket_elems, (chunk + 1) * kChunk);
      for (int64_t e = chunk * kChunk; e < end; ++e)
        b.filter_grad[e] = kahan_bucket_sum(b.filter_grad, b.workspace, bucket_elems, buckets, e);
    });
  }
}

}  // namespace

void backward_filter(const BackwardFilterOp& op, const Buffers& b, const ParallelFor& parallel_for) {
  const Problem& p = op.problem;
  const int64_t element = storage_bytes(op.plan.path);
  for (int64_t g = 0; g < op.groups; ++g) {
    const Buffers group{static_cast<const char*>(b.input) + g * op.input_group_stride * element,
                        static_cast<const char*>(b.out_grad) + g * op.grad_group_stride * element,
                        b.filter_grad + g * p.filter_elems(), b.workspace + g * op.plan.workspace_elems};
    run_problem(op, group, g, parallel_for);
  }
}

}  // namespace winrs::cpu
