"""Grouped and depthwise layers on the direct kernels (cpp/winrs/grouped.h): the CPU handler runs the same
tasks, splits and FP32 sums as the CUDA kernel, so these tests check its index math on every CI run."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import reference_general_filter_grad
from jax import lax

import winrs_jax
from winrs_jax import _ffi, _winrs
from winrs_jax.planner import PlannerOptions

NHWC = ("NHWC", "HWIO", "NHWC")


def _reference(x, dy, filter_hw, strides, pads, dilation, groups):
    """float64 dW (FH x FW x C/G x K, HWIO) of X (N x H x W x C) and dY (N x OH x OW x K)."""
    return reference_general_filter_grad(x, dy, filter_hw, strides, pads, dilation, groups).transpose(
        1, 2, 3, 0
    )


def _filter_grad(x, dy, w_shape, strides, pads, dilation, groups, options=None, dn=NHWC):
    return winrs_jax.conv_backward_filter(x, dy, rhs_shape=w_shape, window_strides=strides, padding=pads,
                                          rhs_dilation=dilation, dimension_numbers=dn, feature_group_count=groups,
                                          options=options)  # fmt: skip


CASES = [
    # x shape (NHWC), filter (FH, FW), channel multiplier, groups, strides, padding, dilation
    ((2, 12, 13, 8), (3, 3), 1, 8, (1, 1), ((1, 1), (1, 1)), (1, 1)),  # depthwise 3x3
    ((2, 12, 13, 8), (3, 3), 2, 8, (2, 2), ((1, 1), (1, 1)), (1, 1)),  # multiplier 2, stride 2
    ((1, 15, 16, 6), (5, 5), 3, 6, (3, 2), ((2, 2), (2, 1)), (1, 1)),  # multiplier 3, strides 3 and 2
    ((2, 17, 19, 4), (3, 3), 4, 4, (4, 4), ((0, 1), (2, 0)), (1, 1)),  # multiplier 4, stride 4
    ((2, 16, 18, 8), (3, 3), 1, 8, (1, 1), ((2, 2), (3, 3)), (2, 3)),  # dilations 2 and 3
    ((1, 20, 21, 4), (3, 3), 1, 4, (2, 2), ((2, 2), (2, 2)), (2, 2)),  # dilation with stride (lax's DeepLab)
    ((1, 40, 40, 3), (31, 31), 1, 3, (1, 1), ((15, 15), (15, 15)), (1, 1)),  # RepLKNet 31x31
    ((2, 18, 20, 4), (11, 13), 1, 4, (1, 1), ((5, 5), (6, 6)), (1, 1)),  # prime widths
    ((2, 10, 11, 4), (1, 7), 1, 4, (1, 1), ((0, 0), (3, 3)), (1, 1)),  # one row, seven taps
    ((2, 12, 13, 8), (3, 3), 1, 2, (1, 1), ((1, 1), (1, 1)), (1, 1)),  # 2 groups of 4 channels
    ((2, 12, 13, 16), (3, 3), 2, 4, (2, 1), ((1, 1), (1, 1)), (1, 1)),  # 4 groups of 4 -> 8
    ((2, 9, 10, 24), (2, 5), 1, 3, (1, 1), ((0, 1), (2, 2)), (1, 1)),  # 3 groups of 8 (the widest direct)
    ((2, 7, 9, 40), (3, 3), 1, 40, (1, 1), ((1, 1), (1, 1)), (1, 1)),  # 40 channels: a part-filled warp
    ((2, 9, 11, 130), (3, 3), 1, 130, (1, 1), ((1, 1), (0, 2)), (1, 1)),  # 130: a second block of one lane
    # Maps wider than 24 columns: the GPU's streaming kernel (rows in tiles of 16, the last column part-filled)
    ((2, 20, 30, 64), (3, 3), 1, 64, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ((2, 17, 26, 96), (4, 4), 1, 96, (1, 1), ((1, 2), (2, 1)), (1, 1)),  # 4x4, uneven padding, 1.5 warps
    ((1, 19, 27, 72), (5, 5), 1, 72, (1, 1), ((2, 2), (2, 2)), (1, 1)),  # 5x5, a second block of 8 channels
    ((2, 18, 30, 32), (3, 3), 2, 32, (1, 1), ((1, 1), (1, 1)), (1, 1)),  # multiplier 2: an X channel a lane
    ((1, 17, 29, 24), (5, 5), 4, 24, (1, 1), ((2, 2), (2, 2)), (1, 1)),  # multiplier 4, 1.5 blocks
    ((1, 9, 26, 8), (4, 4), 8, 8, (1, 1), ((1, 2), (2, 1)), (1, 1)),  # multiplier 8: X rows padded
    ((2, 12, 21, 64), (7, 7), 1, 64, (1, 1), ((3, 3), (3, 3)), (1, 1)),  # 7x7, 21 columns in a tile of 32
    # 16-bit 7x7 on tensor cores (the band kernel): X rows in pairs, the last tile's odd count (5 + 6) padded
    ((1, 37, 30, 64), (7, 7), 1, 64, (1, 1), ((3, 3), (3, 3)), (1, 1)),
    ((3, 14, 13, 72), (7, 7), 1, 72, (1, 1), ((3, 3), (3, 3)), (1, 1)),  # 2 images a tile; 64 + 8 channels
    ((5, 9, 8, 64), (7, 7), 1, 64, (1, 1), ((2, 4), (3, 3)), (1, 1)),  # 4 images a tile, uneven padding
    # ... and larger 16-bit filters in tap tiles of 7x7, each a unit of blocks (11 = 7 + 4, 13 = 7 + 6; 31x31)
    ((1, 20, 24, 64), (11, 13), 1, 64, (1, 1), ((5, 5), (6, 6)), (1, 1)),
    ((1, 34, 36, 64), (31, 31), 1, 64, (1, 1), ((15, 15), (15, 15)), (1, 1)),
    # Maps of 16 columns or less: 2 or 4 images side by side in a streamed tile, the last tile part-filled
    ((3, 14, 13, 64), (5, 5), 1, 64, (1, 1), ((2, 2), (2, 2)), (1, 1)),
    ((5, 7, 7, 64), (3, 3), 1, 64, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ((3, 9, 10, 32), (3, 3), 2, 32, (1, 1), ((1, 1), (1, 1)), (1, 1)),  # multiplier 2, 2 images a tile
    # Stride 2 streamed: a tile's X rows as stages, a dY row at every other one
    ((2, 20, 70, 64), (3, 3), 1, 64, (2, 2), ((1, 1), (1, 1)), (1, 1)),  # 35 output columns: two tiles a row
    ((3, 13, 15, 64), (5, 5), 1, 64, (2, 2), ((2, 2), (2, 1)), (1, 1)),  # 7x7 outputs: 4 images a tile
    # 1D layers streamed: tiles of 8 x 32 consecutive positions, the last tile and row part-filled
    ((2, 1, 300, 64), (1, 4), 1, 64, (1, 1), ((0, 0), (3, 0)), (1, 1)),  # Mamba's causal k = 4
    ((3, 1, 70, 96), (1, 5), 1, 96, (1, 1), ((0, 0), (2, 2)), (1, 1)),  # k = 5, 1.5 blocks of 16-bit channels
    ((2, 1, 41, 64), (1, 2), 1, 64, (1, 1), ((0, 0), (0, 1)), (1, 1)),  # two taps
    ((1, 1, 530, 64), (1, 8), 1, 64, (1, 1), ((0, 0), (7, 0)), (1, 1)),  # eight taps, three tiles
    ((2, 1, 300, 64), (1, 31), 1, 64, (1, 1), ((0, 0), (15, 15)), (1, 1)),  # 31 taps: four tap tiles of 8
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_direct_grouped_filter_gradient_matches_float64(case, rng, monkeypatch):
    """The direct kernels on every case (groups of 2 to 16 channels run as the dense layer where it is small
    enough, so that is turned off here: the direct kernels still take such layers of many groups)."""
    monkeypatch.setattr(winrs_jax.planner, "DENSE_MAX_GROUP_CHANNELS", 1)
    x_shape, filter_hw, multiplier, groups, strides, pads, dilation = case
    c = x_shape[3]
    w_shape = (*filter_hw, c // groups, c * multiplier)
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    out = jax.eval_shape(lambda x: lax.conv_general_dilated(x, jnp.zeros(w_shape), strides, pads,
                                                            rhs_dilation=dilation, dimension_numbers=NHWC,
                                                            feature_group_count=groups), x)  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
    fn = jax.jit(functools.partial(_filter_grad, w_shape=w_shape, strides=strides, pads=pads, dilation=dilation,
                                   groups=groups))  # fmt: skip
    got = np.asarray(fn(x, dy))
    expected = _reference(x, dy, filter_hw, strides, pads, dilation, groups)
    # FP32 sums of at most a few thousand products of N(0, 1) values: relative to the largest entry, 1e-5.
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    assert "winrs_grouped_filter_grad" in fn.lower(x, dy).as_text()
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, jnp.float32), strides, pads, rhs_dilation=dilation,
                          dimension_numbers=NHWC, feature_group_count=groups)  # fmt: skip
    assert plan.method == "direct" and plan.groups == groups


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_sixteen_bit_inputs_are_summed_in_float32(dtype, rng):
    """bfloat16 and float16 inputs are exact in float32; dW is rounded once, to the filter's dtype, as XLA's."""
    x = jnp.asarray(rng.uniform(0, 1, (4, 20, 21, 16)), dtype)
    dy = jnp.asarray(rng.uniform(0, 1, (4, 20, 21, 16)) * 1e-2, dtype)
    pads = ((1, 1), (1, 1))
    got = _filter_grad(x, dy, (3, 3, 1, 16), (1, 1), pads, (1, 1), 16)
    assert got.dtype == dtype
    expected = _reference(x, dy, (3, 3), (1, 1), pads, (1, 1), 16)
    rel = np.abs(np.asarray(got, np.float64) - expected) / np.abs(expected)
    assert rel.max() <= 2.0 ** -(8 if dtype == jnp.bfloat16 else 11)  # half an ulp of the output type


@pytest.mark.parametrize(
    "layout", [("NCHW", "OIHW", "NCHW"), ("NHWC", "OHWI", "NCHW"), ("NCH", "OIH", "NCH")]
)
def test_layouts_and_one_d_causal_match_lax(layout, rng):
    one_d = len(layout[0]) == 3
    x_shape, w_shape = ((3, 12, 40), (12, 1, 4)) if one_d else ((2, 12, 9, 10), (24, 1, 3, 3))
    if layout[0] == "NHWC":
        x_shape, w_shape = (2, 9, 10, 12), (24, 3, 3, 1)
    pads = ((3, 0),) if one_d else ((1, 1), (2, 0))  # 1D causal as Mamba's: (k - 1, 0)
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    w = jnp.asarray(rng.standard_normal(w_shape), jnp.float32)
    args = dict(window_strides=(1,) * (len(x_shape) - 2), padding=pads, dimension_numbers=layout,
                feature_group_count=12)  # fmt: skip

    def loss(conv, w, x):
        return jnp.sum(jnp.sin(conv(x, w, **args)))

    got = jax.jit(jax.grad(functools.partial(loss, winrs_jax.conv)))(w, x)
    expected = jax.grad(functools.partial(loss, lax.conv_general_dilated))(w, x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    plan = winrs_jax.plan(x, w, **args)
    assert plan.method == "direct" and "(depthwise)" in str(plan)


def test_ensemble_under_vmap_runs_stacked_in_one_call(rng):
    """Both operands mapped (an ensemble of depthwise layers): one direct call with a leading axis."""
    x = jnp.asarray(rng.standard_normal((3, 2, 10, 11, 8)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((3, 3, 3, 1, 8)), jnp.float32)
    args = dict(window_strides=(2, 1), padding="SAME", dimension_numbers=NHWC, feature_group_count=8)

    def loss(conv, w, x):
        return jnp.sum(jnp.sin(conv(x, w, **args)))

    fn = jax.vmap(jax.grad(functools.partial(loss, winrs_jax.conv)))
    got = jax.jit(fn)(w, x)
    expected = jax.vmap(jax.grad(functools.partial(loss, lax.conv_general_dilated)))(w, x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    hlo = jax.jit(fn).lower(w, x).as_text()
    assert hlo.count("winrs_grouped_filter_grad") == 1


@pytest.mark.parametrize("splits", [8, 100])
def test_splits_are_added_with_compensation(splits):
    """With a deterministic sum, split 0's partial sum is 2^24 and each other split adds 1: summed plainly in
    float32 every 1 is lost (2^24 + 1 rounds back to 2^24); the compensated sum keeps them, to float32's spacing
    of 2 there. 8 splits are added by one thread (Kahan), 100 by 32 lanes whose sums merge in a tree (TwoSum).
    (The default adds the splits into dW as they finish: test_splits_add_into_dw_by_default.)"""
    tile = 64  # a 1D layer's spatial tile: 64 columns; one tile per split
    width = splits * tile
    dy = np.zeros((1, 1, width, 1), np.float32)
    dy[0, 0, 0, 0] = 2.0**24  # split 0
    for split in range(1, splits):
        dy[0, 0, split * tile, 0] = 1.0  # the first column of each other split
    options = PlannerOptions(segments=splits, deterministic=True)
    direct = winrs_jax.planner.plan_grouped(1, (1, width), 2, 2, (1, 1), (0, 0, 0, 0), (1, 1), (1, 1), 2, "fp32",
                                            "fp32", options)  # fmt: skip
    assert direct.splits == splits and direct.spatial_tile == (1, tile) and not direct.atomic
    x2, dy2 = jnp.ones((1, 1, width, 2), jnp.float32), jnp.asarray(np.repeat(dy, 2, axis=3))
    dw = _ffi.backward_filter_call(x2, dy2, (), (2, 1, 1, 1), direct.workspace_elems, direct.ffi_attributes(),
                                   _ffi.GROUPED_TARGET)  # fmt: skip
    exact = 2.0**24 + splits - 1
    assert np.all(np.abs(np.asarray(dw, np.float64) - exact) <= 1.0)  # plain summation is off by splits - 1


@pytest.mark.parametrize("case", [0, 6, 14, 31], ids=["3x3", "31x31", "streamed", "1d"])
def test_splits_add_into_dw_by_default(case, rng, monkeypatch):
    """By default a direct plan's splits add into dW as they finish (on the GPU by atomic adds into a zeroed
    dW, in any order; the CPU in split order): no workspace, no reduction pass; PlannerOptions(deterministic=
    True) or XLA's deterministic-ops flag keeps the fixed-order compensated sum of partial filter gradients.
    Both against float64, with three splits forced."""
    monkeypatch.setattr(winrs_jax.planner, "DENSE_MAX_GROUP_CHANNELS", 1)
    x_shape, filter_hw, multiplier, groups, strides, pads, dilation = CASES[case]
    w_shape = (*filter_hw, x_shape[3] // groups, x_shape[3] * multiplier)
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    out = jax.eval_shape(lambda x: lax.conv_general_dilated(x, jnp.zeros(w_shape), strides, pads,
                                                            rhs_dilation=dilation, dimension_numbers=NHWC,
                                                            feature_group_count=groups), x)  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
    expected = _reference(x, dy, filter_hw, strides, pads, dilation, groups)
    args = dict(window_strides=strides, padding=pads, rhs_dilation=dilation, dimension_numbers=NHWC,
                feature_group_count=groups)  # fmt: skip
    for deterministic, atomic in ((None, True), (True, False)):
        options = PlannerOptions(segments=3, deterministic=deterministic)
        plan = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, jnp.float32), **args, options=options)
        assert plan.method == "direct" and plan.splits == 3 and plan.atomic == atomic
        assert (plan.workspace_bytes == 0) == atomic and ("atomic adds" in str(plan)) == atomic
        got = np.asarray(jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, **args,
                                                   options=options))(x, dy))  # fmt: skip
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=true")
    flagged = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, jnp.float32), **args, options=PlannerOptions())
    assert not flagged.atomic and flagged.workspace_bytes == 4 * (flagged.splits - 1) * int(np.prod(w_shape))


def test_many_splits_into_a_small_filter_keep_the_ordered_sum():
    """Atomic adds of one dW element queue in L2: MobileNet's 3x3 depthwise 64:56:128 (256 splits into 1,152
    elements) keeps the fixed-order sum by default (its atomic adds ran 0.79x on an H100); a large dW does not."""
    small = winrs_jax.planner.plan_grouped(64, (56, 56), 128, 128, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 128,
                                           "bf16", "bf16", PlannerOptions(sm_count=132))  # fmt: skip
    assert (
        small.splits > 1152 // 16
        and not small.atomic
        and small.workspace_bytes == 4 * (small.splits - 1) * 1152
    )
    large = winrs_jax.planner.plan_grouped(64, (28, 28), 256, 256, (7, 7), (3, 3, 3, 3), (1, 1), (1, 1), 256,
                                           "bf16", "bf16", PlannerOptions(sm_count=132))  # fmt: skip
    assert large.splits > 1 and large.atomic and large.workspace_bytes == 0


@pytest.mark.parametrize("stacked", [1, 2])
def test_fixed_order_splits_keep_the_workspace_under_64_mib(stacked):
    """A fixed-order sum keeps every split's partial dW but the first in the workspace: 31x31 depthwise on 2048
    channels (1,968,128 floats of dW) splits 256 ways with atomic adds, which would need 2 GB of partial sums in a
    fixed order; there the splits are cut to what 16 Mi floats (64 MiB) hold, for all stacked problems."""
    args = (64, (56, 56), 2048, 2048, (31, 31), (15, 15, 15, 15), (1, 1), (1, 1), 2048, "bf16", "bf16")
    dw_elems = 2048 * 31 * 31
    atomic = winrs_jax.planner.plan_grouped(*args, PlannerOptions(sm_count=132), stacked)
    ordered = winrs_jax.planner.plan_grouped(*args, PlannerOptions(sm_count=132, deterministic=True), stacked)
    assert atomic.atomic and atomic.splits == 256 and atomic.workspace_bytes == 0
    assert not ordered.atomic and ordered.splits == 1 + (16 << 20) // (stacked * dw_elems)
    assert (
        ordered.workspace_elems == (ordered.splits - 1) * dw_elems
        and stacked * ordered.workspace_elems <= 16 << 20
    )


def test_more_spatial_tiles_than_32_bits_count_fall_back():
    """The kernels count spatial tiles in 32 bits: a batch of 2^31 - 1 images of 33x33 (2^32 tiles) is refused by
    the planner, with the reason, rather than launched."""
    plan = winrs_jax.planner.plan_grouped(2**31 - 1, (33, 33), 64, 64, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 64,
                                          "bf16", "bf16")  # fmt: skip
    assert not plan.supported and "too many spatial tiles" in plan.reason


def test_plan_printout_names_the_direct_kernels():
    x = jax.ShapeDtypeStruct((16, 28, 28, 64), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((7, 7, 1, 64), jnp.bfloat16)
    plan = winrs_jax.plan(x, w, (1, 1), "SAME", dimension_numbers=NHWC, feature_group_count=64)
    text = str(plan)
    assert plan.method == "direct" and plan.tile == (7, 7)
    assert "64 groups of 1 -> 1 channels (depthwise)" in text and "read in place" in text
    assert f"split into {plan.splits} parts" in text and plan.atomic and plan.workspace_bytes == 0
    ordered = winrs_jax.plan(x, w, (1, 1), "SAME", dimension_numbers=NHWC, feature_group_count=64,
                             options=PlannerOptions(deterministic=True))  # fmt: skip
    assert ordered.workspace_bytes == 4 * (ordered.splits - 1) * 64 * 49
    assert "with compensation" in str(ordered)


@pytest.mark.parametrize(
    "dtype, channels, multiplier, groups, streams",
    [
        (jnp.bfloat16, 64, 1, 64, True),  # depthwise: two channels per thread, a warp's worth
        (jnp.float32, 36, 1, 36, True),  # one per thread: from a warp's channels, in runs of 4 (16 bytes)
        (jnp.float32, 33, 1, 33, False),  # runs of 16 bytes would split a pixel's channels
        (jnp.bfloat16, 32, 1, 32, False),  # half a warp's lanes would idle
        (jnp.float16, 68, 1, 68, False),  # 16-bit runs of 8 channels would split a pixel's channels
        (jnp.bfloat16, 64, 2, 64, True),  # multiplier 2: a thread's channels meet one X channel
        (jnp.float32, 32, 2, 32, True),  # multiplier 2 in float32
        (jnp.float32, 32, 4, 32, True),  # multiplier 4: X rows of 34 x 32 bytes, padded to 128-byte multiples
        (jnp.bfloat16, 64, 3, 64, False),  # multiplier 3 splits a thread's pair over two input channels
        (jnp.float32, 8, 16, 8, False),  # multiplier 16: half a 16-byte run of input channels per block
        (jnp.float32, 64, 1, 16, False),  # groups of 4 channels
    ],
)
def test_depthwise_layers_stream_on_the_gpu(dtype, channels, multiplier, groups, streams, monkeypatch):
    """Which direct layers the GPU runs on the streaming kernel, and the printout saying so."""
    monkeypatch.setattr(winrs_jax.planner, "DENSE_MAX_GROUP_CHANNELS", 1)  # groups of 4 stay direct
    x = jax.ShapeDtypeStruct((16, 28, 28, channels), dtype)
    w = jax.ShapeDtypeStruct((3, 3, channels // groups, channels * multiplier), dtype)
    plan = winrs_jax.plan(x, w, (1, 1), "SAME", dimension_numbers=NHWC, feature_group_count=groups,
                          options=PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.method == "direct" and plan.streams == streams
    assert ("streamed row by row through shared memory" in str(plan)) == streams


@pytest.mark.parametrize(
    "size, taps, streams, spatial_tile, images, stride",
    [
        (56, 3, True, (16, 32), 1, 1),
        (21, 3, True, (16, 32), 1, 1),  # 21 columns: one image, a warp's column past the map idle
        (14, 5, True, (14, 16), 2, 1),  # EfficientNet's 14x14 maps: two images, every warp busy
        (7, 3, True, (7, 8), 4, 1),  # MobileNet's 7x7 maps: four images
        (28, 7, True, (16, 32), 1, 1),  # ConvNeXt's 7x7 filters
        (28, 6, False, (2, 32), 1, 1),  # 6x6: tiles of 4 x 6 taps, staged
        (112, 3, True, (16, 32), 1, 2),  # stride 2 (MobileNetV2's downsampling)
        (28, 5, True, (14, 16), 2, 2),  # stride 2 to 14x14 outputs (EfficientNet's)
        (28, 7, False, (2, 16), 1, 2),  # stride 2 with a 7x7 filter: staged
    ],
)
def test_streamed_tiles_fill_the_warps(size, taps, streams, spatial_tile, images, stride):
    """The streaming kernel's tiles: 32 columns of one image, or of 2 or 4 images on maps of 16 columns or less
    (each warp a column of 8 outputs), and square filters of 3x3 to 7x7."""
    x = jax.ShapeDtypeStruct((9, size, size, 128), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((taps, taps, 1, 128), jnp.bfloat16)
    plan = winrs_jax.plan(x, w, (stride, stride), "SAME", dimension_numbers=NHWC, feature_group_count=128,
                          options=PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.method == "direct" and plan.streams == streams
    assert plan.spatial_tile == spatial_tile and plan.tile_images == images
    assert (f"of each of {images} images at a time" in str(plan)) == (images > 1)


@pytest.mark.parametrize(
    "length, taps, pads, streams, spatial_tile",
    [
        (2048, 4, (3, 0), True, (1, 256)),  # Mamba's causal k = 4
        (1024, 5, (2, 2), True, (1, 256)),
        (1000, 9, (4, 4), True, (1, 256)),  # more than 8 taps: two tap tiles of 5, each its blocks
        (1000, 31, (15, 15), True, (1, 256)),  # Conformer's depthwise k = 31: four tiles of 8
    ],
)
def test_one_d_layers_stream_along_their_row(length, taps, pads, streams, spatial_tile):
    """1D depthwise layers stream: a tile is 8 rows of 32 outputs one after another along the sequence, one row
    of up to 8 taps per thread (wider filters in several tap tiles)."""
    x = jax.ShapeDtypeStruct((16, length, 256), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((taps, 1, 256), jnp.bfloat16)
    plan = winrs_jax.plan(x, w, (1,), (pads,), dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=256,
                          options=PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.method == "direct" and plan.streams == streams and plan.spatial_tile == spatial_tile
    assert plan.tile == (1, -(-taps // -(-taps // 8)))
    assert "streamed 32 positions at a time" in str(plan)


def test_a_single_output_row_streams_row_by_row():
    """A 2D layer of one output row streams its tap rows as 2D layers do (tile of 1 x 32 outputs), and the plan
    says so: not as a 1D sequence."""
    x = jax.ShapeDtypeStruct((9, 3, 40, 128), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((3, 3, 1, 128), jnp.bfloat16)
    plan = winrs_jax.plan(x, w, (1, 1), "VALID", dimension_numbers=NHWC, feature_group_count=128,
                          options=PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.streams and plan.spatial_tile == (1, 32) and plan.tile == (3, 3)
    assert "streamed row by row through shared memory" in str(plan)


@pytest.mark.parametrize(
    "dtype, n, size, channels, taps, group_c, blocks_per_sm, tiles_per_split",
    [
        # 7x7 depthwise on tensor cores (3 blocks per SM): by two tiles a split 448 blocks, 1.1 waves of 396; by 3
        (jnp.bfloat16, 64, 28, 448, 7, 1, 3, 3),
        (jnp.bfloat16, 64, 28, 256, 7, 1, 3, 2),  # 256 blocks of two tiles fit one wave: not one tile a split
        # CUDA cores: 5x5 3 blocks per SM (by two tiles a split 512 blocks, 1.3 waves), 3x3 6 (one wave of 512)
        (jnp.bfloat16, 128, 28, 240, 5, 1, 3, 3),
        (jnp.float32, 64, 56, 64, 3, 1, 6, 2),
        (jnp.bfloat16, 64, 14, 512, 3, 16, 3, 1),  # groups on tensor cores: 128 blocks of two leave SMs idle
    ],
)
def test_streaming_splits_take_the_fewest_tile_rounds(
    dtype, n, size, channels, taps, group_c, blocks_per_sm, tiles_per_split
):
    """The streaming kernel's split count: the fewest rounds of tiles over waves of resident blocks (registers and
    rings: 3 blocks per SM on tensor cores and at 5x5, 6 at 3x3), at least two tiles a split unless that
    leaves SMs without a block."""
    x = jax.ShapeDtypeStruct((n, size, size, channels), dtype)
    w = jax.ShapeDtypeStruct((taps, taps, group_c, channels), dtype)
    plan = winrs_jax.plan(x, w, (1, 1), "SAME", dimension_numbers=NHWC, feature_group_count=channels // group_c,
                          options=PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.streams and plan.tensor_cores == (dtype == jnp.bfloat16 and (taps == 7 or group_c > 1))
    rows, cols = plan.spatial_tile
    tiles = -(-n // plan.tile_images) * -(-size // rows) * -(-size // cols)
    block_channels = 64 if dtype == jnp.bfloat16 else 32  # 32 lanes of two bf16 channels, or 4 warps of 16
    blocks = plan.splits * -(-channels // block_channels)
    assert -(-tiles // plan.splits) == tiles_per_split
    assert blocks <= plan.sm_count * blocks_per_sm  # one wave


def test_wide_groups_stay_on_winrs_gemms(rng):
    """More than 16 input channels per group: the groups run as stacked WinRS problems."""
    x = jax.ShapeDtypeStruct((2, 12, 13, 48), jnp.float32)
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct((3, 3, 24, 6), jnp.float32), (1, 1), "SAME",
                          dimension_numbers=NHWC, feature_group_count=2)  # fmt: skip
    assert plan.method == "winrs" and plan.groups == 2 and plan.dense_groups == 1


DENSE_CASES = [
    # x shape, filter shape (lax's layout), groups, strides, dimension numbers
    ((2, 12, 13, 16), (3, 3, 4, 8), 4, (1, 1), NHWC),  # 4 groups of 4 -> 2
    ((2, 12, 13, 16), (3, 3, 2, 32), 8, (2, 2), NHWC),  # 8 groups of 2 -> 4, strided (DWM's pieces)
    ((2, 32, 12, 13), (32, 16, 3, 3), 2, (1, 1), ("NCHW", "OIHW", "NCHW")),  # 2 groups of 16, NCHW
    ((3, 40, 12), (24, 4, 5), 3, (1,), ("NWC", "OIW", "NWC")),  # 1D, 3 groups of 4 -> 8
    ((2, 5, 6, 7, 8), (3, 3, 3, 2, 8), 4, (1, 1, 1), ("NDHWC", "DHWIO", "NDHWC")),  # 3D, 4 groups of 2 -> 2
]


@pytest.mark.parametrize("case", DENSE_CASES, ids=range(len(DENSE_CASES)))
def test_dense_grouped_layers_match_float64(case, rng):
    """Groups of 2 to 16 input channels run as the dense layer of all channels, whose dW keeps its diagonal
    blocks (Plan.dense_groups): against lax's filter gradient in float64, in every rank, layout and stride."""
    x_shape, w_shape, groups, strides, dn = case
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    w = jax.ShapeDtypeStruct(w_shape, jnp.float32)
    args = dict(window_strides=strides, padding="SAME", dimension_numbers=dn, feature_group_count=groups,
                precision=lax.Precision.HIGHEST)  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(jax.eval_shape(lambda: lax.conv_general_dilated(
        x, jnp.zeros(w_shape), **args)).shape), jnp.float32)  # fmt: skip
    plan = winrs_jax.plan(x, w, **args, options=PlannerOptions(mode="winrs"))
    assert plan.dense_groups == groups and plan.groups == 1 and plan.method == "winrs"
    assert f"{groups} groups of" in str(plan) and "diagonal blocks" in str(plan)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, **args,
                                   options=PlannerOptions(mode="winrs")))  # fmt: skip
    got = np.asarray(fn(x, dy), np.float64)
    assert "winrs_backward_filter" in fn.lower(x, dy).as_text()
    x64, dy64 = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    with jax.enable_x64(True):
        expected = np.asarray(jax.vjp(lambda w: lax.conv_general_dilated(jnp.asarray(x64), w, **args),
                                      jnp.zeros(w_shape, jnp.float64))[1](jnp.asarray(dy64))[0])  # fmt: skip
    # FP32 sums of at most a few thousand products of N(0, 1) values: relative to the largest entry, 1e-5.
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_dense_groups_need_few_channels_few_groups_and_little_memory():
    """The dense layer is taken for 2 to 16 input channels per group, at most 64 groups, and a dense dW within
    X's and dY's bytes; else the direct kernels (at most 8 channels) or stacked problems. (float32: 16-bit 3x3
    layers of such groups go to tensor cores first.)"""

    def plan(x_shape, w_shape, groups):
        return winrs_jax.plan(jax.ShapeDtypeStruct(x_shape, jnp.float32), jax.ShapeDtypeStruct(w_shape, jnp.float32),
                              (1, 1), "SAME", dimension_numbers=NHWC, feature_group_count=groups,
                              options=PlannerOptions(mode="winrs"))  # fmt: skip

    assert plan((64, 56, 56, 128), (3, 3, 4, 128), 32).dense_groups == 32  # ResNeXt-50's first stage
    assert plan((64, 56, 56, 128), (3, 3, 16, 128), 8).dense_groups == 8
    wide = plan((64, 7, 7, 1024), (3, 3, 32, 1024), 32)  # 32 channels per group
    assert (wide.dense_groups, wide.groups) == (1, 32)
    many = plan((64, 56, 56, 512), (3, 3, 4, 512), 128)  # 128 groups: 128x the work
    assert (many.dense_groups, many.method) == (1, "direct")
    big = plan((2, 7, 7, 256), (3, 3, 4, 512), 64)  # a dense dW 30x X's and dY's bytes
    assert (big.dense_groups, big.method) == (1, "direct")


@pytest.mark.parametrize(
    "dtype, x_shape, w_shape, groups, strides, tensor_cores",
    [
        (jnp.bfloat16, (64, 56, 56, 128), (3, 3, 4, 128), 32, (1, 1), True),  # ResNeXt-50, stage 1
        (jnp.float16, (64, 14, 14, 512), (3, 3, 16, 512), 32, (1, 1), True),  # stage 3: 16 channels a group
        (jnp.bfloat16, (128, 28, 28, 192), (3, 3, 8, 192), 24, (1, 1), True),  # RegNet, group width 8
        (jnp.float32, (128, 28, 28, 192), (3, 3, 8, 192), 24, (1, 1), False),  # float32: the dense layer
        (jnp.bfloat16, (64, 7, 7, 1024), (3, 3, 32, 1024), 32, (1, 1), False),  # 32 channels a group
        (jnp.bfloat16, (8, 14, 14, 64), (5, 5, 16, 64), 4, (1, 1), False),  # 5x5
        (jnp.bfloat16, (8, 14, 14, 64), (3, 3, 16, 64), 4, (2, 2), False),  # stride 2
        (jnp.bfloat16, (8, 14, 14, 64), (3, 3, 16, 128), 4, (1, 1), False),  # 16 in, 32 out a group
        (jnp.bfloat16, (8, 14, 14, 12), (3, 3, 4, 12), 3, (1, 1), False),  # 24-byte pixels: not 16-byte runs
        # depthwise, 16-bit, unit steps, 7x7 filters: the band kernel
        (jnp.bfloat16, (64, 28, 28, 256), (7, 7, 1, 256), 256, (1, 1), True),  # ConvNeXt
        (jnp.float16, (64, 14, 14, 512), (7, 7, 1, 512), 512, (1, 1), True),  # ConvNeXt, stage 3
        (jnp.float16, (128, 14, 14, 672), (5, 5, 1, 672), 672, (1, 1), False),  # 5x5: faster on CUDA cores
        (jnp.bfloat16, (64, 56, 56, 128), (3, 3, 1, 128), 128, (1, 1), False),  # 3x3 alike
        (jnp.float32, (64, 28, 28, 256), (7, 7, 1, 256), 256, (1, 1), False),  # float32: CUDA cores
        (jnp.bfloat16, (16, 56, 56, 96), (3, 3, 1, 96), 96, (2, 2), False),  # stride 2
        (jnp.bfloat16, (16, 28, 28, 64), (3, 3, 1, 128), 64, (1, 1), False),  # channel multiplier 2
        (jnp.bfloat16, (16, 28, 28, 64), (6, 6, 1, 64), 64, (1, 1), False),  # 6x6: tap tiles of 4 x 6, staged
        (jnp.bfloat16, (32, 28, 28, 256), (31, 31, 1, 256), 256, (1, 1), True),  # RepLKNet: 25 tiles of 7x7
        (jnp.bfloat16, (16, 28, 28, 64), (3, 11, 1, 64), 64, (1, 1), True),  # 3 x 11: 2 tiles of 7x7
        (jnp.float32, (32, 28, 28, 256), (31, 31, 1, 256), 256, (1, 1), False),  # float32: staged
    ],
)
def test_sixteen_bit_groups_run_on_tensor_cores(dtype, x_shape, w_shape, groups, strides, tensor_cores):
    """Which grouped layers the GPU sums on tensor cores (before the dense layer of all channels), and the
    printout saying so."""
    x, w = jax.ShapeDtypeStruct(x_shape, dtype), jax.ShapeDtypeStruct(w_shape, dtype)
    plan = winrs_jax.plan(x, w, strides, "SAME", dimension_numbers=NHWC, feature_group_count=groups,
                          options=PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.tensor_cores == tensor_cores
    assert ("products on tensor cores" in str(plan)) == tensor_cores
    if tensor_cores and groups == x_shape[3] and w_shape[0] * w_shape[1] > 49:  # the band kernel's tap tiles
        assert plan.tile == (7, 7)
    if tensor_cores:
        assert plan.method == "direct" and plan.streams and plan.dense_groups == 1


@pytest.mark.parametrize("filter_hw, pads", [((11, 13), ((5, 5), (6, 6))), ((31, 31), ((15, 15), (15, 15)))])
def test_large_16_bit_depthwise_filters_sum_by_7x7_tap_tiles(filter_hw, pads, rng):
    """The band kernel's plan of filters beyond 7x7: tap tiles of 7x7, the last ones part-filled, each its own
    unit of blocks. The CPU handler sums the same tiles (float32 FMA): against float64, to bfloat16's half ulp."""
    x = jnp.asarray(rng.standard_normal((1, 20, 24, 64)), jnp.bfloat16)
    w_shape = (*filter_hw, 1, 64)
    dy = jnp.asarray(rng.standard_normal((1, 20, 24, 64)), jnp.bfloat16)
    options = PlannerOptions(mode="winrs")
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, jnp.bfloat16), (1, 1), pads, dimension_numbers=NHWC,
                          feature_group_count=64, options=options)  # fmt: skip
    assert plan.tensor_cores and plan.tile == (7, 7)
    got = np.asarray(jax.jit(functools.partial(_filter_grad, w_shape=w_shape, strides=(1, 1), pads=pads,
                                               dilation=(1, 1), groups=64, options=options))(x, dy),
                     np.float64)  # fmt: skip
    expected = _reference(x, dy, filter_hw, (1, 1), pads, (1, 1), 64)
    tolerance = 1e-5 + 2.0**-8
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())


def test_depthwise_tensor_cores_turn_off_by_environment(monkeypatch):
    """WINRS_JAX_DEPTHWISE_MMA=0 keeps 16-bit depthwise layers on the CUDA-core streaming kernel (to compare the
    two): the planner reads it, so the handler derives the same plan."""
    shape = dict(batch=64, in_h=28, in_w=28, in_c=256, out_h=28, out_w=28, out_c=256, filter_h=7, filter_w=7,
                 groups=256, pad_top=3, pad_bottom=3, pad_left=3, pad_right=3, stride_h=1, stride_w=1,
                 dilation_h=1, dilation_w=1, path=winrs_jax.planner.PATHS.index("bf16"), sm_count=132)  # fmt: skip
    monkeypatch.delenv("WINRS_JAX_DEPTHWISE_MMA", raising=False)
    on = _winrs.make_grouped_plan(**shape)
    monkeypatch.setenv("WINRS_JAX_DEPTHWISE_MMA", "0")
    off = _winrs.make_grouped_plan(**shape)
    assert on["tensor_cores"] and on["streams"]
    assert not off["tensor_cores"] and off["streams"] and off["smem_bytes"] != on["smem_bytes"]


TENSOR_CORE_CASES = [
    # x shape (NHWC), groups, padding: 3x3 filters, as many output channels as input, stride 1
    ((2, 9, 40, 64), 4, ((1, 1), (1, 1))),  # 16 channels a group, 40 columns: two tiles a row
    ((3, 7, 7, 96), 12, ((1, 1), (1, 1))),  # 8 a group, 1.5 blocks; 4 images a tile, the last past the batch
    ((3, 12, 13, 48), 12, ((0, 2), (2, 0))),  # 4 a group, 2 images a tile; uneven padding
    ((1, 10, 33, 16), 8, ((1, 1), (1, 1))),  # 2 a group, a quarter of a block's channels
]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("case", TENSOR_CORE_CASES, ids=range(len(TENSOR_CORE_CASES)))
def test_tensor_core_groups_match_float64(case, dtype, rng):
    """The tensor-core layers' tiles, images and splits (the CPU handler sums them in float32 FMA): against
    float64, to the output dtype's half ulp."""
    x_shape, groups, pads = case
    c = x_shape[3]
    x = jnp.asarray(rng.standard_normal(x_shape), dtype)
    out = jax.eval_shape(lambda x: lax.conv_general_dilated(x, jnp.zeros((3, 3, c // groups, c), dtype), (1, 1),
                                                            pads, dimension_numbers=NHWC,
                                                            feature_group_count=groups), x)  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), dtype)
    w = jax.ShapeDtypeStruct((3, 3, c // groups, c), dtype)
    plan = winrs_jax.plan(x, w, (1, 1), pads, dimension_numbers=NHWC, feature_group_count=groups,
                          options=PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.tensor_cores
    got = np.asarray(_filter_grad(x, dy, w.shape, (1, 1), pads, (1, 1), groups, PlannerOptions(mode="winrs")),
                     np.float64)  # fmt: skip
    expected = _reference(x, dy, (3, 3), (1, 1), pads, (1, 1), groups)
    tolerance = 1e-5 + 2.0 ** -(8 if dtype == jnp.bfloat16 else 11)
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())


def _grouped_attrs(**overrides):
    attrs = dict(pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, stride_h=1, stride_w=1, dilation_h=1,
                 dilation_w=1, groups=4, path=0, sm_count=132, splits=1, atomic=0)  # fmt: skip
    attrs.update(overrides)
    return attrs


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(groups=3), "multiples of the group count"),
        (dict(groups=2), "times the groups must equal"),
        (dict(stride_h=0), "strides and dilations must be positive"),
        (dict(pad_top=2), "spatial size does not match"),
        (dict(path=2), "paths fp32, bf16, fp16"),
        (dict(path=3), "element type of path bf16"),
        (dict(splits=2), "workspace size"),
        (dict(sm_count=0), "planner attribute out of range"),
        (dict(atomic=2), "atomic must be 0 or 1"),
    ],
)
def test_grouped_handler_rejects_inconsistent_inputs(overrides, message):
    x, dy = jnp.ones((2, 8, 8, 4), jnp.float32), jnp.ones((2, 8, 8, 4), jnp.float32)
    with pytest.raises(Exception, match=f"winrs_grouped_filter_grad: .*{message}"):
        np.asarray(_ffi.backward_filter_call(x, dy, (), (4, 3, 3, 1), 0, _grouped_attrs(**overrides),
                                             _ffi.GROUPED_TARGET))  # fmt: skip


def test_grouped_handler_counts_the_taps_it_meets():
    x, dy = jnp.ones((2, 8, 8, 4), jnp.float32), jnp.ones((2, 8, 8, 4), jnp.float32)
    dw = np.asarray(
        _ffi.backward_filter_call(x, dy, (), (4, 3, 3, 1), 0, _grouped_attrs(), _ffi.GROUPED_TARGET)
    )
    assert dw[0, 1, 1, 0] == 2 * 8 * 8 and dw[0, 0, 1, 0] == 2 * 7 * 8 and dw[3, 0, 0, 0] == 2 * 7 * 7
