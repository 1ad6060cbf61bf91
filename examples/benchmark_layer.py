"""Standalone jitted benchmark of one convolution layer's training step (forward, input and filter gradients):
winrs_jax.conv against lax.conv_general_dilated, same process, same inputs.

    python examples/benchmark_layer.py --shape 32:56:256:3 [--precision highest]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import winrs_jax


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--shape", default="8:56:64:3", help="N:H:C:r (square input and filter, C in = C out)"
    )
    parser.add_argument("--precision", choices=("default", "highest"), default="highest")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    n, h, c, r = (int(v) for v in args.shape.split(":"))
    precision = lax.Precision.HIGHEST if args.precision == "highest" else None
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((n, h, h, c)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((r, r, c, c)) / np.sqrt(r * r * c), jnp.float32)
    kwargs = dict(
        window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision
    )
    print(winrs_jax.plan(x, w, **kwargs))
    for name, conv in (("winrs_jax.conv", winrs_jax.conv), ("lax.conv", lax.conv_general_dilated)):
        step = jax.jit(
            jax.grad(lambda x, w, conv=conv: jnp.sum(jnp.sin(conv(x, w, **kwargs))), argnums=(0, 1))
        )
        jax.block_until_ready(step(x, w))
        samples = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(10):
                out = step(x, w)
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - start) / 10 * 1e3)
        print(f"{name:>15}: {statistics.median(samples):.3f} ms per training step of the layer")


if __name__ == "__main__":
    main()
