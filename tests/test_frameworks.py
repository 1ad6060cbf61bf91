"""Flax (linen, nnx), Haiku and Equinox modules built on winrs_jax.conv; jax.export of a training step."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import winrs_jax


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * np.abs(b).max())


def _trees_close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        _close(x, y)


def _has_winrs(fn, *args):
    return "winrs_backward_filter" in jax.jit(fn).lower(*args).as_text()


@pytest.fixture
def images(rng):
    return jnp.asarray(rng.standard_normal((2, 11, 10, 3)), jnp.float32)


def test_linen_conv_field_and_module(images):
    nn = pytest.importorskip("flax.linen")
    from winrs_jax.linen import Conv

    theirs = nn.Conv(features=6, kernel_size=(3, 5), padding="SAME")
    params = theirs.init(jax.random.key(0), images)
    field = nn.Conv(features=6, kernel_size=(3, 5), padding="SAME", conv_general_dilated=winrs_jax.conv)
    for ours in (Conv(features=6, kernel_size=(3, 5), padding="SAME"), field):
        _close(ours.apply(params, images), theirs.apply(params, images))

        def loss(module, p):
            return jnp.sum(module.apply(p, images) ** 2)

        _trees_close(
            jax.grad(functools.partial(loss, ours))(params), jax.grad(functools.partial(loss, theirs))(params)
        )
        assert _has_winrs(jax.grad(functools.partial(loss, ours)), params)


def test_nnx_conv(images):
    nnx = pytest.importorskip("flax.nnx")
    from winrs_jax.nnx import Conv

    ours = Conv(3, 6, kernel_size=(3, 3), rngs=nnx.Rngs(0))
    theirs = nnx.Conv(3, 6, kernel_size=(3, 3), rngs=nnx.Rngs(0))
    also_ours = nnx.Conv(3, 6, kernel_size=(3, 3), conv_general_dilated=winrs_jax.conv, rngs=nnx.Rngs(0))

    def loss(model):
        return jnp.sum(model(images) ** 2)

    g_theirs = nnx.grad(loss)(theirs)
    for model in (ours, also_ours):
        _close(model(images), theirs(images))
        _trees_close(nnx.state(nnx.grad(loss)(model)), nnx.state(g_theirs))

    graph, state = nnx.split(ours)
    assert _has_winrs(jax.grad(lambda s: loss(nnx.merge(graph, s))), state)


def test_haiku_conv2d(images):
    hk = pytest.importorskip("haiku")
    from winrs_jax.haiku import Conv2D

    def net(module_cls, x):
        return module_cls(output_channels=4, kernel_shape=(5, 3), padding="SAME", name="conv")(x)

    theirs = hk.without_apply_rng(hk.transform(functools.partial(net, hk.Conv2D)))
    ours = hk.without_apply_rng(hk.transform(functools.partial(net, Conv2D)))
    params = theirs.init(jax.random.key(0), images)
    assert jax.tree.structure(ours.init(jax.random.key(0), images)) == jax.tree.structure(params)
    _close(ours.apply(params, images), theirs.apply(params, images))
    _close(ours.apply(params, images[0]), theirs.apply(params, images[0]))  # unbatched input

    def loss(model, p):
        return jnp.sum(jnp.tanh(model.apply(p, images)))

    _trees_close(
        jax.grad(functools.partial(loss, ours))(params), jax.grad(functools.partial(loss, theirs))(params)
    )
    assert _has_winrs(jax.grad(functools.partial(loss, ours)), params)


def test_equinox_conv2d(rng):
    eqx = pytest.importorskip("equinox")
    from winrs_jax.equinox import Conv2d

    x = jnp.asarray(rng.standard_normal((4, 3, 9, 12)), jnp.float32)
    key = jax.random.key(1)
    theirs = eqx.nn.Conv2d(3, 5, kernel_size=(3, 4), padding=((1, 1), (2, 1)), key=key)
    ours = Conv2d(3, 5, kernel_size=(3, 4), padding=((1, 1), (2, 1)), key=key)
    _close(jax.vmap(ours)(x), jax.vmap(theirs)(x))
    _close(ours(x), jax.vmap(theirs)(x))  # a batch directly

    def loss(model):
        return jnp.sum(jnp.sin(jax.vmap(model)(x)))

    g_ours = eqx.filter_grad(loss)(ours)
    g_theirs = eqx.filter_grad(loss)(theirs)
    _close(g_ours.weight, g_theirs.weight)
    _close(g_ours.bias, g_theirs.bias)
    params, static = eqx.partition(ours, eqx.is_array)
    text = jax.jit(jax.grad(lambda p: loss(eqx.combine(p, static)))).lower(params).as_text()
    assert "winrs_backward_filter" in text and "while" not in text


def test_export_round_trip_of_a_training_step(rng):
    """jax.export serialises a jitted training step with the FFI call; the deserialised step runs."""
    x = jnp.asarray(rng.standard_normal((2, 8, 8, 3)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((3, 3, 3, 4)), jnp.float32)

    def step(w, x):
        loss, grad = jax.value_and_grad(
            lambda w: jnp.mean(
                winrs_jax.conv(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2
            )
        )(w)
        return w - 0.1 * grad, loss

    exported = jax.export.export(jax.jit(step), disabled_checks=winrs_jax.export_disabled_checks())(w, x)
    assert "winrs_backward_filter" in exported.mlir_module()
    restored = jax.export.deserialize(exported.serialize())
    new_w, loss = restored.call(w, x)
    ref_w, ref_loss = step(w, x)
    _close(new_w, ref_w)
    _close(loss, ref_loss)


def test_export_for_platforms_without_winrs_holds_xlas_filter_gradient():
    """WinRS's handlers are the CPU's and CUDA's: an export for a TPU (or ROCm) holds XLA's filter gradient and no
    custom call, as lax's does (it held WinRS's, which no TPU can run); one for the CPU and a TPU holds both, one
    for the CPU and CUDA WinRS's once."""
    x = jax.ShapeDtypeStruct((4, 10, 10, 3), jnp.float32)
    w = jax.ShapeDtypeStruct((3, 3, 3, 5), jnp.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    grad = jax.jit(jax.grad(lambda w, x: jnp.sum(winrs_jax.conv(x, w, (1, 1), "SAME", dimension_numbers=dn))))

    def module(platforms):
        return jax.export.export(
            grad, platforms=platforms, disabled_checks=winrs_jax.export_disabled_checks()
        )(w, x).mlir_module()

    assert "custom_call" not in module(("tpu",)) and "custom_call" not in module(("rocm",))
    assert "winrs_backward_filter" in module(("cpu", "tpu")) and "winrs_backward_filter" in module(("cuda",))
    assert module(("cpu", "cuda")).count("custom_call @winrs_backward_filter") == 1  # one rule, no branches


@pytest.mark.parametrize("mode", ["model", "winrs"])
def test_export_with_a_symbolic_batch_falls_back_to_xla(rng, mode):
    """A symbolic batch size (jax.export's shape polymorphism) cannot be planned: the gradient exports with XLA's
    filter gradient, as lax's does, and the exported call matches lax on a concrete batch."""
    dn = ("NHWC", "HWIO", "NHWC")
    w = jnp.asarray(rng.standard_normal((3, 3, 3, 4)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((5, 8, 8, 3)), jnp.float32)
    (b,) = jax.export.symbolic_shape("b")

    def grads(conv):
        return jax.jit(
            jax.grad(lambda x, w: jnp.sum(conv(x, w, (1, 1), "SAME", dimension_numbers=dn) ** 2), (0, 1))
        )

    with winrs_jax.mode(mode):
        exported = jax.export.export(
            grads(winrs_jax.conv), disabled_checks=winrs_jax.export_disabled_checks()
        )(jax.ShapeDtypeStruct((b, 8, 8, 3), jnp.float32), w)
        plan = winrs_jax.plan(jax.ShapeDtypeStruct((b, 8, 8, 3), jnp.float32), w, (1, 1), "SAME",
                              dimension_numbers=dn)  # fmt: skip
    assert "winrs_backward_filter" not in exported.mlir_module()
    assert not plan.supported and "symbolic sizes (b)" in plan.reason
    for ours, theirs in zip(exported.call(x, w), grads(jax.lax.conv_general_dilated)(x, w), strict=True):
        _close(ours, theirs)


@pytest.mark.parametrize("name, shape, kernel", [("Conv1D", (2, 13, 3), 3), ("Conv3D", (2, 5, 6, 7, 3), (3, 3, 2)),
                                                 ("ConvND", (2, 9, 3), 5)])  # fmt: skip
def test_haiku_conv_of_every_rank(rng, name, shape, kernel):
    hk = pytest.importorskip("haiku")
    import winrs_jax.haiku

    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
    extra = dict(num_spatial_dims=len(shape) - 2) if name == "ConvND" else {}

    def net(module_cls, x):
        return module_cls(output_channels=4, kernel_shape=kernel, padding="SAME", name="conv", **extra)(x)

    theirs = hk.without_apply_rng(hk.transform(functools.partial(net, getattr(hk, name))))
    ours = hk.without_apply_rng(hk.transform(functools.partial(net, getattr(winrs_jax.haiku, name))))
    params = theirs.init(jax.random.key(0), x)
    _close(ours.apply(params, x), theirs.apply(params, x))

    def loss(model, p):
        return jnp.sum(jnp.tanh(model.apply(p, x)))

    _trees_close(
        jax.grad(functools.partial(loss, ours))(params), jax.grad(functools.partial(loss, theirs))(params)
    )
    assert _has_winrs(jax.grad(functools.partial(loss, ours)), params)


@pytest.mark.parametrize("name, shape, kernel", [("Conv1d", (3, 3, 14), 3), ("Conv3d", (3, 3, 5, 6, 7), 3),
                                                 ("Conv", (3, 3, 11), 5)])  # fmt: skip
def test_equinox_conv_of_every_rank(rng, name, shape, kernel):
    eqx = pytest.importorskip("equinox")
    import winrs_jax.equinox

    x = jnp.asarray(rng.standard_normal(shape), jnp.float32)  # N x C x spatial
    args = ((len(shape) - 2,) if name == "Conv" else ()) + (3, 5)  # Conv's first: num_spatial_dims
    key = jax.random.key(0)
    theirs = getattr(eqx.nn, name)(*args, kernel_size=kernel, padding="SAME", key=key)
    ours = getattr(winrs_jax.equinox, name)(*args, kernel_size=kernel, padding="SAME", key=key)
    _close(jax.vmap(ours)(x), jax.vmap(theirs)(x))
    _close(ours(x), jax.vmap(theirs)(x))  # a batch directly

    def loss(model):
        return jnp.sum(jnp.sin(jax.vmap(model)(x)))

    g_ours, g_theirs = eqx.filter_grad(loss)(ours), eqx.filter_grad(loss)(theirs)
    _close(g_ours.weight, g_theirs.weight)
    _close(g_ours.bias, g_theirs.bias)
    params, static = eqx.partition(ours, eqx.is_array)
    assert (
        "winrs_backward_filter"
        in jax.jit(jax.grad(lambda p: loss(eqx.combine(p, static)))).lower(params).as_text()
    )
