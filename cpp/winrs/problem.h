// Shape of one 2D backward-filter convolution in the canonical layout the kernels use:
// X: N x I_H x I_W x I_C, dY: N x O_H x O_W x O_C, dW: O_C x F_H x F_W x I_C (paper Table 1). Strides other
// than 1 only where the plan runs the direct kernel's filter-row tile, which reads X at oh s_h + fh -
// pad_top, ow s_w + fw - pad_left (DWM's pieces on copies otherwise, in winrs_jax's planner).
#pragma once

#include <cstdint>

#include "config.h"
#include "smem.h"

namespace winrs {

struct Problem {
  int64_t batch, in_h, in_w, in_c;
  int64_t out_h, out_w, out_c;
  int64_t filter_h, filter_w;
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t stride_h = 1, stride_w = 1;
  // The opt-in shared memory per block of the GPU the problem is planned for (smem.h): its tiles fit it.
  int64_t smem_per_block = kHopperSmemPerBlock;

  WINRS_HD constexpr bool strided() const { return stride_h != 1 || stride_w != 1; }

  WINRS_HD int64_t input_elems() const { return batch * in_h * in_w * in_c; }
  WINRS_HD int64_t grad_elems() const { return batch * out_h * out_w * out_c; }
  WINRS_HD int64_t filter_elems() const { return out_c * filter_h * filter_w * in_c; }
  // Direct-convolution FLOPs, the convention of the paper's section 6.2 and of the baselines.
  WINRS_HD double direct_flops() const {
    return 2.0 * batch * out_h * out_w * out_c * filter_h * filter_w * in_c;
  }
};

// A 3D layer whose X the kernels read in place (paper section 3, Level 2, without the depth-shifted copies):
// the stacked problems are the filter's depth taps fd, their images the N x OD depth slices of dY, and image
// n OD + od of tap fd meets X's depth slice od stride + fd dilation - pad of sample n, zeros outside 0 .. D -
// 1 (the depth padding) and for taps past the filter's `taps`. in_depth 0: no view, image i of every problem
// is X's image i. Layers of few channels pack in_c / channels taps into a problem's input channels: X has
// `channels` channels, and input channel i of problem g is X's channel i % channels of tap
// g (in_c / channels) + i / channels (0: one tap per problem, X's channels the problem's).
struct DepthView {
  int in_depth = 0, out_depth = 1, stride = 1, dilation = 1, pad = 0;
  int taps = 0, channels = 0;

  WINRS_HD bool on() const { return in_depth > 0; }
  // Depth slice (of sample image / out_depth) of X that image `image` of tap fd meets; outside 0 .. D - 1 in
  // the padding.
  WINRS_HD int slice(int image, int fd) const { return image % out_depth * stride + fd * dilation - pad; }
  // X's image of image `image` of tap fd, or -1 in the padding (zeros).
  WINRS_HD int64_t input_image(int image, int fd) const {
    const int d = slice(image, fd);
    return d >= 0 && d < in_depth && fd < taps ? int64_t(image / out_depth) * in_depth + d : -1;
  }
  // The depth tap of problem `problem`'s input channel `channel` (of in_c), X's channel of it, and X's
  // channels.
  WINRS_HD int tap_of(int problem, int channel, int in_c) const {
    return channels ? problem * (in_c / channels) + channel / channels : problem;
  }
  WINRS_HD int x_channel(int channel) const { return channels ? channel % channels : channel; }
  WINRS_HD int x_channels(int in_c) const { return channels ? channels : in_c; }
};

}  // namespace winrs
