// Shape of one 2D backward-filter convolution in the canonical layout the kernels use:
// X: N x I_H x I_W x I_C, dY: N x O_H x O_W x O_C, dW: O_C x F_H x F_W x I_C (paper Table 1), stride 1.
#pragma once

#include <cstdint>

#include "config.h"

namespace winrs {

struct Problem {
  int64_t batch, in_h, in_w, in_c;
  int64_t out_h, out_w, out_c;
  int64_t filter_h, filter_w;
  int64_t pad_top, pad_bottom, pad_left, pad_right;

  WINRS_HD int64_t input_elems() const { return batch * in_h * in_w * in_c; }
  WINRS_HD int64_t grad_elems() const { return batch * out_h * out_w * out_c; }
  WINRS_HD int64_t filter_elems() const { return out_c * filter_h * filter_w * in_c; }
  // Direct-convolution FLOPs, the convention of the paper's section 6.2 and of the baselines.
  WINRS_HD double direct_flops() const {
    return 2.0 * batch * out_h * out_w * out_c * filter_h * filter_w * in_c;
  }
};

}  // namespace winrs
