"""What winrs_jax.conv adds to a re-trace of a training step whose choice is cached (issue 8: <= 1 ms).

python tools/retrace_cost.py LAYER [DTYPE]   (LAYER in the bench's Shape.parse forms, DTYPE bf16 by default)

One process: the step with lax.conv_general_dilated and with winrs_jax.conv (auto mode, decision cache in a fresh
directory, measured by a first call), each traced and lowered ROUNDS times after jax.clear_caches(), the two
interleaved; the medians and their difference; then the winrs_jax step's re-traces under cProfile (by own time,
and winrs_jax's functions by cumulative time). The lowering counts: auto looks its cached choice up there.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ["WINRS_JAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="winrs-retrace-")
os.environ.setdefault("WINRS_JAX_MODE", "auto")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import winrs_jax  # noqa: E402
from winrs_jax.bench.suite import DN, DTYPES, Shape  # noqa: E402

ROUNDS = 40


def main() -> None:
    shape = Shape.parse(sys.argv[1])
    dtype, precision = DTYPES[sys.argv[2] if len(sys.argv) > 2 else "bf16"]
    x = jnp.ones((shape.n, *shape.spatial, shape.cin), dtype)
    dy = jnp.ones((shape.n, *shape.out_spatial, shape.cout), dtype)
    w = jnp.full((*shape.filter, shape.cin // shape.groups, shape.cout), 0.01, dtype)
    kwargs = dict(window_strides=shape.strides, padding=shape.padding, rhs_dilation=shape.dilations,
                  dimension_numbers=DN[shape.rank], feature_group_count=shape.groups, precision=precision)  # fmt: skip

    def step(conv: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, jax.Array]]:
        def loss(x: jax.Array, w: jax.Array, dy: jax.Array) -> jax.Array:
            return jnp.sum(conv(x, w, **kwargs).astype(jnp.float32) * dy.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1))

    steps = {"lax": step(lax.conv_general_dilated), "winrs_jax": step(winrs_jax.conv)}
    for fn in steps.values():  # compiled and run once: the choice measured and cached
        jax.block_until_ready(jax.jit(fn)(x, w, dy))
    print(str(winrs_jax.plan(x, w, **kwargs)).splitlines()[0])

    def retrace(fn: Callable[..., object]) -> float:
        jax.clear_caches()
        start = time.perf_counter()
        jax.jit(fn).trace(x, w, dy).lower()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(ROUNDS):
        for name, fn in steps.items():
            times[name].append(retrace(fn))
    medians = {name: 1e3 * statistics.median(values) for name, values in times.items()}
    print(", ".join(f"{name} {ms:.2f} ms" for name, ms in medians.items()),
          f"(medians of {ROUNDS}); winrs_jax adds {medians['winrs_jax'] - medians['lax']:.2f} ms")  # fmt: skip
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(ROUNDS // 2):
        retrace(steps["winrs_jax"])
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats("winrs_jax", 25)


if __name__ == "__main__":
    main()
