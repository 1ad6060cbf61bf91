"""Why auto's XLA time and the bench's differed on small layers (issue 8): for a few layers, compiles XLA's and
WinRS's filter gradients twice each and prints each compile's time called one by one from Python and eight in
one program (their sum, so that none is dropped), and XLA's cuDNN algorithm (from the optimized HLO). On a GPU
machine: `python tools/xla_variance.py [f16] [torch]` (torch: run PyTorch's cuDNN first, as the bench does).
Its output on an H100: docs/xla-variance-h100.txt."""

from __future__ import annotations

import re
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import winrs_jax
from winrs_jax import choice

LAYERS = [(16, 64, 128, 128), (16, 128, 64, 64), (128, 14, 256, 256), (128, 56, 64, 64)]  # N, H=W, Cin, Cout
KWARGS = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def filter_grad(w_shape: tuple[int, ...], dtype: object):  # noqa: ANN201
    def fn(x: jax.Array, dy: jax.Array) -> jax.Array:
        zeros = jnp.zeros(w_shape, dtype)
        return jax.vjp(lambda w: lax.conv_general_dilated(x, w, **KWARGS), zeros)[1](dy)[0]

    return fn


def algorithms(compiled: object) -> str:
    """The filter gradient's custom calls and the cuDNN algorithm ids in their backend configs."""
    text = compiled.as_text()  # type: ignore[attr-defined]
    targets = re.findall(r'custom_call_target="([^"]+)"', text)
    return f"{targets} algo {re.findall(r'algo_id[^0-9]{0,6}([0-9]+)', text)}"


def timed(fn: object, calls: int = 100, samples: int = 9) -> float:
    fn().block_until_ready()  # type: ignore[operator]
    return statistics.median(choice.sample_ms(fn, calls) for _ in range(samples))  # type: ignore[arg-type]


def unrolled(fn: object, pairs: list[tuple[jax.Array, jax.Array]]) -> object:
    """K filter gradients in one executable (one dispatch from Python for K layers, as in a training step)."""

    def many(pairs: list[tuple[jax.Array, jax.Array]]) -> jax.Array:
        return sum(fn(x, dy).astype(jnp.float32) for x, dy in pairs)  # type: ignore[operator]

    compiled = jax.jit(many).lower(pairs).compile()
    return lambda: compiled(pairs)


def main() -> None:
    dtype = jnp.bfloat16 if "f16" not in sys.argv else jnp.float16
    if "torch" in sys.argv:  # as the bench: PyTorch's cuDNN runs in the same process first
        import torch

        torch.backends.cudnn.benchmark = True
        a = torch.randn(16, 64, 64, 128, device="cuda", dtype=torch.bfloat16).permute(0, 3, 1, 2)
        w = torch.randn(128, 128, 3, 3, device="cuda", dtype=torch.bfloat16)
        for _ in range(20):
            torch.ops.aten.convolution_backward(a, a, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                [False, False, True])  # fmt: skip
        torch.cuda.synchronize()

    rng = np.random.default_rng(0)
    for n, hw, cin, cout in LAYERS:
        xs, dys = (n, hw, hw, cin), (n, hw, hw, cout)
        pairs = [
            (jnp.asarray(rng.random(xs, np.float32), dtype), jnp.asarray(rng.random(dys, np.float32), dtype))
            for _ in range(8)
        ]
        xla = filter_grad((3, 3, cin, cout), dtype)

        def ours(x: jax.Array, dy: jax.Array, cin: int = cin, cout: int = cout) -> jax.Array:
            options = winrs_jax.PlannerOptions(mode="winrs")
            return winrs_jax.conv_backward_filter(x, dy, (3, 3, cin, cout), **KWARGS, options=options)

        for name, fn in (("XLA", xla), ("WinRS", ours)):
            for attempt in range(2):
                jax.clear_caches()
                compiled = jax.jit(fn).lower(*pairs[0]).compile()
                single = timed(lambda c=compiled, a=pairs[0]: c(*a))
                many = timed(unrolled(fn, pairs), calls=12) / len(pairs)
                algo = algorithms(compiled) if name == "XLA" else ""
                print(f"{n}:{hw}:{cin}->{cout} {name} compile {attempt}: per call {single:.4f} ms, "
                      f"8 in one executable {many:.4f} ms each {algo}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
