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


def reference_general_filter_grad(x, dy, window, strides, pads, dilation=None, groups=1):
    """float64 filter gradient K x [FD x] FH x FW x C/G of a channels-last layer of any rank (N x spatial x C)
    with any strides, filter dilation, (non-negative) padding (one (before, after) pair per spatial axis) and
    feature groups."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    rank, n, k, c = len(window), dy.shape[0], dy.shape[-1], x.shape[-1]
    dilation = dilation or (1,) * rank
    xp = np.pad(x, ((0, 0), *pads, (0, 0)))
    out = dy.shape[1:-1]
    dw = np.zeros((k, *window, c // groups))
    grad = dy.reshape(n, *out, groups, k // groups)
    for tap in np.ndindex(*window):
        view = xp[(slice(None), *(
            slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in zip(tap, dilation, strides, out, strict=True)
        ))]  # fmt: skip
        view = view.reshape(n, *out, groups, c // groups)
        dw[(slice(None), *tap)] = np.einsum(
            grad, [0, *range(1, rank + 1), 20, 21], view, [0, *range(1, rank + 1), 20, 22], [20, 21, 22]
        ).reshape(k, c // groups)
    return dw


def mare(actual, expected):
    """Mean absolute relative error, the paper's accuracy metric (section 6.3), over the nonzero reference
    entries (entries that only meet padding are exactly zero; callers check those with an absolute bound)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    nonzero = expected != 0
    return float(np.mean(np.abs(actual[nonzero] - expected[nonzero]) / np.abs(expected[nonzero])))
