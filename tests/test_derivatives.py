"""Every order and mode of differentiation, as with lax.conv_general_dilated: winrs_jax.conv is a primitive with
lax's JVP and transpose rules, its filter gradient (WinRS) is a bilinear primitive whose own derivatives are
convolutions."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads

import winrs_jax

NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(conv_fn, x, w, padding=((1, 1), (2, 0))):
    return conv_fn(x, w, (1, 1), padding, dimension_numbers=NHWC)


def _data(rng, dtype=jnp.float32, x_shape=(2, 7, 8, 3), w_shape=(3, 3, 3, 4)):
    return (
        jnp.asarray(rng.standard_normal(x_shape), dtype),
        jnp.asarray(rng.standard_normal(w_shape), dtype),
    )


def _close(ours, theirs, rtol=2e-4):
    """float32 results of two orders of summation: within a few ulps of the largest magnitude."""
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())


def test_check_grads_second_order_in_float64(rng):
    """Finite differences in float64 check the JVP and transpose rules themselves, forward and reverse, to the
    second order (float64 runs lax's filter gradient inside the same primitives)."""
    with jax.enable_x64(True):
        x, w = _data(rng, jnp.float64, (2, 5, 6, 2), (3, 2, 2, 3))
        fn = functools.partial(_conv, winrs_jax.conv)
        check_grads(lambda x, w: jnp.sum(jnp.sin(fn(x, w))), (x, w), order=2, modes=("fwd", "rev"))
        check_grads(
            lambda x, w: winrs_jax.conv_backward_filter(x, jnp.cos(fn(x, w)), w.shape, (1, 1), ((1, 1), (2, 0)),
                                                        dimension_numbers=NHWC),
            (x, w), order=2, modes=("fwd", "rev"),
        )  # fmt: skip


def _hlo(fn, *args):
    return jax.jit(fn).lower(*args).as_text()


def test_gradient_penalty_matches_lax_and_runs_winrs(rng):
    """A WGAN-GP style penalty: the gradient of ||d out / d x||^2 with respect to the weights differentiates the
    input gradient, and its filter gradients run WinRS."""
    x, w = _data(rng)

    def penalty(conv_fn, w, x):
        grad_x = jax.grad(lambda x: jnp.sum(jnp.tanh(_conv(conv_fn, x, w))))(x)
        return jnp.sum(grad_x**2) + jnp.sum(_conv(conv_fn, x, w) ** 2)

    ours = jax.jit(jax.grad(functools.partial(penalty, winrs_jax.conv)))(w, x)
    theirs = jax.jit(jax.grad(functools.partial(penalty, lax.conv_general_dilated)))(w, x)
    _close(ours, theirs)
    assert (
        _hlo(jax.grad(functools.partial(penalty, winrs_jax.conv)), w, x).count("winrs_backward_filter") >= 2
    )


def test_hessian_vector_product_and_hessian(rng):
    x, w = _data(rng, x_shape=(2, 6, 6, 2), w_shape=(2, 3, 2, 2))
    v = jnp.asarray(rng.standard_normal(w.shape), jnp.float32)

    def loss(conv_fn, w):
        return jnp.sum(jnp.sin(_conv(conv_fn, x, w)) ** 2)

    def hvp(conv_fn, w):
        return jax.jvp(jax.grad(functools.partial(loss, conv_fn)), (w,), (v,))[1]

    reference = jax.jit(functools.partial(hvp, lax.conv_general_dilated))(w)
    _close(jax.jit(functools.partial(hvp, winrs_jax.conv))(w), reference)
    reverse_over_reverse = jax.grad(
        lambda w: jnp.vdot(jax.grad(functools.partial(loss, winrs_jax.conv))(w), v)
    )
    _close(jax.jit(reverse_over_reverse)(w), reference)
    assert "winrs_backward_filter" in _hlo(reverse_over_reverse, w)
    _close(
        jax.jit(jax.hessian(functools.partial(loss, winrs_jax.conv)))(w),
        jax.jit(jax.hessian(functools.partial(loss, lax.conv_general_dilated)))(w),
    )


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_jvp_and_jacfwd(rng, argnums):
    x, w = _data(rng, x_shape=(1, 5, 5, 2), w_shape=(2, 2, 2, 3))
    tangents = (jnp.ones_like(x), -jnp.ones_like(w))
    ours = jax.jvp(functools.partial(_conv, winrs_jax.conv), (x, w), tangents)
    theirs = jax.jvp(functools.partial(_conv, lax.conv_general_dilated), (x, w), tangents)
    _close(ours, theirs)
    # Each mode against lax's same mode: XLA's CPU float32 input gradient with this padding (a negative
    # padding in the transposed convolution) differs from its forward-mode one, and ours is lax's.
    for jac in (jax.jacfwd, jax.jacrev):
        _close(
            jac(functools.partial(_conv, winrs_jax.conv), argnums)(x, w),
            jac(functools.partial(_conv, lax.conv_general_dilated), argnums)(x, w),
        )


def test_per_example_gradient_penalty_grad_of_vmap_of_grad(rng):
    """grad(vmap(grad)): per-example weight gradients are stacked WinRS problems, and they are differentiated
    again (their derivative rules hold on the stacked problems)."""
    x, w = _data(rng, x_shape=(3, 6, 6, 2), w_shape=(3, 3, 2, 2))

    def objective(conv_fn, w):
        per_example = jax.vmap(
            jax.grad(lambda w, xi: jnp.sum(jnp.sin(_conv(conv_fn, xi[None], w)))), in_axes=(None, 0)
        )(w, x)
        return jnp.sum(per_example**2)

    ours = jax.grad(functools.partial(objective, winrs_jax.conv))
    _close(jax.jit(ours)(w), jax.jit(jax.grad(functools.partial(objective, lax.conv_general_dilated)))(w))
    assert "winrs_backward_filter" in _hlo(ours, w)


def test_conv_backward_filter_is_differentiable(rng):
    x, w = _data(rng)
    dy = jnp.asarray(rng.standard_normal(_conv(lax.conv_general_dilated, x, w).shape), jnp.float32)

    def ours(x, dy):
        dw = winrs_jax.conv_backward_filter(x, dy, w.shape, (1, 1), ((1, 1), (2, 0)), dimension_numbers=NHWC)
        return jnp.sum(jnp.sin(dw))

    def theirs(x, dy):
        _, vjp = jax.vjp(lambda w: _conv(lax.conv_general_dilated, x, w), w)
        return jnp.sum(jnp.sin(vjp(dy)[0]))

    _close(jax.jit(jax.grad(ours, (0, 1)))(x, dy), jax.jit(jax.grad(theirs, (0, 1)))(x, dy))


def test_checkpoint_policy_saves_winrs_convolutions_as_lax_ones(rng):
    """jax.checkpoint's dots_saveable names lax's primitives and recomputes winrs_jax.conv's outputs in the backward
    pass; wrapped by winrs_jax.checkpoint_policy it keeps them, as it keeps lax's. Gradients match lax's."""
    from jax._src.ad_checkpoint import saved_residuals

    x, w = _data(rng)

    def net(conv_fn, w):
        return jnp.sum(_conv(conv_fn, jnp.tanh(_conv(conv_fn, x, w))[..., :3], w))

    def saved(conv_fn, policy):
        f = jax.checkpoint(functools.partial(net, conv_fn), policy=policy)
        return [text for _, text in saved_residuals(f, w) if "conv" in text]

    dots = jax.checkpoint_policies.dots_saveable
    wrapped = winrs_jax.checkpoint_policy(dots)
    # the first convolution's output (tanh's input), which the backward pass needs
    assert len(saved(lax.conv_general_dilated, dots)) == 1
    assert saved(winrs_jax.conv, dots) == []
    assert len(saved(winrs_jax.conv, wrapped)) == 1 and "winrs_conv" in saved(winrs_jax.conv, wrapped)[0]
    assert saved(winrs_jax.conv, winrs_jax.checkpoint_policy(jax.checkpoint_policies.nothing_saveable)) == []
    with winrs_jax.mode("winrs"):
        ours = jax.jit(jax.grad(jax.checkpoint(functools.partial(net, winrs_jax.conv), policy=wrapped)))(w)
    _close(ours, jax.grad(functools.partial(net, lax.conv_general_dilated))(w))
