// The partition of the output gradient into Z segments (paper section 3, phase 1, and section 4.3).
//
// Rows: seg_rows bands of seg_h rows; the bottom band also takes the remaining O_H - seg_rows * seg_h rows.
// Columns: the primary region [0, width0) is cut into columns of seg_w (a multiple of r0; the last one may be
// narrower, still a multiple of r0) and runs kernel 0; the residual region [width0, O_W), a multiple of r1,
// forms one more column running kernel 1.
//
// Buckets and chains: kernel 0's segments are numbered s = row * primary_cols + col, kernel 1's (the
// residual column) s = row. Segment s adds into float32 bucket s % B as link s / B of that bucket's chain:
// link 0 of kernel 0 writes the bucket, every later link adds into it, in link order (serial split-K, after
// CUTLASS: on the GPU a per-tile semaphore orders the links; the CPU runs the links one after the other).
// Kernel 1 runs after kernel 0 has finished (in order on one stream), so all its links add. With B equal to
// kernel 0's segment count every segment has its own bucket (the paper's phase 3, except that the residual
// segments share kernel 0's buckets); with B = 1 the workspace holds no bucket at all, only semaphores. The
// buckets are then summed with Kahan compensation (reduction.h); bucket 0 is dW itself.
//
// Image parts: the batch may be cut into `image_parts` ranges of consecutive images (sizes differing by at
// most one), each segment covering one of them; segments are numbered part by part. The filter-window tile
// takes parts instead of row bands, so that its blocks walk whole images row after row and reuse the input
// rows that neighbouring output-gradient rows share (cuda/wgmma_window.cuh).
//
// Atomic adds (`atomic`, with B = 1): every segment adds into dW as it finishes, in no fixed order (atomic
// float32 adds on the GPU into a zeroed dW; the CPU runs the links in order). No workspace, no waiting and no
// reduction pass, at the price of a sum whose order, and so whose last bits, change from run to run.
#pragma once

#include "config.h"

namespace winrs {

struct Segment {
  int h_begin, h_end, w_begin, w_end;
  int kernel;                  // 0 or 1: which kernel of the pair
  int image_begin, image_end;  // its images (all of the batch without image parts)
};

struct SegmentGrid {
  int out_h, out_w;
  int seg_rows, seg_h;
  int seg_w, width0;
  int bucket_count;                // B: between 1 and kernel_segments(0)
  bool atomic = false;             // segments add into dW by atomic adds, in any order (B = 1)
  int batch = 1, image_parts = 1;  // images of the problem and the ranges they are cut into

  WINRS_HD int primary_cols() const { return (width0 + seg_w - 1) / seg_w; }
  WINRS_HD int cols() const { return primary_cols() + (width0 < out_w ? 1 : 0); }
  WINRS_HD int part_segments() const { return seg_rows * cols(); }  // the segments of one image part
  WINRS_HD int count() const { return image_parts * part_segments(); }
  WINRS_HD int buckets() const { return bucket_count; }
  // Segments of one kernel of the pair (0: the primary columns, 1: the residual column).
  WINRS_HD int kernel_segments(int kernel) const { return image_parts * part_kernel_segments(kernel); }
  WINRS_HD int part_kernel_segments(int kernel) const {
    return kernel == 0 ? seg_rows * primary_cols() : (width0 < out_w ? seg_rows : 0);
  }
  // Segment z of the `local`-th segment of one kernel (the inverse of kernel_index).
  WINRS_HD int segment_of(int kernel, int local) const {
    const int per_part = part_kernel_segments(kernel), part = local / per_part, rest = local % per_part;
    const int first = part * part_segments();
    return kernel == 0 ? first + (rest / primary_cols()) * cols() + rest % primary_cols()
                       : first + rest * cols() + primary_cols();
  }
  // Links in the longest chain of one kernel's segments: 1 when each has a bucket of its own.
  WINRS_HD int chain(int kernel) const { return (kernel_segments(kernel) + bucket_count - 1) / bucket_count; }
  // Image part, row band and column of segment z (segments are numbered part by part, then row by row).
  struct Place {
    int part, row, col;
  };
  WINRS_HD Place place(int z) const {
    const int rest = z % part_segments();
    return Place{z / part_segments(), rest / cols(), rest % cols()};
  }
  // Number of segment z among its kernel's segments.
  WINRS_HD int kernel_index(int z) const {
    const Place at = place(z);
    return at.col < primary_cols() ? at.part * part_kernel_segments(0) + at.row * primary_cols() + at.col
                                   : at.part * part_kernel_segments(1) + at.row;
  }
  // Bucket and link of the segment numbered `local` among its kernel's segments.
  WINRS_HD int bucket_of(int local) const { return local % bucket_count; }
  WINRS_HD int link_of(int local) const { return local / bucket_count; }
  WINRS_HD int bucket(int z) const { return bucket_of(kernel_index(z)); }
  WINRS_HD int link(int z) const { return link_of(kernel_index(z)); }

  WINRS_HD Segment segment(int z) const {
    const Place at = place(z);
    Segment s;
    s.image_begin = int((long long)at.part * batch / image_parts);
    s.image_end = int((long long)(at.part + 1) * batch / image_parts);
    s.h_begin = at.row * seg_h;
    s.h_end = (at.row == seg_rows - 1) ? out_h : s.h_begin + seg_h;
    if (at.col < primary_cols()) {
      s.w_begin = at.col * seg_w;
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
