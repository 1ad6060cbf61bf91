// The nanobind extension winrs_jax._winrs: FFI handler capsules, the variant table, the transforms and the
// planner, so that Python plans exactly as the handlers validate.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <utility>
#include <vector>

#include "ffi/handlers.h"
#include "winrs/grouped.h"
#include "winrs/numeric.h"
#include "winrs/operator.h"
#include "winrs/paths.h"
#include "winrs/tap_runs.h"
#include "winrs/tile.h"
#include "winrs/transforms.h"
#include "winrs/variants.h"

namespace nb = nanobind;

namespace {

using Matrix = std::vector<std::vector<double>>;

template <typename Fn>
nb::capsule capsule_of(Fn* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

Matrix rows(const double* data, int rows, int cols, int stride) {
  Matrix m(rows, std::vector<double>(cols));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) m[i][j] = data[i * stride + j];
  return m;
}

// One F(n, r) tile computed by the shared per-tile code of winrs/tile.h, in float64, for the tests.
template <int V>
std::vector<double> correlate_tile(const std::vector<double>& w, const std::vector<double>& x) {
  using Tile = winrs::TileMath<V>;
  if (int(w.size()) != Tile::r || int(x.size()) != Tile::alpha)
    throw nb::value_error("tile sizes must be r (filter unit) and alpha (input tile)");
  double wa[Tile::r], xa[Tile::alpha], wt[Tile::alpha], xt[Tile::alpha], m[Tile::alpha], y[Tile::n];
  std::copy(w.begin(), w.end(), wa);
  std::copy(x.begin(), x.end(), xa);
  Tile::filter(wa, wt);
  Tile::input(xa, xt);
  for (int i = 0; i < Tile::alpha; ++i) m[i] = wt[i] * xt[i];
  Tile::output(m, y);
  return std::vector<double>(y, y + Tile::n);
}

template <int... Vs>
constexpr auto make_tile_table(std::integer_sequence<int, Vs...>) {
  using Fn = std::vector<double> (*)(const std::vector<double>&, const std::vector<double>&);
  return std::array<Fn, sizeof...(Vs)>{&correlate_tile<Vs>...};
}

void check_variant(int v) {
  if (v < 0 || v >= winrs::kNumVariants) throw nb::index_error("variant index out of range");
}

}  // namespace

NB_MODULE(_winrs, m) {
  // The reference H100's opt-in shared memory per block, which plans assume unless told another GPU's.
  m.attr("hopper_smem_per_block") = winrs::kHopperSmemPerBlock;
  // Whether the CUDA kernels were built for sm_90a (Hopper's wgmma kernels, CMakeLists.txt).
#ifdef WINRS_WGMMA_BUILT
  m.attr("wgmma_built") = true;
#else
  m.attr("wgmma_built") = false;
#endif
  m.def("cpu_targets", [] {
    nb::dict d;
    d[winrs::ffi_glue::kTarget] = capsule_of(WinrsBackwardFilterCpu);
    d[winrs::ffi_glue::kDepthTarget] = capsule_of(WinrsBackwardFilter3dCpu);
    d[winrs::ffi_glue::kTargetV2] = capsule_of(WinrsBackwardFilterV2Cpu);
    d[winrs::ffi_glue::kDepthTargetV2] = capsule_of(WinrsBackwardFilter3dV2Cpu);
    d[winrs::ffi_glue::kTargetV1] = capsule_of(WinrsBackwardFilterV1Cpu);
    d[winrs::ffi_glue::kDepthTargetV1] = capsule_of(WinrsBackwardFilter3dV1Cpu);
    d["winrs_grouped_filter_grad"] = capsule_of(WinrsGroupedFilterGradCpu);
    return d;
  });
  m.def("cuda_targets", [] {
    nb::dict d;
#ifdef WINRS_WITH_CUDA
    d[winrs::ffi_glue::kTarget] = capsule_of(WinrsBackwardFilterCuda);
    d[winrs::ffi_glue::kDepthTarget] = capsule_of(WinrsBackwardFilter3dCuda);
    d[winrs::ffi_glue::kTargetV2] = capsule_of(WinrsBackwardFilterV2Cuda);
    d[winrs::ffi_glue::kDepthTargetV2] = capsule_of(WinrsBackwardFilter3dV2Cuda);
    d[winrs::ffi_glue::kTargetV1] = capsule_of(WinrsBackwardFilterV1Cuda);
    d[winrs::ffi_glue::kDepthTargetV1] = capsule_of(WinrsBackwardFilter3dV1Cuda);
    d["winrs_grouped_filter_grad"] = capsule_of(WinrsGroupedFilterGradCuda);
#endif
    return d;
  });
  // Launches in this process of Hopper's TF32 tiles and of the persistent block, either form (0 without the
  // CUDA build): the GPU tests tell which kernels ran.
#ifdef WINRS_WITH_CUDA
  m.def("tf32_tile_launches", &WinrsTf32TileLaunches);
  m.def("persistent_launches", &WinrsPersistentLaunches);
#else
  m.def("tf32_tile_launches", [] { return 0LL; });
  m.def("persistent_launches", [] { return 0LL; });
#endif

  m.def("paths", [] {
    nb::list out;
    for (int i = 0; i < winrs::kNumPaths; ++i) {
      const winrs::PathInfo& p = winrs::kPaths[i];
      nb::dict d;
      d["name"] = p.name;
      d["tensor_cores"] = p.tensor_cores;
      d["storage"] = winrs::storage_name(p.storage);
      d["units_per_step"] = p.units_per_step;
      const winrs::AccuracyBudget budget = winrs::accuracy_budget(static_cast<winrs::Path>(i));
      d["accuracy_budget"] = nb::make_tuple(budget.mare, budget.signed_error);
      d["accuracy_factor"] = winrs::accuracy_factor(static_cast<winrs::Path>(i));
      out.append(d);
    }
    return out;
  });

  m.def("variants", [] {
    nb::list out;
    for (const winrs::Variant& v : winrs::kVariants) {
      nb::dict d;
      d["n"] = v.n;
      d["r"] = v.r;
      d["alpha"] = v.alpha();
      d["alpha_class"] = v.alpha_class();
      nb::list shapes;
      for (const winrs::KernelShape& k : v.shapes)
        shapes.append(
            nb::make_tuple(k.block_oc, k.block_ic, k.gemm_tflops, k.blocks_per_sm, k.mare, k.signed_error));
      d["shapes"] = shapes;
      out.append(d);
    }
    return out;
  });

  // The operand rounding of a path applied to float32 values (for the tests of winrs/numeric.h).
  m.def("round_operand", [](int path, const std::vector<float>& values) {
    if (!winrs::valid_path(path)) throw nb::index_error("path index out of range");
    const winrs::Operand op = winrs::kPaths[path].operand;
    std::vector<float> out;
    for (float v : values)
      out.push_back(op == winrs::Operand::kTF32Split ? winrs::split_tf32(v).high
                                                     : winrs::round_operand(op, v));
    return out;
  });

  m.def("interpolation_point", &winrs::interpolation_point);

  m.def("transform", [](int v) {
    check_variant(v);
    const winrs::Transform t = winrs::transform_of(v);
    return nb::make_tuple(rows(&t.A[0][0], t.alpha, t.n, winrs::kMaxN),
                          rows(&t.G[0][0], t.alpha, t.r, winrs::kMaxR),
                          rows(&t.DT[0][0], t.alpha, t.alpha, winrs::kMaxAlpha));
  });

  m.def("correlate_tile", [](int v, const std::vector<double>& w, const std::vector<double>& x) {
    static constexpr auto table = make_tile_table(std::make_integer_sequence<int, winrs::kNumVariants>{});
    check_variant(v);
    return table[v](w, x);
  });

  m.def(
      "make_plan",
      [](int64_t batch, int64_t in_h, int64_t in_w, int64_t in_c, int64_t out_h, int64_t out_w, int64_t out_c,
         int64_t filter_h, int64_t filter_w, int64_t pad_top, int64_t pad_bottom, int64_t pad_left,
         int64_t pad_right, int path, int reference, int sm_count, int segments, int buckets, int variant0,
         int variant1, bool atomic, int problems, int64_t stride_h, int64_t stride_w,
         int64_t smem_per_block) {
        if (!winrs::valid_path(path) || !winrs::valid_path(reference))
          throw nb::index_error("path index out of range");
        winrs::Shapes shapes{{batch, in_h, in_w, in_c},
                             {batch, out_h, out_w, out_c},
                             {out_c, filter_h, filter_w, in_c},
                             {pad_top, pad_bottom, pad_left, pad_right},
                             {stride_h, stride_w}};
        winrs::BackwardFilterOp op;
        const std::string error = winrs::make_backward_filter(
            shapes,
            winrs::PlanOptions{static_cast<winrs::Path>(path), static_cast<winrs::Path>(reference), sm_count,
                               segments, buckets, variant0, variant1, atomic, problems, smem_per_block},
            &op);
        const winrs::Plan& plan = op.plan;
        nb::dict d;
        d["supported"] = error.empty();
        d["reason"] = error;
        d["variant0"] = plan.variant0;
        d["variant1"] = plan.variant1;
        d["segments"] = plan.segments;
        d["buckets"] = plan.buckets;
        d["chain"] = plan.supported ? plan.grid.chain(0) : 0;  // an unsupported plan has no grid
        d["atomic"] = plan.grid.atomic;
        d["seg_rows"] = plan.grid.seg_rows;
        d["seg_h"] = plan.grid.seg_h;
        d["seg_w"] = plan.grid.seg_w;
        d["image_parts"] = plan.grid.image_parts;
        d["width0"] = plan.grid.width0;
        d["workspace_elems"] = plan.workspace_elems;
        d["baseline_segments"] = plan.baseline_segments;
        d["predicted_seconds"] = plan.predicted_seconds;
        // Kernel 0's work tile on the GPU (variants.h, tile_shape): filter columns, output x input channels,
        // filter rows.
        const winrs::TileShape tile = plan.supported ? winrs::tile_shape(plan.variant0, plan.path, op.problem)
                                                     : winrs::TileShape{0, 0, 0, 0, 0};
        d["work_tile"] = nb::make_tuple(tile.columns, tile.block_oc, tile.block_ic, tile.rows);
        // Whether a 3D layer of this 2D problem may read X in place (winrs_backward_filter_3d).
        d["reads_depth_in_place"] = winrs::reads_depth_in_place(op.problem, plan);
        // Whether Hopper's TF32 T-tap tiles would take this plan (winrs/tap_runs.h): the direct kernel alone
        // on the TF32 or split-TF32 path.
        d["tf32_tap_tiles"] = plan.supported &&
                              (plan.path == winrs::Path::kTf32 || plan.path == winrs::Path::kTf32x3) &&
                              plan.variant0 == 0 && plan.variant1 == 0 &&
                              winrs::tf32_tap_tiles_fit(op.problem, plan.grid, problems, plan.path);
        return d;
      },
      nb::arg("batch"), nb::arg("in_h"), nb::arg("in_w"), nb::arg("in_c"), nb::arg("out_h"), nb::arg("out_w"),
      nb::arg("out_c"), nb::arg("filter_h"), nb::arg("filter_w"), nb::arg("pad_top"), nb::arg("pad_bottom"),
      nb::arg("pad_left"), nb::arg("pad_right"), nb::arg("path"), nb::arg("reference"), nb::arg("sm_count"),
      nb::arg("segments"), nb::arg("buckets") = 0, nb::arg("variant0") = -1, nb::arg("variant1") = -1,
      nb::arg("atomic") = false, nb::arg("problems") = 1, nb::arg("stride_h") = 1, nb::arg("stride_w") = 1,
      nb::arg("smem_per_block") = winrs::kHopperSmemPerBlock);

  // The plan of the direct grouped kernels (winrs/grouped.h), as the handlers derive it.
  m.def(
      "make_grouped_plan",
      [](int64_t batch, int64_t in_h, int64_t in_w, int64_t in_c, int64_t out_h, int64_t out_w, int64_t out_c,
         int64_t filter_h, int64_t filter_w, int64_t groups, int64_t pad_top, int64_t pad_bottom,
         int64_t pad_left, int64_t pad_right, int64_t stride_h, int64_t stride_w, int64_t dilation_h,
         int64_t dilation_w, int path, int sm_count, int64_t splits, int64_t stacked, bool atomic) {
        if (!winrs::valid_path(path)) throw nb::index_error("path index out of range");
        winrs::GroupedShapes s{{batch, in_h, in_w, in_c},
                               {batch, out_h, out_w, out_c},
                               {out_c, filter_h, filter_w, groups > 0 ? in_c / groups : 0},
                               {pad_top, pad_bottom, pad_left, pad_right},
                               {stride_h, stride_w},
                               {dilation_h, dilation_w},
                               groups,
                               stacked};
        winrs::GroupedOp op;
        const std::string error = winrs::make_grouped(
            s, winrs::GroupedOptions{static_cast<winrs::Path>(path), sm_count, splits, atomic}, &op);
        const winrs::GroupedPlan& plan = op.plan;
        nb::dict d;
        d["supported"] = error.empty();
        d["reason"] = error;
        d["tile"] = nb::make_tuple(plan.tile_h, plan.tile_w);
        d["tap_tiles"] = nb::make_tuple(plan.tiles_h, plan.tiles_w);
        d["units"] = plan.units;
        d["tiles"] = plan.tiles;
        // a 1D layer's streamed tile: out_rows x out_cols consecutive positions of its one row
        d["spatial_tile"] = plan.sequence ? nb::make_tuple(int64_t(1), plan.out_rows * plan.out_cols)
                                          : nb::make_tuple(plan.out_rows, plan.out_cols);
        d["tile_images"] = plan.tile_images;
        d["streams"] = plan.streams;
        d["tensor_cores"] = plan.tensor_cores;
        d["smem_bytes"] = plan.smem_bytes;
        d["splits"] = plan.splits;
        d["atomic"] = plan.atomic;
        d["workspace_elems"] = plan.workspace_elems;
        d["predicted_seconds"] = plan.predicted_seconds;
        return d;
      },
      nb::arg("batch"), nb::arg("in_h"), nb::arg("in_w"), nb::arg("in_c"), nb::arg("out_h"), nb::arg("out_w"),
      nb::arg("out_c"), nb::arg("filter_h"), nb::arg("filter_w"), nb::arg("groups"), nb::arg("pad_top"),
      nb::arg("pad_bottom"), nb::arg("pad_left"), nb::arg("pad_right"), nb::arg("stride_h"),
      nb::arg("stride_w"), nb::arg("dilation_h"), nb::arg("dilation_w"), nb::arg("path"), nb::arg("sm_count"),
      nb::arg("splits") = 0, nb::arg("stacked") = 1, nb::arg("atomic") = false);

  m.def(
      "segments",
      [](int out_h, int out_w, int seg_rows, int seg_h, int seg_w, int width0, int buckets, int batch,
         int image_parts) {
        if (out_h <= 0 || out_w <= 0 || seg_rows <= 0 || seg_h <= 0 || seg_w <= 0 || width0 <= 0 ||
            width0 > out_w || buckets <= 0 || batch <= 0 || image_parts <= 0 || image_parts > batch)
          throw nb::value_error("segment grid sizes must be positive, width0 <= out_w, image_parts <= batch");
        winrs::SegmentGrid g{out_h, out_w, seg_rows, seg_h, seg_w, width0, buckets};
        g.batch = batch;
        g.image_parts = image_parts;
        if (buckets > g.kernel_segments(0)) throw nb::value_error("more buckets than primary segments");
        nb::list out;
        for (int z = 0; z < g.count(); ++z) {
          const winrs::Segment s = g.segment(z);
          out.append(nb::make_tuple(s.h_begin, s.h_end, s.w_begin, s.w_end, s.kernel, g.bucket(z), g.link(z),
                                    s.image_begin, s.image_end));
        }
        return out;
      },
      nb::arg("out_h"), nb::arg("out_w"), nb::arg("seg_rows"), nb::arg("seg_h"), nb::arg("seg_w"),
      nb::arg("width0"), nb::arg("buckets"), nb::arg("batch") = 1, nb::arg("image_parts") = 1);
}
