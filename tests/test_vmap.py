"""vmap runs the stacked filter gradients in one FFI call (no sequential loop), for every in_axes combination."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import winrs_jax
from winrs_jax import _ffi

NHWC = ("NHWC", "HWIO", "NHWC")
ARGS = dict(
    window_strides=(1, 1), padding=((1, 0), (2, 1)), dimension_numbers=NHWC, precision=lax.Precision.HIGHEST
)


def _loss(conv_fn, lhs, rhs):
    return jnp.sum(jnp.sin(conv_fn(lhs, rhs, **ARGS)))


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * np.abs(b).max())


@pytest.mark.parametrize("in_axes", list(itertools.product((0, None), repeat=2))[:-1] + [(1, 3)])
@pytest.mark.parametrize("order", ["vmap_of_grad", "grad_of_vmap"])
def test_every_in_axes_combination(in_axes, order, rng):
    batch = 3
    lhs_shape, rhs_shape = [2, 9, 10, 4], [3, 4, 4, 5]
    if in_axes[0] is not None:
        lhs_shape.insert(in_axes[0], batch)
    if in_axes[1] is not None:
        rhs_shape.insert(in_axes[1], batch)
    lhs = jnp.asarray(rng.standard_normal(lhs_shape), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal(rhs_shape), jnp.float32)

    def build(conv_fn):
        if order == "vmap_of_grad":
            return jax.vmap(jax.grad(functools.partial(_loss, conv_fn), argnums=(0, 1)), in_axes=in_axes)
        batched = jax.vmap(functools.partial(_loss, conv_fn), in_axes=in_axes)
        return jax.grad(lambda a, b: jnp.sum(batched(a, b)), argnums=(0, 1))

    ours = jax.jit(build(winrs_jax.conv))(lhs, rhs)
    theirs = jax.jit(build(lax.conv_general_dilated))(lhs, rhs)
    for a, b in zip(ours, theirs, strict=True):
        _close(a, b)
    text = jax.jit(build(winrs_jax.conv)).lower(lhs, rhs).as_text()
    assert text.count("winrs_backward_filter") >= 1
    assert "while" not in text  # one stacked call, not a sequential loop


def test_nested_vmap_of_conv_backward_filter(rng):
    x = jnp.asarray(rng.random((2, 3, 4, 8, 8, 3)), jnp.float32)
    dy = jnp.asarray(rng.random((2, 3, 4, 8, 8, 5)), jnp.float32)
    fn = functools.partial(
        winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 3, 5), padding="SAME", dimension_numbers=NHWC
    )
    ours = jax.jit(jax.vmap(jax.vmap(fn)))(x, dy)
    for i, j in itertools.product(range(2), range(3)):
        _close(ours[i, j], fn(x[i, j], dy[i, j]))


def test_handler_rejects_mismatched_leading_axes():
    attrs = dict(pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, stride_h=1, stride_w=1, path=0, reference=0,
                 sm_count=132, segments=1, buckets=0, variant0=-1, variant1=-1, atomic=0,
                 smem_per_block=227 * 1024)  # fmt: skip
    x, dy = jnp.ones((2, 2, 8, 8, 4)), jnp.ones((3, 2, 8, 8, 4))
    with pytest.raises(Exception, match=f"{_ffi.TARGET}: .*leading"):
        np.asarray(_ffi.backward_filter_call(x, dy, (2,), (4, 3, 3, 4), 0, attrs))


def test_handler_reads_a_shared_operand_once_per_problem(rng):
    """Leading axes of size 1 mean one operand for every stacked problem (vmap's expand_dims): no copies."""
    attrs = dict(pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, stride_h=1, stride_w=1, path=0, reference=0,
                 sm_count=132, segments=1, buckets=0, variant0=-1, variant1=-1, atomic=0,
                 smem_per_block=227 * 1024)  # fmt: skip
    x = jnp.asarray(rng.random((1, 2, 8, 8, 4)), jnp.float32)
    dy = jnp.asarray(rng.random((3, 2, 8, 8, 4)), jnp.float32)
    stacked = np.asarray(_ffi.backward_filter_call(x, dy, (3,), (4, 3, 3, 4), 0, attrs))
    for i in range(3):
        one = np.asarray(_ffi.backward_filter_call(x[0], dy[i], (), (4, 3, 3, 4), 0, attrs))
        np.testing.assert_array_equal(stacked[i], one)


def _winrs_operand_shapes(text):
    """Operand types of the winrs_backward_filter custom calls in lowered StableHLO."""
    calls = [line for line in text.splitlines() if "winrs_backward_filter" in line and "custom_call" in line]
    return [line.split(": (")[1].split(")")[0] for line in calls]


def test_jacobian_by_vmap_shares_the_input_instead_of_copying_it(rng):
    """jacrev over a conv's outputs vmaps the filter gradient over cotangents with the input unmapped: the
    FFI call gets the input once (a size-1 leading axis), not one copy per output element."""
    x = jnp.asarray(rng.standard_normal((1, 5, 5, 2)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((3, 3, 2, 2)), jnp.float32)

    def out(conv_fn, w):
        return conv_fn(x, w, (1, 1), "SAME", dimension_numbers=NHWC)

    ours = jax.jit(jax.jacrev(functools.partial(out, winrs_jax.conv)))
    _close(ours(w), jax.jacrev(functools.partial(out, lax.conv_general_dilated))(w))
    (operands,) = _winrs_operand_shapes(ours.lower(w).as_text())
    assert operands.startswith("tensor<1x1x5x5x2xf32>, tensor<50x1x5x5x2xf32>"), operands


@pytest.mark.parametrize("in_axes", [(None, 0), (0, None), (0, 0)])
def test_grouped_layers_with_a_shared_operand(in_axes, rng):
    """A grouped layer of more than 8 input channels per group runs its groups as stacked problems: an operand
    vmap leaves shared (leading axis 1) must be broadcast to the groups, not passed as shared (which the handler
    refused: "leading (vmapped) axes ... must equal the filter gradient's")."""
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC, feature_group_count=2,
                precision=lax.Precision.HIGHEST)  # fmt: skip
    lhs = jnp.asarray(
        rng.standard_normal((3, 2, 9, 10, 20) if in_axes[0] == 0 else (2, 9, 10, 20)), jnp.float32
    )
    rhs = jnp.asarray(
        rng.standard_normal((3, 3, 3, 10, 6) if in_axes[1] == 0 else (3, 3, 10, 6)), jnp.float32
    )

    def grads(conv_fn):
        loss = lambda x, w: jnp.sum(jnp.sin(conv_fn(x, w, **args)))  # noqa: E731
        return jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=in_axes))(lhs, rhs)

    for ours, theirs in zip(grads(winrs_jax.conv), grads(lax.conv_general_dilated), strict=True):
        _close(ours, theirs)


def test_a_3d_grouped_layer(rng):
    """A 3D layer's depth taps share dY; with wide groups the groups lead, and dY is broadcast to the taps."""
    args = dict(
        window_strides=(1, 1, 1), padding="SAME", feature_group_count=2, precision=lax.Precision.HIGHEST
    )
    lhs = jnp.asarray(rng.standard_normal((2, 20, 5, 6, 7)), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal((8, 10, 3, 3, 3)), jnp.float32)
    grad = lambda conv_fn: jax.jit(jax.grad(lambda w: jnp.sum(jnp.sin(conv_fn(lhs, w, **args)))))(rhs)  # noqa: E731
    _close(grad(winrs_jax.conv), grad(lax.conv_general_dilated))


@pytest.mark.parametrize("groups", [1, 2])
def test_vmap_over_an_empty_axis(groups):
    """vmap over a size-0 axis returns empty results of lax's shapes (an unbatched operand's size 1 and the
    empty axis broadcast to 0, and no problem is planned or run)."""
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC, feature_group_count=groups)
    lhs, rhs = jnp.zeros((0, 2, 9, 10, 20)), jnp.zeros((3, 3, 20 // groups, 6))
    for in_axes, w in (((0, None), rhs), ((0, 0), jnp.zeros((0, *rhs.shape)))):

        def run(conv_fn, in_axes=in_axes, w=w):
            loss = lambda x, w: jnp.sum(jnp.sin(conv_fn(x, w, **args)))  # noqa: E731
            forward = jax.vmap(lambda x, w: conv_fn(x, w, **args), in_axes=in_axes)(lhs, w)
            return (forward, *jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=in_axes)(lhs, w))

        for ours, theirs in zip(run(winrs_jax.conv), run(lax.conv_general_dilated), strict=True):
            assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
