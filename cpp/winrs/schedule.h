// The work decomposition of one kernel of the pair, written once for the CPU executor and the CUDA kernels
// (paper section 5.1): segment -> work tile -> unit.
//
// A work tile is one segment of that kernel, one filter row fh (or `rows` rows from fh: the filter-window
// tile, variants.h), one filter-gradient tile of n columns and one B_N x B_M block of output x input
// channels; on the GPU it is one thread block, on the CPU one work item.
// Input-channel blocks vary fastest so that neighbouring tiles share their dY and X reads in L2.
// Inside a tile, the units of the segment (r-wide pieces of dY rows that meet real input rows for fh, see
// clip_rows) are walked batch fastest, then unit column, then row.
#pragma once

#include "config.h"
#include "problem.h"
#include "segments.h"
#include "tile.h"

namespace winrs {

struct WorkTile {
  int segment;   // z, an index into the SegmentGrid
  int local;     // its number among the kernel's segments (SegmentGrid::kernel_index)
  int slot;      // the tile's place among the tiles of its segment: its semaphore is bucket x tiles + slot
  int fh;        // (first) filter row
  int f0;        // first filter-gradient column of the tile
  int columns;   // its filter-gradient columns: n, or fewer in a balanced cut (TileScheduler::balanced_width)
  int oc0, ic0;  // first output and input channel of the block
};

struct TileScheduler {
  SegmentGrid grid;
  int kernel;                             // 0: the primary columns of the grid, 1: the residual column
  int row_tiles, rows, tiles_per_row, n;  // a tile covers `rows` filter rows and n filter columns
  int block_oc, block_ic, oc_blocks, ic_blocks;
  // 0, or the filter's width where a row's tiles cut it as evenly as they can (the first width %
  // tiles_per_row tiles one column more: 7 = 3 + 2 + 2, 4 = 2 + 2) instead of n columns each and the rest (3
  // + 3 + 1, 3 + 1).
  int balanced_width = 0;

  WINRS_HD int segments() const { return grid.kernel_segments(kernel); }
  WINRS_HD int tiles_per_segment() const { return row_tiles * tiles_per_row * oc_blocks * ic_blocks; }
  WINRS_HD long long count() const { return (long long)segments() * tiles_per_segment(); }
  // Tiles [link_begin(k), link_begin(k + 1)) are the segments of link k of every chain (segments.h): the
  // links follow each other in tile order, so a block never waits for a link that starts after it.
  WINRS_HD long long link_begin(int link) const {
    const long long segs = (long long)link * grid.buckets();
    return (segs < segments() ? segs : segments()) * (long long)tiles_per_segment();
  }
  WINRS_HD WorkTile tile(long long index) const {
    WorkTile t;
    t.slot = int(index % tiles_per_segment());
    t.ic0 = int(index % ic_blocks) * block_ic;
    index /= ic_blocks;
    t.oc0 = int(index % oc_blocks) * block_oc;
    index /= oc_blocks;
    const int col = int(index % tiles_per_row);
    if (balanced_width > 0) {
      const int base = balanced_width / tiles_per_row, extra = balanced_width % tiles_per_row;
      t.f0 = col * base + (col < extra ? col : extra);
      t.columns = base + (col < extra ? 1 : 0);
    } else {
      t.f0 = col * n;
      t.columns = n;
    }
    index /= tiles_per_row;
    t.fh = int(index % row_tiles) * rows;
    t.local = int(index / row_tiles);
    t.segment = grid.segment_of(kernel, t.local);
    return t;
  }
};

WINRS_HD inline TileScheduler make_scheduler(const Problem& p, const SegmentGrid& grid, int kernel, int n,
                                             int block_oc, int block_ic, int rows = 1,
                                             bool balanced = false) {
  return TileScheduler{grid,
                       kernel,
                       int((p.filter_h + rows - 1) / rows),  // a tile may pass the filter's last row too
                       rows,
                       int((p.filter_w + n - 1) / n),  // a filter-row tile may pass the filter's last column
                       n,
                       block_oc,
                       block_ic,
                       int((p.out_c + block_oc - 1) / block_oc),
                       int((p.in_c + block_ic - 1) / block_ic),
                       balanced ? int(p.filter_w) : 0};
}

// The filter-window tile's pieces of a dY row (cuda/wgmma_window.cuh): for segments `widest` positions wide,
// the divisor of that width of at most kWindowMaxWidth whose K-blocks of 16 positions (window_piece_blocks)
// are fullest (the larger of equals), 0 where none fills 70% of them (35 of 48: Inception's 35 x 35 maps).
inline constexpr int kWindowMaxWidth = 62;
// K-blocks of 16 positions a piece takes: 1, 2, 3 or 4.
WINRS_HD inline int window_piece_blocks(int width) { return (width + 15) / 16; }
WINRS_HD inline int window_piece_width(int widest) {
  int best = 0, best_fill = 0;  // fill in 1/64ths
  for (int width = kWindowMaxWidth < widest ? kWindowMaxWidth : widest; width >= 1; --width) {
    if (widest % width != 0) continue;
    const int fill = 64 * width / (window_piece_blocks(width) * 16);
    if (fill > best_fill) best = width, best_fill = fill;
  }
  return best_fill >= 45 ? best : 0;
}

// The units of one work tile: images x clipped rows x unit columns of its segment. Images count from the
// segment's first, image0.
struct UnitWalk {
  int batch, row_begin, rows, units_per_row, w_begin, r, image0;

  WINRS_HD int units() const { return batch * rows * units_per_row; }
};

WINRS_HD inline UnitWalk make_unit_walk(const Problem& p, const Segment& seg, int fh, int r) {
  const RowRange rows = clip_rows(seg.h_begin, seg.h_end, fh, int(p.pad_top), int(p.in_h), int(p.stride_h));
  return UnitWalk{seg.image_end - seg.image_begin,
                  rows.begin,
                  rows.end - rows.begin,
                  (seg.w_end - seg.w_begin) / r,
                  seg.w_begin,
                  r,
                  seg.image_begin};
}

// Position of one unit in the walk; advancing needs no integer division in the loop.
struct UnitCursor {
  int image, col, row;  // row counts from the first clipped row

  WINRS_HD void start(int unit, const UnitWalk& w) {
    image = unit % w.batch;
    col = (unit / w.batch) % w.units_per_row;
    row = (unit / w.batch) / w.units_per_row;
  }
  WINRS_HD void advance(int units, const UnitWalk& w) {
    image += units;
    while (image >= w.batch) {
      image -= w.batch;
      if (++col == w.units_per_row) {
        col = 0;
        ++row;
      }
    }
  }
  WINRS_HD bool valid(const UnitWalk& w) const { return row < w.rows; }
  WINRS_HD int out_row(const UnitWalk& w) const { return w.row_begin + row; }      // dY row
  WINRS_HD int out_col(const UnitWalk& w) const { return w.w_begin + col * w.r; }  // first dY column
};

}  // namespace winrs
