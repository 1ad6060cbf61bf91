#include "cpu/backward_filter.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "cpu/lanes.h"
#include "winrs/reduction.h"
#include "winrs/tile.h"
#include "winrs/variants.h"

namespace winrs::cpu {
namespace {

// CPU cache block: 64 output x 64 input channels per work item, 16 units per batched-GEMM step, and a 4 x 16
// register tile in the GEMM. Unrelated to the GPU's B_N x B_M; the plan (segments, kernels, buckets) is
// shared.
constexpr int kBlockOc = 64, kBlockIc = 64, kUnitsPerStep = 16;
constexpr int kLanes = 16, kMicroOc = 4;
using Vec = Lanes<kLanes>;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Vec load_lanes(const float* src, int valid) {
  Vec v(0.0);
  for (int l = 0; l < std::min(valid, kLanes); ++l) v.v[l] = src[l];
  return v;
}

struct ItemContext {
  const Problem* p;
  const Buffers* b;
  Segment seg;
  float* bucket;
  bool accumulate;  // kernel 1 adds into the bucket kernel 0 wrote (segments.h)
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

// One work item: filter row fh, filter-gradient tile `tile` (columns f0..f0+n), one channel block, one
// segment.
template <int V>
void run_item(const ItemContext& c, int64_t fh, int64_t tile, int64_t oc0, int64_t ic0) {
  using Tile = TileMath<V>;
  constexpr int alpha = Tile::alpha, n = Tile::n, r = Tile::r;
  const Problem& p = *c.p;
  const int noc = int(std::min<int64_t>(kBlockOc, p.out_c - oc0));
  const int nic = int(std::min<int64_t>(kBlockIc, p.in_c - ic0));
  const int oc_end = int(ceil_div(noc, kMicroOc) * kMicroOc), ic_end = int(ceil_div(nic, kLanes) * kLanes);
  const int64_t f0 = tile * n;

  const RowRange rows = clip_rows(c.seg.h_begin, c.seg.h_end, int(fh), int(p.pad_top), int(p.in_h));
  const int64_t units_per_row = (c.seg.w_end - c.seg.w_begin) / r;
  const int64_t units_per_image = int64_t(rows.end - rows.begin) * units_per_row;
  const int64_t units = p.batch * units_per_image;

  std::vector<float> m(size_t(alpha) * kBlockOc * kBlockIc, 0.0f);
  std::vector<float> wt(size_t(alpha) * kUnitsPerStep * kBlockOc, 0.0f);
  std::vector<float> xt(size_t(alpha) * kUnitsPerStep * kBlockIc, 0.0f);

  for (int64_t first = 0; first < units; first += kUnitsPerStep) {
    const int step = int(std::min<int64_t>(kUnitsPerStep, units - first));
    for (int k = 0; k < step; ++k) {
      const int64_t u = first + k;
      const int64_t image = u / units_per_image, within = u % units_per_image;
      const int64_t oh = rows.begin + within / units_per_row;
      const int64_t w0 = c.seg.w_begin + (within % units_per_row) * r;

      // Filter transform of the output-gradient unit dY[image, oh, w0 .. w0+r).
      const float* grad = c.b->out_grad + ((image * p.out_h + oh) * p.out_w + w0) * p.out_c + oc0;
      for (int oc = 0; oc < noc; oc += kLanes) {
        Vec w[r], t[alpha];
        for (int q = 0; q < r; ++q) w[q] = load_lanes(grad + q * p.out_c + oc, noc - oc);
        Tile::filter(w, t);
        for (int i = 0; i < alpha; ++i)
          std::copy_n(t[i].v, std::min(kLanes, noc - oc),
                      &wt[(size_t(i) * kUnitsPerStep + k) * kBlockOc + oc]);
      }

      // Input transform of the tile X[image, oh + fh - pad_top, w0 + f0 - pad_left .. + alpha).
      const int64_t ih = oh + fh - p.pad_top;
      const float* row = c.b->input + (image * p.in_h + ih) * p.in_w * p.in_c + ic0;
      for (int ic = 0; ic < nic; ic += kLanes) {
        Vec x[alpha], t[alpha];
        for (int e = 0; e < alpha; ++e) {
          const int col = input_column(int(w0), int(f0), e, int(p.pad_left));
          x[e] = column_in_bounds(col, int(p.in_w)) ? load_lanes(row + int64_t(col) * p.in_c + ic, nic - ic)
                                                    : Vec(0.0);
        }
        Tile::input(x, t);
        for (int i = 0; i < alpha; ++i)
          std::copy_n(t[i].v, std::min(kLanes, nic - ic),
                      &xt[(size_t(i) * kUnitsPerStep + k) * kBlockIc + ic]);
      }
    }
    for (int i = 0; i < alpha; ++i)
      gemm_step(&m[size_t(i) * kBlockOc * kBlockIc], &wt[size_t(i) * kUnitsPerStep * kBlockOc],
                &xt[size_t(i) * kUnitsPerStep * kBlockIc], step, oc_end, ic_end);
  }

  // Output transform into this segment's bucket.
  for (int oc = 0; oc < noc; ++oc) {
    for (int ic = 0; ic < nic; ic += kLanes) {
      Vec acc[alpha], y[n];
      for (int i = 0; i < alpha; ++i)
        acc[i] = load_lanes(&m[(size_t(i) * kBlockOc + oc) * kBlockIc + ic], kLanes);
      Tile::output(acc, y);
      for (int j = 0; j < n; ++j) {
        float* dst = c.bucket + (((oc0 + oc) * p.filter_h + fh) * p.filter_w + f0 + j) * p.in_c + ic0 + ic;
        for (int l = 0; l < std::min(kLanes, nic - ic); ++l)
          dst[l] = c.accumulate ? dst[l] + y[j].v[l] : y[j].v[l];
      }
    }
  }
}

using ItemFn = void (*)(const ItemContext&, int64_t, int64_t, int64_t, int64_t);

template <int... Vs>
constexpr auto make_item_table(std::integer_sequence<int, Vs...>) {
  return std::array<ItemFn, sizeof...(Vs)>{&run_item<Vs>...};
}
constexpr auto kItemFns = make_item_table(std::make_integer_sequence<int, kNumVariants>{});

}  // namespace

void backward_filter(const Problem& p, int variant0, int variant1, const SegmentGrid& grid, const Buffers& b,
                     const ParallelFor& parallel_for) {
  const int64_t oc_blocks = ceil_div(p.out_c, kBlockOc), ic_blocks = ceil_div(p.in_c, kBlockIc);
  const int64_t bucket_elems = p.filter_elems();

  // Kernel 0's segments write their buckets; then kernel 1's segments add into theirs (segments.h), in the
  // same order as the two GPU launches.
  for (int kernel = 0; kernel < 2; ++kernel) {
    const int variant = kernel == 0 ? variant0 : variant1;
    std::vector<int> segments;
    for (int z = 0; z < grid.count(); ++z)
      if (grid.segment(z).kernel == kernel) segments.push_back(z);
    const int64_t tiles = p.filter_w / kVariants[variant].n;
    const int64_t items_per_segment = p.filter_h * tiles * oc_blocks * ic_blocks;
    parallel_for(int64_t(segments.size()) * items_per_segment, [&](int64_t item) {
      const int z = segments[size_t(item / items_per_segment)];
      const int bucket = grid.bucket(z);
      ItemContext c{&p, &b, grid.segment(z),
                    bucket == 0 ? b.filter_grad : b.workspace + (bucket - 1) * bucket_elems, kernel == 1};
      int64_t local = item % items_per_segment;
      const int64_t icb = local % ic_blocks;
      local /= ic_blocks;
      const int64_t ocb = local % oc_blocks;
      local /= oc_blocks;
      kItemFns[variant](c, local / tiles, local % tiles, ocb * kBlockOc, icb * kBlockIc);
    });
  }

  const int buckets = grid.buckets();
  if (buckets > 1) {
    constexpr int64_t kChunk = 4096;
    parallel_for(ceil_div(bucket_elems, kChunk), [&](int64_t chunk) {
      const int64_t end = std::min(bucket_elems, (chunk + 1) * kChunk);
      for (int64_t e = chunk * kChunk; e < end; ++e)
        b.filter_grad[e] = kahan_bucket_sum(b.filter_grad, b.workspace, bucket_elems, buckets, e);
    });
  }
}

}  // namespace winrs::cpu
