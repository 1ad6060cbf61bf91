"""Where auto mode's first choice for a layer spends its time (issue 8: up to 5.8 s on 2D depthwise layers).

python tools/choice_timing.py LAYER [DTYPE]   (LAYER in the bench's Shape.parse forms, e.g. 64:28:256:7:g256;
DTYPE bf16 by default). XLA's filter gradient is compiled and run first, as the bench does, then the first
trace in auto mode (decision cache in a fresh directory), its measurement under cProfile: the wall time, and the
functions with the largest cumulative times.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time

os.environ["WINRS_JAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="winrs-choice-")
os.environ["WINRS_JAX_MODE"] = "auto"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import winrs_jax  # noqa: E402
from winrs_jax import choice  # noqa: E402
from winrs_jax.bench.suite import DN, DTYPES, Shape  # noqa: E402

PROFILE = cProfile.Profile()


def profiled_outside_trace(fn, outside_trace=choice._outside_trace):  # noqa: ANN001, ANN201
    """choice._outside_trace, the measurement profiled in its own thread (a profile covers one thread)."""

    def run():  # noqa: ANN202
        PROFILE.enable()
        try:
            return fn()
        finally:
            PROFILE.disable()

    return outside_trace(run)


choice._outside_trace = profiled_outside_trace


def main() -> None:
    shape = Shape.parse(sys.argv[1])
    dtype, precision = DTYPES[sys.argv[2] if len(sys.argv) > 2 else "bf16"]
    x = jnp.ones((shape.n, *shape.spatial, shape.cin), dtype)
    dy = jnp.ones((shape.n, *shape.out_spatial, shape.cout), dtype)
    w = jnp.zeros((*shape.filter, shape.cin // shape.groups, shape.cout), dtype)
    kwargs = dict(window_strides=shape.strides, padding=shape.padding, rhs_dilation=shape.dilations,
                  dimension_numbers=DN[shape.rank], feature_group_count=shape.groups, precision=precision)  # fmt: skip

    def filter_grad(conv):  # noqa: ANN001, ANN202
        return jax.jit(lambda x, dy: jax.vjp(lambda w: conv(x, w, **kwargs), w)[1](dy)[0])

    start = time.perf_counter()
    filter_grad(lax.conv_general_dilated)(x, dy).block_until_ready()
    print(f"XLA's filter gradient, compile and first call: {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    filter_grad(winrs_jax.conv)(x, dy).block_until_ready()
    print(f"auto's first trace, compile and call: {time.perf_counter() - start:.2f} s")
    print(str(winrs_jax.plan(x, w, **kwargs)).splitlines()[0])
    pstats.Stats(PROFILE).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
