"""One small layer per WinRS variant on the GPU, for compute-sanitizer (memcheck, racecheck).

    XLA_PYTHON_CLIENT_ALLOCATOR=platform compute-sanitizer --tool memcheck python tools/sanitize_variants.py

The platform allocator gives every buffer its own allocation, so out-of-bounds accesses are caught.
"""

import jax
import numpy as np

import winrs_jax

DN = ("NHWC", "HWIO", "NHWC")


def main() -> None:
    rng = np.random.default_rng(0)
    for v in winrs_jax.variants():
        fw = v.n
        x = rng.random((2, 7, 2 * v.r + fw - 1 + 1, 37), dtype=np.float32)  # pads (1, 1, 1, 0)
        rhs_shape = (3, fw, 37, 21)
        out_w = x.shape[2] + 1 - fw + 1
        dy = rng.random((2, 7, out_w, 21), dtype=np.float32)
        options = winrs_jax.PlannerOptions(kernels=(v.index, 0), segments=3)
        dw = winrs_jax.conv_backward_filter(
            x, dy, rhs_shape, (1, 1), ((1, 1), (1, 0)), dimension_numbers=DN, options=options
        )
        jax.block_until_ready(dw)
        print(v.name, "ok", float(np.asarray(dw).sum()))


if __name__ == "__main__":
    main()
