"""Run by tests/test_sharding.py in a process with 4 CPU devices: batch-sharded training steps with
winrs_jax.conv under jit (a plain Mesh and jax.make_mesh's explicit axes) and shard_map (with and without
pcast), a second-order gradient, a vmapped ensemble and a layer grouped over the batch under the sharded jit,
compared with one device.
Prints one JSON line."""

import json
import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import contextlib  # noqa: E402
import functools  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import winrs_jax  # noqa: E402

DN = ("NHWC", "HWIO", "NHWC")


def loss(conv, w, x):
    return jnp.mean(jnp.sin(conv(x, w, (1, 1), "SAME", dimension_numbers=DN)))


def batch_grouped_loss(conv, w, x):
    return jnp.mean(jnp.sin(conv(x, w, (1, 1), "SAME", dimension_numbers=DN, batch_group_count=2)))


def main() -> None:
    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((8, 12, 12, 6)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((3, 3, 6, 5)), jnp.float32)
    reference = jax.jit(jax.grad(functools.partial(loss, lax.conv_general_dilated)))(w, x)

    mesh = Mesh(np.array(jax.devices()), ("d",))
    xs = jax.device_put(x, NamedSharding(mesh, P("d")))
    ws = jax.device_put(w, NamedSharding(mesh, P()))
    step = jax.jit(jax.grad(functools.partial(loss, winrs_jax.conv)), out_shardings=NamedSharding(mesh, P()))
    jit_grad = step(ws, xs)
    hlo = step.lower(ws, xs).compile().as_text()

    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("d")), out_specs=P())
    def shard_grad(w, x):
        w = lax.pcast(w, "d", to="varying")
        g = jax.grad(functools.partial(loss, winrs_jax.conv))(w, x)
        return lax.pmean(g, "d")

    shard_map_grad = jax.jit(shard_grad)(ws, xs)

    # A layer grouped over the batch (2 groups of 4 images; each device holds 2 images of one group).
    wg = w[..., :4]
    batch_grouped_reference = jax.jit(
        jax.grad(functools.partial(batch_grouped_loss, lax.conv_general_dilated))
    )(wg, x)
    batch_grouped = jax.jit(jax.grad(functools.partial(batch_grouped_loss, winrs_jax.conv)))(
        jax.device_put(wg, NamedSharding(mesh, P())), xs
    )

    # The default jax.make_mesh (explicit axis types), and shard_map with a replicated weight and no pcast:
    # lax's convolution needs neither annotation, so winrs_jax.conv must not either.
    explicit = jax.make_mesh((4,), ("d",))
    with jax.set_mesh(explicit):
        xe = jax.device_put(x, NamedSharding(explicit, P("d")))
        we = jax.device_put(w, NamedSharding(explicit, P()))
        explicit_step = jax.jit(jax.grad(functools.partial(loss, winrs_jax.conv)))
        explicit_grad = explicit_step(we, xe)
        explicit_hlo = explicit_step.lower(we, xe).compile().as_text()

        @functools.partial(jax.shard_map, mesh=explicit, in_specs=(P(), P("d")), out_specs=P())
        def no_pcast_grad(w, x):
            return (
                jax.grad(functools.partial(loss, winrs_jax.conv))(w, x) / 4
            )  # the weight's gradient is psummed

        no_pcast = jax.jit(no_pcast_grad)(we, xe)
        explicit_batch_grouped = jax.jit(jax.grad(functools.partial(batch_grouped_loss, winrs_jax.conv)))(
            jax.device_put(wg, NamedSharding(explicit, P())), xe
        )

        # Layers that reshape or arrive partitioned otherwise under explicit axes: a dilated filter (its output
        # phases split X's rows and columns), dY in layout CNHW and X in CHWN (lax partitions the leading axis
        # of its output, here dY's channels).
        w8 = jnp.asarray(rng.standard_normal((3, 3, 6, 8)), jnp.float32)
        layouts = [(x, 0, DN, dict(rhs_dilation=(2, 2))), (x, 0, ("NHWC", "HWIO", "CNHW"), {}),
                   (jnp.transpose(x, (3, 1, 2, 0)), 3, ("CHWN", "HWIO", "NHWC"), {})]  # fmt: skip
        explicit_layout_errors = []
        for lhs, batch, dn, kwargs in layouts:

            def layout_loss(conv, w, x, dn=dn, kwargs=kwargs):
                return jnp.mean(jnp.sin(conv(x, w, (1, 1), "SAME", dimension_numbers=dn, **kwargs)))

            expected = jax.jit(jax.grad(functools.partial(layout_loss, lax.conv_general_dilated)))(w8, lhs)
            spec = P(*[("d" if i == batch else None) for i in range(4)])
            got = jax.jit(jax.grad(functools.partial(layout_loss, winrs_jax.conv)))(
                jax.device_put(w8, NamedSharding(explicit, P())),
                jax.device_put(lhs, NamedSharding(explicit, spec)),
            )
            explicit_layout_errors.append(float(jnp.abs(got - expected).max() / jnp.abs(expected).max()))

        # A filter partitioned over its output features, X replicated: lax needs out_sharding to type the
        # output, and the filter's cotangent takes the filter's partitioning.
        def features_loss(conv, w, x):
            y = conv(x, w, (1, 1), "SAME", dimension_numbers=DN, out_sharding=P(None, None, None, "d"))
            return jnp.mean(jnp.sin(y))

        wd = jax.device_put(w8, NamedSharding(explicit, P(None, None, None, "d")))
        xr = jax.device_put(x, NamedSharding(explicit, P()))
        features_expected = jax.jit(jax.grad(functools.partial(features_loss, lax.conv_general_dilated)))(
            wd, xr
        )
        features_got = jax.jit(jax.grad(functools.partial(features_loss, winrs_jax.conv)))(wd, xr)
        assert jax.typeof(features_got) == jax.typeof(features_expected), (jax.typeof(features_got),)
        explicit_layout_errors.append(
            float(jnp.abs(features_got - features_expected).max() / jnp.abs(features_expected).max())
        )

        # An ensemble whose members' batches are partitioned: lax's vmapped convolution has no rule for it under
        # explicit axes (a reshape it cannot type); winrs_jax's raises lax's error, not one of its own about each
        # member's partitioning read one axis off (rows that the devices do not divide showed it).
        x2e = jax.device_put(jnp.stack([x[:, :10], 2 * x[:, :10]]), NamedSharding(explicit, P(None, "d")))
        w2e = jax.device_put(jnp.stack([w, -w]), NamedSharding(explicit, P()))
        explicit_ensemble_errors = []
        for conv in (lax.conv_general_dilated, winrs_jax.conv):
            try:
                jax.jit(jax.vmap(jax.grad(functools.partial(loss, conv))))(w2e, x2e)
                explicit_ensemble_errors.append("")
            except Exception as e:  # noqa: BLE001 - the error's type is the result
                explicit_ensemble_errors.append(type(e).__name__)

        # The measured choice times the shard each device runs (batch 8 over 4 devices: 2).
        os.environ["WINRS_JAX_CACHE_DIR"] = cache = tempfile.mkdtemp()
        with winrs_jax.mode("auto"):
            jax.jit(jax.grad(functools.partial(loss, winrs_jax.conv))).lower(we, xe)
        measured_batches = sorted(json.loads(json.loads(p.read_text())["key"])["batch"]
                                  for p in Path(cache).glob("*.json"))  # fmt: skip

    # A 16-bit 3D layer whose kernels read X in place by depth slice (winrs_backward_filter_3d), its batch
    # sharded: each device's call reads its own samples' slices, under a plain Mesh and explicit axes.
    def volume_loss(conv, w, x):
        y = conv(x, w, (1, 1, 1), "SAME", dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
        return jnp.mean(jnp.sin(y.astype(jnp.float32)))

    xv = jnp.asarray(rng.standard_normal((8, 5, 6, 16, 16)), jnp.bfloat16)
    wv = jnp.asarray(rng.standard_normal((3, 3, 3, 16, 16)), jnp.bfloat16)
    volume_reference = jax.jit(jax.grad(functools.partial(volume_loss, lax.conv_general_dilated)))
    volume_step = jax.jit(jax.grad(functools.partial(volume_loss, winrs_jax.conv)))
    volume_errors, volume_texts = [], []
    for m in (mesh, explicit):
        args = (jax.device_put(wv, NamedSharding(m, P())), jax.device_put(xv, NamedSharding(m, P("d"))))
        # Against lax on the same mesh: under explicit axes both sum the devices' bfloat16 parts.
        with jax.set_mesh(m) if m is explicit else contextlib.nullcontext():
            got, expected = (
                volume_step(*args).astype(jnp.float32),
                volume_reference(*args).astype(jnp.float32),
            )
            volume_texts.append(volume_step.lower(*args).compile().as_text())
        volume_errors.append(float(jnp.abs(got - expected).max() / jnp.abs(expected).max()))

    # Second order under the batch-sharded jit: a gradient penalty (the gradient of |d loss / d x|^2).
    def penalty(conv, w, x):
        return jnp.sum(jax.grad(functools.partial(loss, conv), argnums=1)(w, x) ** 2)

    penalty_reference = jax.jit(jax.grad(functools.partial(penalty, lax.conv_general_dilated)))(w, x)
    penalty_grad = jax.jit(jax.grad(functools.partial(penalty, winrs_jax.conv)))(ws, xs)
    # An ensemble (vmap over weights and data) with each member's batch sharded: the stacked filter gradients
    # keep the per-device plan and all-reduce. (XLA's grouped forward convolution of the ensemble gathers on
    # its own, with lax too: the filter gradient must add no gather to it.)
    w2, x2 = jnp.stack([w, -w]), jnp.stack([x, 2 * x])
    x2s, w2s = (
        jax.device_put(x2, NamedSharding(mesh, P(None, "d"))),
        jax.device_put(w2, NamedSharding(mesh, P())),
    )
    lax_ensemble_step = jax.jit(jax.vmap(jax.grad(functools.partial(loss, lax.conv_general_dilated))))
    ensemble_reference = lax_ensemble_step(w2, x2)
    ensemble_step = jax.jit(jax.vmap(jax.grad(functools.partial(loss, winrs_jax.conv))))
    ensemble = ensemble_step(w2s, x2s)
    ensemble_hlo = ensemble_step.lower(w2s, x2s).compile().as_text()
    lax_ensemble_hlo = lax_ensemble_step.lower(w2s, x2s).compile().as_text()
    scale = float(jnp.abs(reference).max())
    print(json.dumps({
        "jit_error": float(jnp.abs(jit_grad - reference).max()) / scale,
        "shard_map_error": float(jnp.abs(shard_map_grad - reference).max()) / scale,
        "explicit_error": float(jnp.abs(explicit_grad - reference).max()) / scale,
        "no_pcast_error": float(jnp.abs(no_pcast - reference).max()) / scale,
        "penalty_error": float(jnp.abs(penalty_grad - penalty_reference).max() / jnp.abs(penalty_reference).max()),
        "ensemble_error": float(jnp.abs(ensemble - ensemble_reference).max() / jnp.abs(ensemble_reference).max()),
        "batch_grouped_error": float(jnp.abs(batch_grouped - batch_grouped_reference).max()
                                     / jnp.abs(batch_grouped_reference).max()),
        "explicit_layouts_error": max(explicit_layout_errors),
        "explicit_batch_grouped_error": float(jnp.abs(explicit_batch_grouped - batch_grouped_reference).max()
                                              / jnp.abs(batch_grouped_reference).max()),
        "volume_errors": volume_errors,
        "volume_in_place": all("winrs_backward_filter_3d" in text and "all-gather" not in text
                               for text in volume_texts),
        "all_gather": "all-gather" in hlo or "all-gather" in explicit_hlo,
        "measured_batches": measured_batches,
        "explicit_ensemble_errors": explicit_ensemble_errors,
        "ensemble_gathers": [ensemble_hlo.count("all-gather("), lax_ensemble_hlo.count("all-gather(")],
        "all_reduce": all("all-reduce" in text for text in (hlo, explicit_hlo, ensemble_hlo)),
        "winrs_calls": min(text.count("winrs_backward_filter") for text in (hlo, explicit_hlo, ensemble_hlo)),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
