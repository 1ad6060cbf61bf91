"""Data-parallel check and timing on all visible GPUs: batch-sharded jit training step of one layer with
winrs_jax.conv and with XLA's convolution (precision HIGHEST), against one GPU. Prints JSON lines."""

import functools
import json
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import winrs_jax

DN = ("NHWC", "HWIO", "NHWC")


def loss(conv: Callable[..., jax.Array], w: jax.Array, x: jax.Array) -> jax.Array:
    y = conv(x, w, (1, 1), "SAME", dimension_numbers=DN, precision=lax.Precision.HIGHEST)
    return jnp.mean(jnp.sin(y))


def timed(fn: Callable[..., jax.Array], *args: jax.Array) -> float:
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            out = fn(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / 10 * 1e3)
    return statistics.median(samples)


def main() -> None:
    devices = jax.devices()
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 56, 56, 128)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((3, 3, 128, 128)) / 34.0, jnp.float32)
    mesh = Mesh(np.array(devices), ("d",))
    xs = jax.device_put(x, NamedSharding(mesh, P("d")))
    ws = jax.device_put(w, NamedSharding(mesh, P()))
    reference = jax.jit(jax.grad(functools.partial(loss, lax.conv_general_dilated)))(w, x)
    for name, conv in (("winrs_jax", winrs_jax.conv), ("xla", lax.conv_general_dilated)):
        one = jax.jit(jax.grad(functools.partial(loss, conv)))
        many = jax.jit(jax.grad(functools.partial(loss, conv)), out_shardings=NamedSharding(mesh, P()))
        hlo = many.lower(ws, xs).compile().as_text()
        err = float(jnp.abs(many(ws, xs) - reference).max() / jnp.abs(reference).max())
        print(json.dumps(dict(conv=name, devices=len(devices), device=devices[0].device_kind,
                              ms_1_gpu=round(timed(one, w, x), 3), ms_all_gpus=round(timed(many, ws, xs), 3),
                              max_rel_err=err, all_gather="all-gather" in hlo, all_reduce="all-reduce" in hlo)),
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
