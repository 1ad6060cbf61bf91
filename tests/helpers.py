"""Shared test helpers: the float64 reference and the paper's error metric."""

import numpy as np


def reference_filter_grad(x, dy, filter_hw, pads):
    """float64 backward-filter convolution: x N x H x W x C, dy N x OH x OW x K -> dW K x FH x FW x C."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    top, bottom, left, right = pads
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    _, out_h, out_w, _ = dy.shape
    dw = np.zeros((dy.shape[3], *filter_hw, x.shape[3]))
    for a in range(filter_hw[0]):
        for b in range(filter_hw[1]):
            dw[:, a, b, :] = np.einsum("nhwk,nhwc->kc", dy, xp[:, a : a + out_h, b : b + out_w, :])
    return dw


def reference_general_filter_grad(x, dy, filter_hw, strides, pads, dilation=(1, 1), groups=1):
    """float64 filter gradient K x FH x FW x C/G of an NHWC layer with any strides, filter dilation, (non-negative)
    padding ((top, bottom), (left, right)) and feature groups."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    xp = np.pad(x, ((0, 0), *pads, (0, 0)))
    (sh, sw), (dh, dw_), (n, oh, ow, k), c = strides, dilation, dy.shape, x.shape[3]
    dw = np.zeros((k, *filter_hw, c // groups))
    grad = dy.reshape(n, oh, ow, groups, k // groups)
    for a, b in np.ndindex(*filter_hw):
        window = xp[
            :, a * dh : a * dh + sh * (oh - 1) + 1 : sh, b * dw_ : b * dw_ + sw * (ow - 1) + 1 : sw, :
        ]
        window = window.reshape(n, oh, ow, groups, c // groups)
        dw[:, a, b, :] = np.einsum("nhwgk,nhwgc->gkc", grad, window).reshape(k, c // groups)
    return dw


def mare(actual, expected):
    """Mean absolute relative error, the paper's accuracy metric (section 6.3), over the nonzero reference
    entries (entries that only meet padding are exactly zero; callers check those with an absolute bound)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    nonzero = expected != 0
    return float(np.mean(np.abs(actual[nonzero] - expected[nonzero]) / np.abs(expected[nonzero])))
