// The partition of the output gradient into Z segments (paper section 3, phase 1, and section 4.3).
//
// Rows: seg_rows bands of seg_h rows; the bottom band also takes the remaining O_H - seg_rows * seg_h rows.
// Columns: the primary region [0, width0) is cut into columns of seg_w (a multiple of r0; the last one may be
// narrower, still a multiple of r0) and runs kernel 0; the residual region [width0, O_W), a multiple of r1,
// forms one more column running kernel 1. Segment z writes bucket z of the (Z x |dW|) bucket array.
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
