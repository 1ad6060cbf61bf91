// Staging (Algorithm 3, lines 1-7): global memory -> registers -> transforms in FP32 registers -> GEMM
// operands in shared memory, in load phases that the main loop interleaves with the parts of the GEMM. Two
// policies, picked per path by OmegaConfig::chunked: chunks of channels (16-bit and TF32 paths) or one unit
// per warp (FP32 and split TF32, where it measured faster). Both give the loads of a phase the GEMM part's
// time.
#pragma once

#include <type_traits>

#include "cuda/omega_config.cuh"
#include "winrs/schedule.h"

namespace winrs::cuda {

// The layer's sizes a stager indexes X and dY with, and one work tile's offsets from a dY position to its X
// position. Every stager (chunks, units, copies, the filter-row tile's) is one.
struct StagingGeometry {
  int out_c, in_c, out_h, out_w, in_h, in_w;
  int row_offset;  // input row = dY row + fh - pad_top
  int col_offset;  // input column = dY column + f0 (+ the column within the tile) - pad_left

  __device__ void init_geometry(const Problem& p, const WorkTile& work) {
    out_c = int(p.out_c), in_c = int(p.in_c), out_h = int(p.out_h), out_w = int(p.out_w);
    in_h = int(p.in_h), in_w = int(p.in_w);
    row_offset = work.fh - int(p.pad_top);
    col_offset = work.f0 - int(p.pad_left);
  }
};

// Transforms the P channels of the first Cols columns of raw data (two channels at a time on the 16-bit
// paths, packed into one word) and stores their alpha rows at dst, dst + K stride, ... (the side's K-row
// stride). OneRounding (tile.h, one_rounding): on the 16-bit paths the transform runs on the packed words
// as loaded (device.cuh, PackedPair) instead of in FP32, with the same result.
template <class C, int Cols, bool OneRounding, int N, int P, typename T, class Transform>
__device__ __forceinline__ void transform_store(const Channels<P, T> (&raw)[N], typename C::Smem* dst,
                                                int stride, Transform transform) {
  static_assert(Cols <= N);
  constexpr bool pairs = kSixteenBit<C::operand>;
  static_assert(!pairs || P % 2 == 0);
  constexpr int words = pairs ? P / 2 : P;
  uint32_t rows[C::alpha][words];
  auto column = [&](auto q, float (&out)[C::alpha]) {
    float in[Cols];
    static_for<0, Cols>([&](auto e) { in[e] = raw[e][decltype(q)::value]; });
    transform(in, out);
  };
  static_for<0, words>([&](auto word) {
    constexpr int w = decltype(word)::value;
    if constexpr (pairs && OneRounding) {
      using Packed = PackedPair<C::operand>;
      static_assert(std::is_same_v<typename Packed::Pair,
                                   std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>>,
                    "operands packed as stored");
      Packed in[Cols], out[C::alpha];
      static_for<0, Cols>([&](auto e) {
        const uint32_t word = raw[e].word(w);
        in[e] = Packed(*reinterpret_cast<const typename Packed::Pair*>(&word));
      });
      transform(in, out);
#pragma unroll
      for (int i = 0; i < C::alpha; ++i) rows[i][w] = out[i].bits();
    } else if constexpr (pairs) {
      float even[C::alpha], odd[C::alpha];
      column(std::integral_constant<int, 2 * w>{}, even);
      column(std::integral_constant<int, 2 * w + 1>{}, odd);
#pragma unroll
      for (int i = 0; i < C::alpha; ++i) rows[i][w] = operand_pair<C::operand>(even[i], odd[i]);
    } else {
      float out[C::alpha];
      column(word, out);
#pragma unroll
      for (int i = 0; i < C::alpha; ++i) rows[i][w] = operand_word<C::operand>(out[i]);
    }
  });
#pragma unroll
  for (int i = 0; i < C::alpha; ++i) store_words(dst + i * C::K * stride, rows[i]);
}

// Filter transforms (G w) of dY units and input transforms (D^T x) of X tiles, as GEMM operands.
template <class C, int N, int P, typename T>
__device__ __forceinline__ void store_filter_rows(const Channels<P, T> (&raw)[N], typename C::Smem* dst) {
  transform_store<C, C::r, C::Tile::kFilterOneRounding>(
      raw, dst, C::gs_stride, [](const auto& unit, auto& out) { C::Tile::filter(unit, out); });
}

template <class C, int N, int P, typename T>
__device__ __forceinline__ void store_input_rows(const Channels<P, T> (&raw)[N], typename C::Smem* dst) {
  transform_store<C, C::alpha, C::Tile::kInputOneRounding>(
      raw, dst, C::ds_stride, [](const auto& tile, auto& out) { C::Tile::input(tile, out); });
}

// Chunk staging: in each load phase a thread stages one chunk (OmegaConfig): filter_chunk consecutive
// channels of one unit's dY rows or input_chunk of its X tile, read with vector loads of up to 16 bytes per
// column. Its unit's position is a cursor that moves on by K units per step.
template <class C>
struct ChunkStager : StagingGeometry {
  using T = typename C::Storage;
  using Smem = typename C::Smem;
  using Tile = typename C::Tile;
  static constexpr int kFilterElements = C::filter_chunk * C::r, kInputElements = C::input_chunk * C::alpha;
  using FilterRaw = Channels<C::filter_chunk, T>[C::r];
  using InputRaw = Channels<C::input_chunk, T>[C::alpha];
  static_assert(sizeof(FilterRaw) == kFilterElements * sizeof(T) &&
                    sizeof(InputRaw) == kInputElements * sizeof(T),
                "both views of the raw registers are whole words");

  struct Slot {   // this thread's chunk in one load phase
    bool active;  // fewer chunks than threads in the last phase
    bool filter;  // dY side (filter transform) or X side (input transform); uniform in a warp
    int k;        // the unit's K row in the stage
    int channel;  // first channel of the chunk within the block
    UnitCursor cursor;
  };

  const T* out_grad;
  const T* input;
  int oc0, ic0;
  bool vectors;  // both channel counts and base pointers allow the chunk-wide loads
  UnitWalk walk;
  Slot slots[C::phases];
  // The current phase's chunk, as loaded: r columns of filter_chunk channels or alpha of input_chunk, in the
  // same registers.
  Channels<(kFilterElements > kInputElements ? kFilterElements : kInputElements), T> raw;
  __device__ FilterRaw& filter_raw() { return reinterpret_cast<FilterRaw&>(raw); }
  __device__ const FilterRaw& filter_raw() const { return reinterpret_cast<const FilterRaw&>(raw); }
  __device__ InputRaw& input_raw() { return reinterpret_cast<InputRaw&>(raw); }
  __device__ const InputRaw& input_raw() const { return reinterpret_cast<const InputRaw&>(raw); }

  __device__ void init(int tid, const Problem& p, const WorkTile& work, const UnitWalk& w, const T* x,
                       const T* dy) {
    out_grad = dy;
    input = x;
    init_geometry(p, work);
    oc0 = work.oc0, ic0 = work.ic0;
    // Elements per load on each side: a chunk's width, at most 16 bytes.
    constexpr int filter_vector = C::filter_chunk * sizeof(T) < 16 ? C::filter_chunk : 16 / sizeof(T);
    constexpr int input_vector = C::input_chunk * sizeof(T) < 16 ? C::input_chunk : 16 / sizeof(T);
    vectors = out_c % filter_vector == 0 && in_c % input_vector == 0 &&
              reinterpret_cast<uintptr_t>(dy) % (filter_vector * sizeof(T)) == 0 &&
              reinterpret_cast<uintptr_t>(x) % (input_vector * sizeof(T)) == 0;
    walk = w;
#pragma unroll
    for (int ph = 0; ph < C::phases; ++ph) {
      Slot& slot = slots[ph];
      const int c = ph * kThreads + tid;
      slot.active = c < C::chunks;
      slot.filter = c < C::filter_chunks;
      const int local = slot.filter ? c : c - C::filter_chunks;
      const int width = slot.filter ? C::filter_chunk : C::input_chunk;
      const int per_unit = (slot.filter ? C::BN : C::BM) / width;
      slot.k = local / per_unit;
      slot.channel = (local % per_unit) * width;
      slot.cursor.start(slot.k, walk);
    }
  }

  // Phase Ph's chunk of the next step into registers (fetch_data), with the vector loads or the element-wise
  // ones (see load_channels; load_phase picks); its cursor moves on by one step.
  template <int Ph, bool Vectors>
  __device__ void load(std::integral_constant<bool, Vectors> vector_loads) {
    Slot& slot = slots[Ph];
    if (!slot.active) return;
    const bool valid = slot.cursor.valid(walk);
    const int oh = slot.cursor.out_row(walk), w0 = slot.cursor.out_col(walk);
    if (slot.filter) {
      const int oc = oc0 + slot.channel;
      const T* src = out_grad + (valid ? ((slot.cursor.image * out_h + oh) * out_w + w0) * out_c + oc : 0);
#pragma unroll
      for (int e = 0; e < C::r; ++e)
        load_channels(filter_raw()[e], src + e * out_c, valid, out_c - oc, vector_loads);
    } else {
      // Column e at first + e in_c (outside the tensor at the width padding, where nothing is loaded).
      const int ic = ic0 + slot.channel, col0 = w0 + col_offset;
      const int first = valid ? ((slot.cursor.image * in_h + oh + row_offset) * in_w + col0) * in_c + ic : 0;
#pragma unroll
      for (int e = 0; e < C::alpha; ++e) {
        const bool in_bounds = valid && column_in_bounds(col0 + e, in_w);
        load_channels(input_raw()[e], input + (first + e * in_c), in_bounds, in_c - ic, vector_loads);
      }
    }
    slot.cursor.advance(C::K, walk);
  }

  // Phase Ph's chunk through its transform in FP32 registers, stored as GEMM operands in its K row of
  // `stage`.
  template <int Ph>
  __device__ void store(Smem* stage) const {
    const Slot& slot = slots[Ph];
    if (!slot.active) return;
    if (slot.filter) {
      store_filter_rows<C>(filter_raw(), stage + slot.k * C::gs_stride + slot.channel);
    } else {
      store_input_rows<C>(input_raw(), stage + C::filter_stage + slot.k * C::ds_stride + slot.channel);
    }
  }
};

// Unit staging: in each load phase each warp stages one unit, each thread FC consecutive output channels of
// its dY rows and IC consecutive input channels of its X tile: one cursor and one address for both sides.
template <class C>
struct UnitStager : StagingGeometry {
  using T = typename C::Storage;
  using Smem = typename C::Smem;
  static constexpr int kUnitsPerPhase = kWarps;

  const T* out_grad;
  const T* input;
  int unit, filter_c, input_c, oc, ic;
  bool vectors;  // both channel counts and base pointers allow the FC- and IC-wide loads
  UnitWalk walk;
  UnitCursor cursor;
  Channels<C::FC, T> filter_raw[C::r];     // the dY unit, as loaded
  Channels<C::IC, T> input_raw[C::alpha];  // the X tile, as loaded

  __device__ void init(int tid, const Problem& p, const WorkTile& work, const UnitWalk& w, const T* x,
                       const T* dy) {
    out_grad = dy;
    input = x;
    init_geometry(p, work);
    unit = tid / 32;
    filter_c = (tid % 32) * C::FC;
    input_c = (tid % 32) * C::IC;
    oc = work.oc0 + filter_c;
    ic = work.ic0 + input_c;
    vectors = out_c % C::FC == 0 && reinterpret_cast<uintptr_t>(dy) % (sizeof(T) * C::FC) == 0 &&
              in_c % C::IC == 0 && reinterpret_cast<uintptr_t>(x) % (sizeof(T) * C::IC) == 0;
    walk = w;
    cursor.start(unit, walk);
  }

  // The next phase's unit into registers (fetch_data), then the cursor moves on by one phase. Loads as
  // ChunkStager::load.
  template <int Ph, bool Vectors>
  __device__ void load(std::integral_constant<bool, Vectors> vector_loads) {
    const bool valid = cursor.valid(walk);
    const int oh = cursor.out_row(walk), w0 = cursor.out_col(walk);
    const int grad_at = valid ? ((cursor.image * out_h + oh) * out_w + w0) * out_c + oc : 0;
#pragma unroll
    for (int e = 0; e < C::r; ++e)
      load_channels(filter_raw[e], out_grad + grad_at + e * out_c, valid, out_c - oc, vector_loads);
    const int col0 = w0 + col_offset;
    const int first = valid ? ((cursor.image * in_h + oh + row_offset) * in_w + col0) * in_c + ic : 0;
#pragma unroll
    for (int e = 0; e < C::alpha; ++e) {
      const bool in_bounds = valid && column_in_bounds(col0 + e, in_w);
      load_channels(input_raw[e], input + (first + e * in_c), in_bounds, in_c - ic, vector_loads);
    }
    cursor.advance(kUnitsPerPhase, walk);
  }

  // The unit's transforms, stored as GEMM operands at K row Ph * 8 + unit of `stage`.
  template <int Ph>
  __device__ void store(Smem* stage) const {
    const int k = Ph * kUnitsPerPhase + unit;
    store_filter_rows<C>(filter_raw, stage + k * C::gs_stride + filter_c);
    store_input_rows<C>(input_raw, stage + C::filter_stage + k * C::ds_stride + input_c);
  }
};

// Copy staging of the direct kernel on the tensor-core paths (OmegaConfig::copy): its transforms are the
// identity, so X and dY go from global to shared memory by cp.async, 16 bytes per copy, with no registers
// between. Each thread copies C::copy_pieces 16-byte pieces of one unit (the unit's pieces interleaved among
// its threads, so that neighbouring threads read neighbouring bytes), on both sides, for `passes` units per
// step; a unit's place in the walk comes from its number by two fast divisions (a cursor stepping 64 units at
// once through a batch of 1 would loop 64 times), paid once per unit and thread. Needs channel counts that
// are multiples of 16 bytes and 16-byte aligned tensors (launch_direct checks).
template <class C>
struct CopyStager : StagingGeometry {
  using T = typename C::Storage;
  using Smem = typename C::Smem;
  static_assert(sizeof(T) == sizeof(Smem), "the operands are staged as stored");
  static constexpr int kElements = 16 / int(sizeof(T));          // per copy
  static constexpr int kPieces = C::copy_pieces;                 // per thread, unit and side
  static constexpr int kPerUnit = C::BN / kElements / kPieces;   // threads per unit
  static constexpr int kUnitsPerPass = kThreads / kPerUnit;      // units the block copies at once
  static constexpr int kPasses = C::copy_units / kUnitsPerPass;  // per thread and step
  static_assert(kPerUnit * kPieces * kElements == C::BN && kThreads % kPerUnit == 0 &&
                kPasses * kUnitsPerPass == C::copy_units);

  const T* out_grad;  // dY and X at the block's first channels
  const T* input;
  int channel, first_unit, next_unit;  // channel of piece 0; next_unit: the first unit of the next step
  int oc_left, ic_left;                // channels of the block within the layer
  UnitWalk walk;
  FastDivider by_batch, by_row;

  __device__ void init(int tid, const Problem& p, const WorkTile& work, const UnitWalk& w, const T* x,
                       const T* dy) {
    init_geometry(p, work);
    channel = (tid % kPerUnit) * kElements;
    first_unit = tid / kPerUnit;
    next_unit = 0;
    oc_left = out_c - work.oc0;
    ic_left = in_c - work.ic0;
    out_grad = dy + work.oc0;
    input = x + work.ic0;
    walk = w;
    by_batch.init(w.batch);
    by_row.init(w.units_per_row);
  }

  __device__ int steps() const { return (walk.units() + C::copy_units - 1) / C::copy_units; }

  // The next step's units into `stage` (copy_substeps stage layouts of K units each); commits no group.
  __device__ void issue(Smem* stage) {
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int k = first_unit + i * kUnitsPerPass, u = next_unit + k;
      const int q = by_batch.div(u), image = u - q * walk.batch;
      const int row = by_row.div(q), col = q - row * walk.units_per_row;
      const bool valid = row < walk.rows;
      const int oh = walk.row_begin + row, ow = walk.w_begin + col * C::r;
      const int in_col = ow + col_offset;
      const bool input_valid = valid && column_in_bounds(in_col, in_w);
      const T* grad_unit = out_grad + (valid ? ((image * out_h + oh) * out_w + ow) * out_c : 0);
      const T* input_unit =
          input + (input_valid ? ((image * in_h + oh + row_offset) * in_w + in_col) * in_c : 0);
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        const int c = channel + j * kPerUnit * kElements;
        const bool grad_ok = valid && c < oc_left, input_ok = input_valid && c < ic_left;
        cp_async_16(stage + C::grad_offset(k, c), grad_unit + (grad_ok ? c : 0), grad_ok);
        cp_async_16(stage + C::input_offset(k, c), input_unit + (input_ok ? c : 0), input_ok);
      }
    }
    next_unit += C::copy_units;
  }
};

template <class C>
using Stager = std::conditional_t<C::chunked, ChunkStager<C>, UnitStager<C>>;

// Load phase Ph with the vector loads or the element-wise ones: chosen at compile time (a
// std::integral_constant), or by one uniform branch per phase (a bool).
template <int Ph, class S, bool Vectors>
__device__ __forceinline__ void load_phase(S& stager, std::integral_constant<bool, Vectors> vectors) {
  stager.template load<Ph>(vectors);
}

template <int Ph, class S>
__device__ __forceinline__ void load_phase(S& stager, bool vectors) {
  if (vectors) {
    stager.template load<Ph>(std::true_type{});
  } else {
    stager.template load<Ph>(std::false_type{});
  }
}

}  // namespace winrs::cuda
