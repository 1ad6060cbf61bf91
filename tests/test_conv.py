"""winrs_jax.conv is a drop-in for lax.conv_general_dilated and its gradients match XLA's."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import reference_general_filter_grad
from jax import lax

import winrs_jax
from winrs_jax import _partition

NHWC = ("NHWC", "HWIO", "NHWC")


def _operands(rng, lhs_shape, rhs_shape, dtype=np.float32):
    return (
        jnp.asarray(rng.standard_normal(lhs_shape), dtype),
        jnp.asarray(rng.standard_normal(rhs_shape), dtype),
    )


def _grads(conv_fn, lhs, rhs, **kwargs):
    def loss(lhs, rhs):
        y = conv_fn(lhs, rhs, **kwargs)
        return jnp.sum(jnp.sin(y))  # a non-trivial cotangent

    return jax.grad(loss, argnums=(0, 1))(lhs, rhs)


def _assert_close(actual, expected, rtol=2e-4):
    """Both sides are float32 sums of O(N*OH*OW) products; compare relative to the largest entry."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


def _hlo(fn, *args):
    return jax.jit(fn).lower(*args).as_text()


CASES = [
    # lhs shape, rhs shape, strides, padding, dimension numbers
    ((2, 9, 11, 5), (3, 3, 5, 6), (1, 1), "SAME", NHWC),
    ((2, 9, 11, 5), (3, 3, 5, 6), (1, 1), "VALID", NHWC),
    ((1, 13, 7, 3), (5, 4, 3, 4), (1, 1), ((2, 1), (0, 3)), NHWC),
    ((2, 5, 10, 12), (6, 5, 3, 3), (1, 1), "SAME", ("NCHW", "OIHW", "NCHW")),
    ((3, 6, 17), (4, 6, 3), (1,), ((1, 2),), ("NCH", "OIH", "NCH")),
    ((2, 8, 8, 4), (2, 3, 6, 4), (1, 1), ((1, 1), (2, 3)), ("NHWC", "OHWI", "NCHW")),
]


def _assert_matches_lax_and_runs_winrs(lhs, rhs, **kwargs):
    """The forward and both gradients match lax's, and the filter gradient runs WinRS."""
    _assert_close(winrs_jax.conv(lhs, rhs, **kwargs), lax.conv_general_dilated(lhs, rhs, **kwargs))
    ours = _grads(winrs_jax.conv, lhs, rhs, **kwargs)
    theirs = _grads(lax.conv_general_dilated, lhs, rhs, **kwargs)
    for a, b in zip(ours, theirs, strict=True):
        _assert_close(a, b)
    assert "winrs_backward_filter" in _hlo(functools.partial(_grads, winrs_jax.conv, **kwargs), lhs, rhs)


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_forward_and_gradients_match_xla(case, rng):
    lhs_shape, rhs_shape, strides, padding, dn = case
    lhs, rhs = _operands(rng, lhs_shape, rhs_shape)
    _assert_matches_lax_and_runs_winrs(
        lhs, rhs, window_strides=strides, padding=padding, dimension_numbers=dn
    )


def test_under_jit_vmap_checkpoint_and_scan(rng):
    lhs, rhs = _operands(rng, (3, 2, 8, 8, 4), (3, 3, 4, 5))
    kwargs = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)

    def model(conv_fn, lhs, rhs):
        @jax.checkpoint
        def layer(x, w):
            return jnp.tanh(conv_fn(x, w, **kwargs))

        def step(carry, x):
            y = layer(x, rhs)
            return carry + jnp.sum(y * y), y

        per_example = jax.vmap(lambda x: jnp.sum(layer(x, rhs)))(lhs)
        total, _ = lax.scan(step, 0.0, lhs)
        return total + jnp.sum(per_example)

    ours = jax.jit(jax.grad(functools.partial(model, winrs_jax.conv), argnums=(0, 1)))(lhs, rhs)
    theirs = jax.jit(jax.grad(functools.partial(model, lax.conv_general_dilated), argnums=(0, 1)))(lhs, rhs)
    for a, b in zip(ours, theirs, strict=True):
        _assert_close(a, b)


def test_vmap_over_weights_too(rng):
    lhs, rhs = _operands(rng, (2, 3, 7, 7, 2), (2, 3, 3, 2, 3))
    kwargs = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)

    def loss(conv_fn, lhs, rhs):
        return jnp.sum(jax.vmap(lambda x, w: conv_fn(x, w, **kwargs))(lhs, rhs) ** 2)

    ours = jax.grad(functools.partial(loss, winrs_jax.conv), argnums=(0, 1))(lhs, rhs)
    theirs = jax.grad(functools.partial(loss, lax.conv_general_dilated), argnums=(0, 1))(lhs, rhs)
    for a, b in zip(ours, theirs, strict=True):
        _assert_close(a, b)


BATCH_GROUPED = [
    # lhs shape, rhs shape, padding, dimension numbers, batch groups
    ((4, 9, 11, 5), (3, 3, 5, 6), "SAME", NHWC, 2),
    ((6, 5, 10, 12), (9, 5, 3, 3), ((1, 0), (2, 1)), ("NCHW", "OIHW", "NCHW"), 3),
    ((4, 6, 17), (4, 6, 5), ((4, 0),), ("NCH", "OIH", "NCH"), 2),  # causal 1D
    ((4, 5, 6, 7, 3), (3, 3, 3, 3, 4), "SAME", ("NDHWC", "DHWIO", "NDHWC"), 2),
]


@pytest.mark.parametrize("case", BATCH_GROUPED, ids=["nhwc", "nchw", "1d", "3d"])
def test_batch_grouped_layers_run_winrs(case, rng):
    """batch_group_count B: output-channel group b is computed from the b-th N / B images; the filter gradient
    runs WinRS on the ungrouped layer with a block-diagonal dY."""
    lhs_shape, rhs_shape, padding, dn, groups = case
    lhs, rhs = _operands(rng, lhs_shape, rhs_shape)
    kwargs = dict(window_strides=(1,) * (len(lhs_shape) - 2), padding=padding, dimension_numbers=dn,
                  batch_group_count=groups)  # fmt: skip
    _assert_matches_lax_and_runs_winrs(lhs, rhs, **kwargs)
    assert f"{groups} groups of the batch" in str(winrs_jax.plan(lhs, rhs, **kwargs))


def test_batch_grouped_ensemble_under_vmap(rng):
    """Both operands vmapped: the ensemble's batch-grouped problems stack in one call."""
    lhs, rhs = _operands(rng, (3, 4, 7, 7, 2), (3, 3, 3, 2, 4))
    kwargs = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC, batch_group_count=2)

    def loss(conv_fn, lhs, rhs):
        return jnp.sum(jnp.sin(jax.vmap(lambda x, w: conv_fn(x, w, **kwargs))(lhs, rhs)))

    grad = jax.grad(functools.partial(loss, winrs_jax.conv), argnums=(0, 1))
    ours = grad(lhs, rhs)
    theirs = jax.grad(functools.partial(loss, lax.conv_general_dilated), argnums=(0, 1))(lhs, rhs)
    for a, b in zip(ours, theirs, strict=True):
        _assert_close(a, b)
    assert _hlo(grad, lhs, rhs).count("winrs_backward_filter") == 1  # one call for the whole ensemble


@pytest.mark.parametrize(
    "rhs_shape, kwargs",
    [
        ((2, 2, 4, 4), dict(window_strides=(2, 2))),  # every stride-1 piece is 1x1
        ((3, 3, 4, 4), dict(rhs_dilation=(2, 2), window_strides=(2, 2))),
        ((1, 1, 4, 4), {}),
    ],
    ids=["strided-1x1-pieces", "dilated-and-strided", "1x1"],
)
def test_unsupported_layers_fall_back_to_xla(rhs_shape, kwargs, rng):
    lhs, rhs = _operands(rng, (2, 12, 14, 4), rhs_shape)
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)
    args.update(kwargs)
    ours = _grads(winrs_jax.conv, lhs, rhs, **args)
    theirs = _grads(lax.conv_general_dilated, lhs, rhs, **args)
    for a, b in zip(ours, theirs, strict=True):
        _assert_close(a, b)
    assert "winrs_backward_filter" not in _hlo(functools.partial(_grads, winrs_jax.conv, **args), lhs, rhs)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_precision_runs_winrs(dtype, rng):
    """16-bit layers run the bf16/fp16 paths; dW comes back in the filter's dtype, close to XLA's."""
    lhs, rhs = _operands(rng, (2, 8, 8, 4), (3, 3, 4, 4), dtype)
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)
    ours = _grads(winrs_jax.conv, lhs, rhs, **args)
    theirs = _grads(lax.conv_general_dilated, lhs, rhs, **args)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype == dtype
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        # Both round 16-bit operands and results: a few units of the 16-bit rounding of the largest entry.
        np.testing.assert_allclose(a, b, rtol=0, atol=4 * float(jnp.finfo(dtype).eps) * np.abs(b).max())
    assert "winrs_backward_filter" in _hlo(functools.partial(_grads, winrs_jax.conv, **args), lhs, rhs)


def test_precision_argument_is_honoured(rng):
    lhs, rhs = _operands(rng, (2, 8, 8, 4), (3, 3, 4, 4))
    args = dict(
        window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC, precision=lax.Precision.HIGHEST
    )
    _assert_close(winrs_jax.conv(lhs, rhs, **args), lax.conv_general_dilated(lhs, rhs, **args))
    ours = _grads(winrs_jax.conv, lhs, rhs, **args)
    for a, b in zip(ours, _grads(lax.conv_general_dilated, lhs, rhs, **args), strict=True):
        _assert_close(a, b)


def test_conv_backward_filter_matches_xla(rng):
    lhs, rhs = _operands(rng, (2, 4, 9, 9), (6, 4, 3, 5))
    dn = ("NCHW", "OIHW", "NCHW")
    y, vjp = jax.vjp(lambda w: lax.conv_general_dilated(lhs, w, (1, 1), "SAME", dimension_numbers=dn), rhs)
    dy = jnp.asarray(rng.standard_normal(y.shape), jnp.float32)
    ours = jax.jit(
        lambda x, g: winrs_jax.conv_backward_filter(x, g, rhs.shape, (1, 1), "SAME", dimension_numbers=dn)
    )(lhs, dy)
    _assert_close(ours, vjp(dy)[0])
    with pytest.raises(ValueError, match="out_grad has shape"):
        winrs_jax.conv_backward_filter(lhs, dy[:, :, 1:], rhs.shape, (1, 1), "SAME", dimension_numbers=dn)


def test_flax_linen_conv(rng):
    nn = pytest.importorskip("flax.linen")
    x = jnp.asarray(rng.standard_normal((2, 10, 10, 3)), jnp.float32)
    ours = nn.Conv(features=8, kernel_size=(3, 3), conv_general_dilated=winrs_jax.conv)
    theirs = nn.Conv(features=8, kernel_size=(3, 3))
    params = theirs.init(jax.random.key(0), x)

    def loss(module, params):
        return jnp.sum(module.apply(params, x) ** 2)

    g_ours = jax.jit(jax.grad(functools.partial(loss, ours)))(params)
    g_theirs = jax.grad(functools.partial(loss, theirs))(params)
    for a, b in zip(jax.tree.leaves(g_ours), jax.tree.leaves(g_theirs), strict=True):
        _assert_close(a, b)
    assert "winrs_backward_filter" in _hlo(jax.grad(functools.partial(loss, ours)), params)


def test_hlo_for_cuda_contains_the_custom_call(rng):
    """Lowering for the GPU works without one (the target name is platform independent)."""
    lhs, rhs = _operands(rng, (2, 8, 8, 4), (3, 3, 4, 4))
    fn = functools.partial(
        _grads, winrs_jax.conv, window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC
    )
    text = jax.jit(fn).trace(lhs, rhs).lower(lowering_platforms=("cuda",)).as_text()
    assert "winrs_backward_filter" in text


def test_one_device_lowering_skips_the_custom_partitioning(rng, monkeypatch):
    """On one device the FFI call is lowered without custom partitioning's wrapper, which has nothing to partition
    there (jax lowers it to its body) and whose tracing was about 0.7 ms of each layer's re-trace. Under a mesh it
    stays (test_sharding: no activations gathered)."""

    def partitioned(*_):
        raise AssertionError("custom partitioning on one device")

    monkeypatch.setattr(_partition, "_partitioned", partitioned)
    lhs, rhs = _operands(rng, (2, 8, 8, 4), (3, 3, 4, 4))
    fn = functools.partial(
        _grads, winrs_jax.conv, window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC
    )
    assert "winrs_backward_filter" in _hlo(fn, lhs, rhs)


def test_a_training_step_evaluates_the_forward_type_once(rng):
    """JAX asks for the forward convolution's result type four times as it traces, linearizes and transposes a
    gradient; lax's shape rule runs once per operand types, the rest come from _conv_aval's cache (part of issue
    8's re-trace budget)."""
    cached = winrs_jax._primitives._conv_aval
    cached.cache_clear()
    lhs, rhs = _operands(rng, (2, 8, 8, 4), (3, 3, 4, 4))
    fn = functools.partial(
        _grads, winrs_jax.conv, window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC
    )
    jax.jit(fn).trace(lhs, rhs)
    assert cached.cache_info().misses == 1 and cached.cache_info().hits >= 1  # three with jax 0.10.2


def test_cached_types_follow_the_context_mesh_and_default_precision():
    """The caches behind the forward's type (_conv_aval) and lax's parameters (_lax_params) key what lax reads
    besides the operands: a gradient traced under an Auto mesh, then under an Explicit one (its type took the
    first mesh and the sine after it raised), and the input gradient's precision under another
    jax.default_matmul_precision (it kept the first trace's), as lax's."""
    x, w = jax.ShapeDtypeStruct((4, 8, 8, 4), jnp.float32), jax.ShapeDtypeStruct((3, 3, 4, 4), jnp.float32)

    def grad(conv):
        return jax.grad(
            lambda x, w: jnp.sum(jnp.sin(conv(x, w, (1, 1), "SAME", dimension_numbers=NHWC))), (0, 1)
        )

    for axis_type in (jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit):
        with jax.set_mesh(jax.make_mesh((1,), ("b",), axis_types=(axis_type,))):
            ours, theirs = (jax.eval_shape(grad(c), x, w) for c in (winrs_jax.conv, lax.conv_general_dilated))
        assert [a.sharding for a in ours] == [a.sharding for a in theirs]

    def precisions(conv):
        jaxpr = jax.make_jaxpr(grad(conv))(x, w).jaxpr
        return {e.params["precision"] for e in jaxpr.eqns if e.primitive is lax.conv_general_dilated_p}

    highest = {(lax.Precision.HIGHEST,) * 2}
    assert precisions(winrs_jax.conv) == precisions(lax.conv_general_dilated) == highest  # conftest's
    with jax.default_matmul_precision("bfloat16"):
        assert precisions(winrs_jax.conv) == precisions(lax.conv_general_dilated) != highest


@pytest.mark.parametrize(
    "x_shape, filter_dhw, pads, strides, dilation",
    [
        ((2, 6, 7, 8, 3), (3, 3, 3), ((1, 1), (1, 1), (1, 1)), (1, 1, 1), (1, 1, 1)),
        ((1, 5, 6, 9, 2), (2, 3, 4), ((0, 1), (2, 0), (1, 2)), (1, 1, 1), (1, 1, 1)),
        ((3, 4, 5, 5, 4), (1, 2, 2), ((0, 0), (0, 0), (0, 0)), (1, 1, 1), (1, 1, 1)),
        # Strided and dilated (3D ResNet and nnU-Net downsampling, dilated 3D context modules): the depth's
        # stride and dilation pick each tap's depth slices, height and width run the 2D pieces.
        ((2, 7, 9, 8, 3), (3, 3, 3), ((1, 1), (1, 1), (1, 1)), (2, 2, 2), (1, 1, 1)),
        ((1, 8, 7, 10, 2), (3, 3, 3), ((1, 1), (0, 1), (1, 1)), (1, 2, 2), (1, 1, 1)),
        ((2, 9, 6, 7, 3), (3, 2, 3), ((2, 2), (1, 0), (2, 2)), (1, 1, 1), (2, 1, 2)),
        ((1, 7, 8, 8, 2), (2, 3, 3), ((0, 0), (1, 1), (1, 1)), (3, 1, 1), (2, 1, 1)),
        ((1, 3, 4, 20, 2), (1, 1, 11), ((0, 0), (0, 0), (5, 5)), (1, 1, 1), (1, 1, 1)),  # width 11: pieces
    ],
    ids=[
        "3x3x3",
        "2x3x4",
        "1x2x2",
        "stride2",
        "stride-1-2-2",
        "dilated",
        "depth-stride3-dilation2",
        "width11",
    ],
)
def test_three_d_filter_gradient_matches_float64(rng, x_shape, filter_dhw, pads, strides, dilation):
    """3D layers run WinRS (Level 2: one stacked 2D problem per filter depth tap) in every layout, strided and
    dilated too."""
    k = 5
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    w_shape = (*filter_dhw, x_shape[4], k)
    geometry = dict(window_strides=strides, padding=pads, rhs_dilation=dilation)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(
        x, jnp.zeros(w_shape), **geometry, dimension_numbers=("NDHWC", "DHWIO", "NDHWC")))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
    expected = reference_general_filter_grad(
        x, dy, filter_dhw, strides, pads, dilation
    )  # K x FD x FH x FW x C
    layouts = {"NDHWC": (0, 1, 2, 3, 4), "NCDHW": (0, 4, 1, 2, 3)}
    filters = {"DHWIO": (1, 2, 3, 4, 0), "OIDHW": (0, 4, 1, 2, 3)}
    for (lhs_layout, lhs_perm), (rhs_layout, rhs_perm) in zip(layouts.items(), filters.items(), strict=True):
        fn = jax.jit(functools.partial(
            winrs_jax.conv_backward_filter, rhs_shape=tuple(np.array((k, *filter_dhw, x_shape[4]))[list(rhs_perm)]),
            **geometry, dimension_numbers=(lhs_layout, rhs_layout, lhs_layout)))  # fmt: skip
        dw = fn(jnp.transpose(x, lhs_perm), jnp.transpose(dy, lhs_perm))
        assert (
            "winrs_backward_filter"
            in fn.lower(jnp.transpose(x, lhs_perm), jnp.transpose(dy, lhs_perm)).as_text()
        )
        _assert_close(dw, jnp.asarray(np.transpose(expected, rhs_perm), jnp.float32))


def test_strided_three_d_pieces_on_xla_are_one_ungrouped_convolution():
    """The pieces of a strided 3D layer that run on XLA share dY across the depth taps: they run as one
    convolution with the taps side by side in X's channels. Vmapped over the taps, XLA lowered them as a grouped
    convolution (feature_group_count = taps), much slower on the GPU."""
    fn = jax.jit(functools.partial(
        winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 3, 3, 5), window_strides=(2, 2, 2),
        padding=((1, 1),) * 3, dimension_numbers=("NDHWC", "DHWIO", "NDHWC")))  # fmt: skip
    text = fn.lower(jnp.ones((1, 7, 9, 8, 3)), jnp.ones((1, 4, 5, 4, 5))).as_text()
    assert "winrs_backward_filter" in text and "stablehlo.convolution" in text  # WinRS and XLA pieces
    assert set(re.findall(r"feature_group_count = (\d+)", text)) == {"1"}


@pytest.mark.parametrize(
    "multiplier, strides", [(1, (1, 1, 1)), (2, (2, 2, 2))], ids=["depthwise", "m2-strided"]
)
def test_three_d_depthwise_runs_the_direct_kernels(rng, multiplier, strides):
    """3D depthwise layers (X3D, MobileNet-3D) run the direct grouped kernels on the stacked depth taps."""
    c = 6
    x = jnp.asarray(rng.standard_normal((2, 6, 7, 9, c)), jnp.float32)
    w_shape, pads = (3, 3, 3, 1, c * multiplier), ((1, 1), (1, 1), (1, 1))
    dn = ("NDHWC", "DHWIO", "NDHWC")
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, jnp.float32), strides, pads, dimension_numbers=dn,
                          feature_group_count=c)  # fmt: skip
    assert plan.supported and plan.method == "direct" and plan.depth[2] == 3, plan
    assert "3 filter depth taps" in str(plan) and "depthwise" in str(plan)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(
        x, jnp.zeros(w_shape), strides, pads, dimension_numbers=dn, feature_group_count=c))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, window_strides=strides,
                                   padding=pads, dimension_numbers=dn, feature_group_count=c))  # fmt: skip
    assert "winrs_grouped_filter_grad" in fn.lower(x, dy).as_text()
    expected = reference_general_filter_grad(x, dy, (3, 3, 3), strides, pads, groups=c)  # K x 3 x 3 x 3 x 1
    _assert_close(fn(x, dy), jnp.asarray(np.moveaxis(expected, 0, -1), jnp.float32))
    batched = jax.vmap(fn, in_axes=(0, None))(jnp.stack([x, 2 * x]), dy)
    _assert_close(batched[1], jnp.asarray(2 * np.moveaxis(expected, 0, -1), jnp.float32))


def test_three_d_gradients_under_jit_grad_and_vmap_match_lax(rng):
    x, w = _operands(rng, (2, 3, 5, 6, 7, 4), (3, 2, 3, 4, 5))
    kwargs = dict(window_strides=(1, 1, 1), padding="SAME", dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
    ours = jax.jit(jax.vmap(functools.partial(_grads, winrs_jax.conv, **kwargs), in_axes=(0, None)))(x, w)
    theirs = jax.vmap(functools.partial(_grads, lax.conv_general_dilated, **kwargs), in_axes=(0, None))(x, w)
    for a, b in zip(ours, theirs, strict=True):
        _assert_close(a, b)


@pytest.mark.parametrize(
    "x_shape, filter_hw, strides, padding",
    [
        ((2, 15, 17, 3), (7, 7), (2, 2), ((3, 3), (3, 3))),  # a ResNet stem
        ((2, 14, 14, 4), (3, 3), (2, 2), ((1, 1), (1, 1))),  # downsampling 3x3: 1-wide pieces run on XLA
        ((1, 13, 11, 2), (5, 4), (3, 2), ((2, 1), (0, 2))),
        ((2, 16, 19, 3), (4, 6), (4, 3), ((1, 0), (2, 3))),
        ((2, 9, 30, 3), (3, 9), (1, 2), ((1, 1), (0, 0))),
    ],
)
def test_strided_filter_gradient_matches_float64(rng, x_shape, filter_hw, strides, padding):
    """Strided layers run as stride-1 pieces (DWM's polyphase split) whose dW interleave, in NHWC and NCHW."""
    k = 5
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(
        x, jnp.zeros((*filter_hw, x_shape[3], k)), strides, padding, dimension_numbers=NHWC))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
    expected = reference_general_filter_grad(x, dy, filter_hw, strides, padding)  # K x FH x FW x C
    for lhs_layout, rhs_layout, lhs_perm, rhs_perm in (("NHWC", "HWIO", (0, 1, 2, 3), (1, 2, 3, 0)),
                                                       ("NCHW", "OIHW", (0, 3, 1, 2), (0, 3, 1, 2))):  # fmt: skip
        rhs_shape = tuple(np.array((k, *filter_hw, x_shape[3]))[list(rhs_perm)])
        fn = jax.jit(
            functools.partial(
                winrs_jax.conv_backward_filter,
                rhs_shape=rhs_shape,
                window_strides=strides,
                padding=padding,
                dimension_numbers=(lhs_layout, rhs_layout, lhs_layout),
            )
        )
        args = (jnp.transpose(x, lhs_perm), jnp.transpose(dy, lhs_perm))
        _assert_close(fn(*args), jnp.asarray(np.transpose(expected, rhs_perm), jnp.float32))
        assert "winrs_backward_filter" in fn.lower(*args).as_text()


def test_strided_plan_lists_its_pieces():
    x = jax.ShapeDtypeStruct((8, 14, 14, 16), np.float32)
    w = jax.ShapeDtypeStruct((3, 3, 16, 32), np.float32)
    plan = winrs_jax.plan(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=NHWC)
    assert plan.supported and plan.strides == (2, 2) and plan.out_grad_hw == (7, 7)
    assert [(p.offset, p.plan.filter_hw, p.plan.supported) for p in plan.phases] == [
        ((0, 0), (2, 2), True), ((0, 1), (2, 1), False), ((1, 0), (1, 2), True), ((1, 1), (1, 1), False)]  # fmt: skip
    text = str(plan)
    assert "4 stride-1 pieces" in text and "XLA (filter width 1" in text
    # Every piece 1 wide: nothing for WinRS, and the plan says so.
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct((2, 2, 16, 32), np.float32), (2, 2), "VALID",
                          dimension_numbers=NHWC)  # fmt: skip
    assert not plan.supported and "WinRS has no kernels for any of them" in plan.reason


def test_strided_one_d_and_vmap_match_lax(rng):
    x, w = _operands(rng, (3, 2, 40, 4), (5, 4, 6))
    kwargs = dict(window_strides=(3,), padding=((2, 1),), dimension_numbers=("NWC", "WIO", "NWC"))
    ours = jax.jit(jax.vmap(functools.partial(_grads, winrs_jax.conv, **kwargs), in_axes=(0, None)))(x, w)
    theirs = jax.vmap(functools.partial(_grads, lax.conv_general_dilated, **kwargs), in_axes=(0, None))(x, w)
    for a, b in zip(ours, theirs, strict=True):
        _assert_close(a, b)


@pytest.mark.parametrize(
    "x_shape, filter_hw, dilation, padding",
    [
        ((2, 15, 17, 3), (3, 3), (2, 2), ((2, 2), (2, 2))),  # DeepLab-style atrous 3x3
        ((2, 14, 13, 3), (3, 3), (3, 2), ((3, 3), (2, 2))),
        ((1, 13, 11, 2), (2, 4), (2, 3), ((1, 0), (0, 2))),
        ((2, 20, 21, 3), (3, 3), (4, 4), ((0, 0), (0, 0))),
    ],
)
def test_dilated_filter_gradient_matches_float64(rng, x_shape, filter_hw, dilation, padding):
    """Dilated layers run as dh x dw stacked stride-1 problems (one per output phase) whose dW sum."""
    k = 4
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    kwargs = dict(window_strides=(1, 1), padding=padding, rhs_dilation=dilation, dimension_numbers=NHWC)
    out = jax.eval_shape(
        lambda: lax.conv_general_dilated(x, jnp.zeros((*filter_hw, x_shape[3], k)), **kwargs)
    )
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
    expected = reference_general_filter_grad(x, dy, filter_hw, (1, 1), padding, dilation)
    fn = jax.jit(
        functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(*filter_hw, x_shape[3], k), **kwargs)
    )
    _assert_close(fn(x, dy), jnp.asarray(np.transpose(expected, (1, 2, 3, 0)), jnp.float32))
    assert "winrs_backward_filter" in fn.lower(x, dy).as_text()
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct((*filter_hw, x_shape[3], k), jnp.float32), **kwargs)
    assert plan.dilation == dilation and f"{dilation[0] * dilation[1]} stacked stride-1 problems" in str(plan)


def test_dilated_one_d_matches_lax(rng):
    x, w = _operands(rng, (2, 50, 4), (3, 4, 6))
    kwargs = dict(
        window_strides=(1,), padding="SAME", rhs_dilation=(4,), dimension_numbers=("NWC", "WIO", "NWC")
    )
    for a, b in zip(_grads(winrs_jax.conv, x, w, **kwargs), _grads(lax.conv_general_dilated, x, w, **kwargs),
                    strict=True):  # fmt: skip
        _assert_close(a, b)


@pytest.mark.parametrize("width", [11, 13, 17, 23, 31])
@pytest.mark.parametrize("stride", [1, 2])
def test_wide_and_prime_filter_widths_match_float64(rng, width, stride):
    """Widths without kernels (no divisor in 2..9) run as pieces of at most 8 taps (DWM's filter split)."""
    x = jnp.asarray(rng.standard_normal((2, 5, 70, 3)), jnp.float32)
    padding = ((1, 1), (width // 2, width // 2))
    out = jax.eval_shape(lambda: lax.conv_general_dilated(
        x, jnp.zeros((3, width, 3, 4)), (1, stride), padding, dimension_numbers=NHWC))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
    expected = reference_general_filter_grad(x, dy, (3, width), (1, stride), padding)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(3, width, 3, 4),
                                   window_strides=(1, stride), padding=padding, dimension_numbers=NHWC))  # fmt: skip
    _assert_close(fn(x, dy), jnp.asarray(np.transpose(expected, (1, 2, 3, 0)), jnp.float32))
    assert "winrs_backward_filter" in fn.lower(x, dy).as_text()
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct((3, width, 3, 4), jnp.float32), (1, stride), padding,
                          dimension_numbers=NHWC)  # fmt: skip
    widths = [phase.plan.filter_hw[1] for phase in plan.phases]
    assert sum(widths) == width and all(phase.plan.supported for phase in plan.phases)
    # The printout names the split it made: of the filter's columns, or a strided layer's phases.
    assert ("pieces of the filter's columns" in str(plan)) == (stride == 1), str(plan)


@pytest.mark.parametrize(
    "x_shape, w_shape, kwargs",
    [
        ((2, 12, 13, 48), (3, 3, 24, 6), dict(feature_group_count=2)),  # 24 channels per group: stacked
        ((2, 12, 13, 8), (3, 3, 2, 8), dict(feature_group_count=4, window_strides=(2, 2))),  # dense
        ((2, 12, 13, 8), (3, 3, 1, 8), dict(feature_group_count=8)),  # depthwise
        ((2, 12, 13, 8), (5, 5, 1, 16), dict(feature_group_count=8, rhs_dilation=(2, 1))),  # multiplier 2
        (
            (3, 1, 40, 6),
            (1, 4, 1, 6),
            dict(feature_group_count=6, padding=((0, 0), (3, 0))),
        ),  # causal 1D, Mamba
    ],
    ids=["groups2", "groups4-strided", "depthwise", "depthwise-m2-dilated", "depthwise-causal-1d"],
)
def test_grouped_filter_gradient_matches_lax(rng, x_shape, w_shape, kwargs):
    """Grouped and depthwise layers: groups of more than 16 input channels run as stacked WinRS problems in one
    launch, 2 to 16 as the dense layer of all channels, one (depthwise) on the direct grouped kernels
    (tests/test_grouped.py)."""
    x, w = _operands(rng, x_shape, w_shape)
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)
    args.update(kwargs)
    for a, b in zip(_grads(winrs_jax.conv, x, w, **args), _grads(lax.conv_general_dilated, x, w, **args),
                    strict=True):  # fmt: skip
        _assert_close(a, b)
    plan = winrs_jax.plan(x, w, **args)
    target = "winrs_backward_filter" if plan.method == "winrs" else "winrs_grouped_filter_grad"
    assert target in _hlo(functools.partial(_grads, winrs_jax.conv, **args), x, w)
    groups, group_c = kwargs["feature_group_count"], w_shape[2]
    assert (plan.groups, plan.dense_groups) == ((1, groups) if 2 <= group_c <= 16 else (groups, 1))
    assert f"{groups} groups of" in str(plan)
    assert plan.method == ("direct" if group_c == 1 else "winrs")


def test_grouped_three_d_in_ncdhw_matches_lax(rng):
    x, w = _operands(rng, (2, 4, 5, 6, 7), (6, 2, 3, 3, 3))  # NCDHW, OIDHW: 2 groups of 2 -> 3
    args = dict(window_strides=(1, 1, 1), padding="SAME", dimension_numbers=("NCDHW", "OIDHW", "NCDHW"),
                feature_group_count=2)  # fmt: skip
    for a, b in zip(_grads(winrs_jax.conv, x, w, **args), _grads(lax.conv_general_dilated, x, w, **args),
                    strict=True):  # fmt: skip
        _assert_close(a, b)


def _ffi_operand_producers(text: str) -> list[str]:
    """The instructions of the entry computation that make the WinRS FFI call's operands."""
    entry = text[text.index("ENTRY") :]
    call = next(line for line in entry.splitlines() if 'custom_call_target="winrs_' in line)
    names = re.search(r"custom-call\(([^)]*)\)", call).group(1).replace(" ", "").split(",")
    return [
        next(line for line in entry.splitlines() if line.strip().startswith(f"{name} =")) for name in names
    ]


@pytest.mark.parametrize("groups, rhs_shape", [(1, (3, 16, 8)), (16, (4, 1, 16))], ids=["dense", "depthwise"])
@pytest.mark.parametrize("ensemble", [False, True])
def test_1d_operands_reach_the_kernel_without_copies(rng, groups, rhs_shape, ensemble):
    """A 1D layer's X and dY get a unit height axis for the kernels: the FFI call must take them as they are
    (bitcasts), not copies of both (what XLA made of the row-major operands it had asked for), also as stacked
    problems of a vmapped ensemble. (bfloat16: XLA's CPU compiler copied those, not float32 ones.) The filter
    gradient matches lax's on the same rounded inputs in float32."""
    out_c = rhs_shape[2]  # WIO: O counts every group's outputs
    x = jnp.asarray(rng.standard_normal((4, 40, 16)), jnp.bfloat16)
    dy = jnp.asarray(rng.standard_normal((4, 40, out_c)), jnp.bfloat16)
    kw = dict(window_strides=(1,), padding="SAME", dimension_numbers=("NWC", "WIO", "NWC"),
              feature_group_count=groups)  # fmt: skip
    forced = winrs_jax.PlannerOptions(mode="winrs")

    def ours(x, dy):
        return winrs_jax.conv_backward_filter(x, dy, rhs_shape, **kw, options=forced)

    def theirs(x, dy):
        x, dy = x.astype(jnp.float32), dy.astype(jnp.float32)
        exact = dict(kw, precision=lax.Precision.HIGHEST)
        return jax.vjp(lambda w: lax.conv_general_dilated(x, w, **exact), jnp.zeros(rhs_shape))[1](dy)[0]

    if ensemble:
        x, dy = jnp.stack([x, 2 * x]), jnp.stack([dy, -dy])
        ours, theirs = jax.vmap(ours), jax.vmap(theirs)
    producers = _ffi_operand_producers(jax.jit(ours).lower(x, dy).compile().as_text())
    assert all(" parameter(" in line or " bitcast(" in line for line in producers), producers
    expected = theirs(x, dy)
    np.testing.assert_allclose(jax.jit(ours)(x, dy).astype(jnp.float32), expected, rtol=2e-2,
                               atol=1e-2 * float(jnp.abs(expected).max()))  # bfloat16 dW: 8 bits  # fmt: skip


def test_plan_takes_what_conv_takes():
    """plan() of NumPy float64 arrays or nested lists is the plan of what conv makes of them (float32 unless
    jax_enable_x64 is on), as conv's own jnp.asarray would give; it had called float64 NumPy inputs
    unsupported while conv ran WinRS on them, and had failed on lists."""
    rng = np.random.default_rng(0)
    x, w = rng.random((2, 8, 8, 4)), rng.random((3, 3, 4, 6))  # float64
    options = winrs_jax.PlannerOptions(mode="winrs")
    expected = winrs_jax.plan(
        jax.ShapeDtypeStruct(x.shape, jnp.float32), jax.ShapeDtypeStruct(w.shape, jnp.float32), (1, 1), "SAME",
        dimension_numbers=NHWC, options=options,
    )  # fmt: skip
    assert expected.supported
    for lhs, rhs in ((x, w), (x.tolist(), w.tolist())):
        plan = winrs_jax.plan(lhs, rhs, (1, 1), "SAME", dimension_numbers=NHWC, options=options)
        assert str(plan) == str(expected)
        hlo = _hlo(functools.partial(_grads, winrs_jax.conv, window_strides=(1, 1), padding="SAME",
                                     dimension_numbers=NHWC, options=options), lhs, rhs)  # fmt: skip
        assert "winrs_backward_filter" in hlo
