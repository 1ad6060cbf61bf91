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


def mare(actual, expected):
    """Mean absolute relative error, the paper's accuracy metric (section 6.3), over the nonzero reference
    entries (entries that only meet padding are exactly zero; callers check those with an absolute bound)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    nonzero = expected != 0
    return float(np.mean(np.abs(actual[nonzero] - expected[nonzero]) / np.abs(expected[nonzero])))
