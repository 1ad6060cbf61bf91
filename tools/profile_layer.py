"""Run the WinRS filter gradient of one layer a few times, for Nsight Compute.

ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 python tools/profile_layer.py 32:56:256:3
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import winrs_jax


def main() -> None:
    n, h, c, r = (int(v) for v in sys.argv[1].split(":"))
    pad = ((r // 2, r // 2), (r // 2, r // 2))
    out = h + 2 * (r // 2) - r + 1
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((n, h, h, c)), jnp.float32)
    dy = jnp.asarray(rng.random((n, out, out, c)), jnp.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    fn = jax.jit(
        lambda x, dy: winrs_jax.conv_backward_filter(x, dy, (r, r, c, c), (1, 1), pad, dimension_numbers=dn)
    )
    print(
        winrs_jax.plan(x, jax.ShapeDtypeStruct((r, r, c, c), jnp.float32), (1, 1), pad, dimension_numbers=dn)
    )
    for _ in range(3):
        fn(x, dy).block_until_ready()


if __name__ == "__main__":
    main()
