// The partition of the output gradient into Z segments (paper section 3, phase 1, and section 4.3).
//
// Rows: seg_rows bands of seg_h rows; the bottom band also takes the remaining O_H - seg_rows * seg_h rows.
// Columns: the primary region [0, width0) is cut into columns of seg_w (a multiple of r0; the last one may be
// narrower, still a multiple of r0) and runs kernel 0; the residual region [width0, O_W), a multiple of r1,
// forms one more column running kernel 1.
//
// Buckets: each primary segment writes its own bucket (row * primary_cols + col); the residual segment of a
// row adds its result into the bucket of that row's first segment after kernel 0 has finished (the kernels
// run in order on one stream), so the residual column needs no workspace of its own. This departs from the
// paper's one bucket per segment and saves seg_rows x |dW| of workspace.
#pragma once

#include "config.h"

namespace winrs {

struct Segment {
  int h_begin, h_end, w_begin, w_end;
  int kernel;  // 0 or 1: which kernel of the pair
};

struct SegmentGrid {
  int out_h, out_w;
  int seg_rows, seg_h;
  int seg_w, width0;

  WINRS_HD int primary_cols() const { return (width0 + seg_w - 1) / seg_w; }
  WINRS_HD int cols() const { return primary_cols() + (width0 < out_w ? 1 : 0); }
  WINRS_HD int count() const { return seg_rows * cols(); }
  WINRS_HD int buckets() const { return seg_rows * primary_cols(); }
  // Bucket written by segment z; segments of kernel 1 accumulate into it instead of overwriting.
  WINRS_HD int bucket(int z) const {
    const int row = z / cols(), col = z % cols();
    return row * primary_cols() + (col < primary_cols() ? col : 0);
  }

  WINRS_HD Segment segment(int z) const {
    const int row = z / cols(), col = z % cols();
    Segment s;
    s.h_begin = row * seg_h;
    s.h_end = (row == seg_rows - 1) ? out_h : s.h_begin + seg_h;
    if (col < primary_cols()) {
      s.w_begin = col * seg_w;
      s.w_end = (s.w_begin + seg_w < width0) ? s.w_begin + seg_w : width0;
      s.kernel = 0;
    } else {
      s.w_begin = width0;
      s.w_end = out_w;
      s.kernel = 1;
    }
    return s;
  }
};

}  // namespace winrs
