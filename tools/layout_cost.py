"""What the NCHW/OIHW layouts cost a training step through winrs_jax.conv, next to lax's (issue 8, item 5).

python tools/layout_cost.py [--dtype bfloat16] [--batch 64] [--size 56] [--width 64]

A jitted gradient of a four-layer 3x3 network (ReLU between the layers; the loss's gradient with respect to
the filters, as training takes it) is compiled in NHWC/HWIO and in NCHW/OIHW, with lax.conv_general_dilated
and with winrs_jax.conv forced to WinRS. For each: the step's time and, from the optimized HLO, the
transposes and layout-changing copies XLA kept (physical data movement) and their bytes. The layouts cost
winrs_jax what NCHW's step time exceeds NHWC's, next to what they cost lax. The same for an SGD step (the
filters updated in the program): whether XLA fuses dW's transpose into the filter layout with the update.
"""

from __future__ import annotations

import argparse
import functools
import re
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import winrs_jax

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "s32": 4, "pred": 1, "u32": 4}


def moves(hlo: str) -> tuple[int, int]:
    """Kernels of an optimized HLO module that move data to another layout: instructions outside fused
    computations named for a transpose or a copy (XLA names fusions after their root), and the bytes they
    write."""
    count, written, fused = 0, 0, False
    for line in hlo.splitlines():
        if line.endswith("{") and not line.startswith(" "):  # a computation's header
            fused = "fused" in line.split("(")[0] or "fusion" in line.split("(")[0]
            continue
        m = re.match(r"\s*(?:ROOT )?%?([\w.-]+) = (\w+)\[([\d,]*)\]", line)
        if fused or not m or not re.search(r"transpose|copy", m.group(1)):
            continue
        dims = [int(d) for d in m.group(3).split(",") if d]
        count += 1
        written += int(np.prod(dims)) * DTYPE_BYTES.get(m.group(2), 4)
    return count, written


def timed(fn, *args) -> float:  # noqa: ANN001, ANN002
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / 10)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    dtype = jnp.dtype(args.dtype)
    rng = np.random.default_rng(0)
    n, s, c = args.batch, args.size, args.width
    x_nhwc = jnp.asarray(rng.standard_normal((n, s, s, c)), dtype)
    w_hwio = [jnp.asarray(rng.standard_normal((3, 3, c, c)) * 0.05, dtype) for _ in range(4)]
    layouts = {
        "NHWC": (("NHWC", "HWIO", "NHWC"), x_nhwc, w_hwio),
        "NCHW": (
            ("NCHW", "OIHW", "NCHW"),
            x_nhwc.transpose(0, 3, 1, 2),
            [w.transpose(3, 2, 0, 1) for w in w_hwio],
        ),
    }
    options = winrs_jax.PlannerOptions(mode="winrs")
    for impl in ("lax", "winrs"):
        for name, (dn, x, ws) in layouts.items():
            grad = jax.grad(functools.partial(loss, conv=functools.partial(conv, impl, dn, options)))
            for kind, step in (
                ("gradient", jax.jit(grad)),
                ("SGD step", jax.jit(functools.partial(sgd, grad))),
            ):
                count, written = moves(step.lower(ws, x).compile().as_text())
                ms = timed(step, ws, x)
                print(f"{impl:5s} {name}  {kind:8s} {ms:7.3f} ms   transposes/copies kept: {count:2d} "
                      f"({written / 2**20:7.1f} MiB)")  # fmt: skip


def conv(
    impl: str, dn: tuple[str, str, str], options: winrs_jax.PlannerOptions, a: jax.Array, w: jax.Array
) -> jax.Array:
    if impl == "lax":
        return lax.conv_general_dilated(a, w, (1, 1), "SAME", dimension_numbers=dn)
    return winrs_jax.conv(a, w, (1, 1), "SAME", dimension_numbers=dn, options=options)


def sgd(grad: Callable[..., list[jax.Array]], ws: list[jax.Array], x: jax.Array) -> list[jax.Array]:
    return [w - jnp.asarray(0.01, w.dtype) * g for w, g in zip(ws, grad(ws, x), strict=True)]


def loss(ws: list[jax.Array], x: jax.Array, conv: Callable[[jax.Array, jax.Array], jax.Array]) -> jax.Array:
    a = x
    for w in ws:
        a = jax.nn.relu(conv(a, w))
    return jnp.sum(jnp.square(a.astype(jnp.float32)))


if __name__ == "__main__":
    main()
