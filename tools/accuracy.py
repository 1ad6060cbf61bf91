"""MARE of every variant on every arithmetic path, the paper's protocol (section 6.3), on the CPU executor.

The CPU executor rounds GEMM operands exactly as the GPU paths do, so these numbers (deterministic, any
machine) are the `mare` and `signed_error` columns of cpp/winrs/variants.h, which the planner's accuracy budget
reads:

    python tools/accuracy.py            # -> mare
    python tools/accuracy.py --signed   # zero-mean inputs, as real gradients are -> signed_error
    python tools/accuracy.py --gpu [suite ...]   # XLA's error beside WinRS's on the bench suites' layers

The paper's inputs are uniform in [0, 1): every product is positive, so dW has no cancellation and the rounding
of the transformed operands hardly shows. Real activations and gradients have both signs. --signed draws
standard normal X and dY and prints, per variant and path, the norm-relative error of dW,
||dW - exact|| / ||exact||, next to that of the exact dW rounded once to the path's input dtype (what XLA's
filter gradient, which accumulates the untransformed inputs in float32, comes close to).

--gpu measures, on the GPU and on zero-mean inputs, XLA's own filter gradient error next to WinRS's as planned, for
every layer of the bench suites (default paper and real) in every dtype: XLA's algorithms on a GPU are not the
direct sum the CPU table stands it for. One JSON object per line; needs PyTorch for the float64 reference.
"""

import json
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import winrs_jax
from winrs_jax.planner import PATH_DTYPES, PATHS

DN = ("NHWC", "HWIO", "NHWC")


def reference(x: np.ndarray, dy: np.ndarray, fh: int, fw: int) -> np.ndarray:
    """float64 dW (O x FH x FW x I) for padding (1, 1) in height, none in width."""
    xp = np.pad(x, ((0, 0), (1, 1), (0, 0), (0, 0)))
    _, out_h, out_w, _ = dy.shape
    dw = np.zeros((dy.shape[3], fh, fw, x.shape[3]))
    for a in range(fh):
        for b in range(fw):
            dw[:, a, b, :] = np.einsum("nhwk,nhwc->kc", dy, xp[:, a : a + out_h, b : b + out_w, :])
    return dw


def main(signed: bool) -> None:
    rng = np.random.default_rng(0)
    cpu = jax.devices("cpu")[0]
    print("variant", *PATHS)
    rounded: dict[str, list[float]] = {path: [] for path in PATHS}
    for v in winrs_jax.variants():
        fw = v.n * (2 if v.n <= 3 else 1)
        out_w = 3 * v.r
        row = []
        for path in PATHS:
            # N=8, 12 x 3r output gradient, 32 channels, one segment: uniform [0, 1), dY x 1e-2 for float16.
            draw = rng.standard_normal if signed else rng.random
            x = draw((8, 12, out_w + fw - 1, 32)).astype(np.float32)
            dy = draw((8, 12, out_w, 32)).astype(np.float32) * (1e-2 if path == "fp16" else 1.0)
            xs = jax.device_put(jnp.asarray(x, PATH_DTYPES[path]), cpu)
            dys = jax.device_put(jnp.asarray(dy, PATH_DTYPES[path]), cpu)
            options = winrs_jax.PlannerOptions(
                kernels=(v.index, v.index), segments=1, path=path, sm_count=132, mode="winrs"
            )
            dw = winrs_jax.conv_backward_filter(
                xs, dys, (3, fw, 32, 32), (1, 1), ((1, 1), (0, 0)), dimension_numbers=DN, options=options
            )
            dw = np.asarray(dw.astype(np.float32), np.float64).transpose(3, 0, 1, 2)
            ref = reference(np.asarray(xs, np.float64), np.asarray(dys, np.float64), 3, fw)
            if signed:
                row.append(float(np.linalg.norm(dw - ref) / np.linalg.norm(ref)))
                once = np.asarray(jnp.asarray(ref, PATH_DTYPES[path]).astype(jnp.float32), np.float64)
                rounded[path].append(float(np.linalg.norm(once - ref) / np.linalg.norm(ref)))
                continue
            nonzero = ref != 0
            row.append(float(np.mean(np.abs(dw[nonzero] - ref[nonzero]) / np.abs(ref[nonzero]))))
        print(v.name, " ".join(f"{e:.2e}" for e in row), flush=True)
    if signed:
        print("exact, rounded once", " ".join(f"{np.mean(rounded[path]):.2e}" for path in PATHS))


def gpu(suites: list[str]) -> None:
    from winrs_jax.bench.suite import DTYPES, SUITES, signed_errors

    errors: dict[str, list[float]] = {}
    for suite in suites:
        for shape in SUITES[suite]:
            for dtype in DTYPES:
                winrs, xla, path = signed_errors(shape, dtype)
                errors.setdefault(dtype, []).append(xla)
                print(json.dumps(dict(suite=suite, layer=str(shape), dtype=dtype, path=path, winrs_signed_error=winrs,
                                      xla_signed_error=xla)), flush=True)  # fmt: skip
    for dtype, values in errors.items():
        print(json.dumps(dict(dtype=dtype, xla_min=min(values), xla_median=statistics.median(values),
                              xla_max=max(values), layers=len(values))))  # fmt: skip


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--gpu" in args:
        gpu([a for a in args if a != "--gpu"] or ["paper", "real"])
    else:
        main(signed="--signed" in args)
