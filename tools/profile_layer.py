"""Run the WinRS filter gradient of one layer a few times, for Nsight Compute.

ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 python tools/profile_layer.py 32:56:256:3 bf16
(dtype: f32_highest, f32_default, bf16 or f16; default bf16)
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import winrs_jax
from winrs_jax.bench.suite import DN, DTYPES, Shape


def main() -> None:
    shape = Shape.parse(sys.argv[1])
    dtype, precision = DTYPES[sys.argv[2] if len(sys.argv) > 2 else "bf16"]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((shape.n, *shape.spatial, shape.cin), dtype=np.float32), dtype)
    dy = jnp.asarray(rng.random((shape.n, *shape.out_spatial, shape.cout), dtype=np.float32), dtype)
    w = jax.ShapeDtypeStruct((*shape.filter, shape.cin // shape.groups, shape.cout), dtype)
    kwargs = dict(window_strides=shape.strides, padding=shape.padding, rhs_dilation=shape.dilations,
                  dimension_numbers=DN[shape.rank], feature_group_count=shape.groups, precision=precision)  # fmt: skip
    options = winrs_jax.PlannerOptions(mode="winrs")
    fn = jax.jit(lambda x, dy: winrs_jax.conv_backward_filter(x, dy, w.shape, **kwargs, options=options))
    print(winrs_jax.plan(x, w, **kwargs, options=options))
    for _ in range(3):
        fn(x, dy).block_until_ready()


if __name__ == "__main__":
    main()
