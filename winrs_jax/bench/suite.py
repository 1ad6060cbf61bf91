"""Benchmark shapes and the timing method of shared/baselines/README.md."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import winrs_jax

DN = ("NHWC", "HWIO", "NHWC")


@dataclasses.dataclass(frozen=True)
class Shape:
    """N:H:C:r — batch, square input size, channels (IC = OC), square filter size; stride 1, pad r//2."""

    n: int
    h: int
    c: int
    r: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        try:
            n, h, c, r = (int(v) for v in text.split(":"))
        except ValueError as e:
            raise ValueError(f"shape must be N:H:C:r, got {text!r}") from e
        return cls(n, h, c, r)

    def __str__(self) -> str:
        return f"{self.r}x{self.r} {self.n}:{self.h}:{self.c}"

    @property
    def padding(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return ((self.r // 2, self.r // 2), (self.r // 2, self.r // 2))

    @property
    def out_hw(self) -> int:
        return self.h + 2 * (self.r // 2) - self.r + 1

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.out_hw**2 * self.c * self.r * self.r * self.c


# The baselines' paper suite (comparable FLOPs per filter size).
PAPER_SUITE = [
    Shape(32, 128, 128, 2),
    *(Shape(32, h, c, 3) for h, c in ((14, 1024), (28, 512), (56, 256), (112, 128), (224, 64))),
    Shape(32, 64, 256, 4),
    *(Shape(32, h, c, 5) for h, c in ((16, 512), (32, 256), (64, 128), (128, 64))),
    Shape(32, 64, 256, 6),
    *(Shape(32, h, c, 7) for h, c in ((16, 512), (32, 256), (64, 128), (128, 64))),
    Shape(32, 32, 256, 8),
    *(Shape(32, h, c, 9) for h, c in ((16, 512), (32, 256), (64, 128), (128, 64))),
]

# Small enough for a CPU.
SMALL_SUITE = [Shape(8, 56, 64, 3), Shape(8, 28, 64, 5), Shape(4, 32, 32, 7), Shape(8, 32, 32, 2)]

DTYPES: dict[str, tuple[Any, Any]] = {
    "f32_highest": (jnp.float32, lax.Precision.HIGHEST),
    "f32_default": (jnp.float32, None),
    "bf16": (jnp.bfloat16, None),
    "f16": (jnp.float16, None),
}


@dataclasses.dataclass
class Result:
    shape: Shape
    dtype: str
    xla_ms: float
    winrs_ms: float
    xla_temp_bytes: int
    winrs_workspace_bytes: int
    winrs_temp_bytes: int
    max_rel_diff: float
    plan: str

    @property
    def speedup(self) -> float:
        return self.xla_ms / self.winrs_ms

    def tflops(self, ms: float) -> float:
        return self.shape.flops / (ms * 1e-3) / 1e12

    def as_json(self) -> dict[str, Any]:
        s = self.shape
        return dict(
            N=s.n, H=s.h, C=s.c, r=s.r, dtype=self.dtype, xla_ms=self.xla_ms, winrs_ms=self.winrs_ms,
            speedup=self.speedup, xla_tflops=self.tflops(self.xla_ms), winrs_tflops=self.tflops(self.winrs_ms),
            xla_temp_bytes=self.xla_temp_bytes, winrs_workspace_bytes=self.winrs_workspace_bytes,
            winrs_temp_bytes=self.winrs_temp_bytes, max_rel_diff=self.max_rel_diff, plan=self.plan,
        )  # fmt: skip


def time_ms(fn: Callable[[], jax.Array], repeats: int, calls: int) -> float:
    """Median over `repeats` of (calls back-to-back, then block_until_ready) / calls, after one warm-up."""
    fn().block_until_ready()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls - 1):
            fn()
        fn().block_until_ready()
        samples.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(samples)


def _temp_bytes(compiled: Any) -> int:
    analysis = compiled.memory_analysis()
    return int(getattr(analysis, "temp_size_in_bytes", 0)) if analysis is not None else 0


def measure(shape: Shape, dtype_name: str, repeats: int = 7, calls: int = 10) -> Result:
    dtype, precision = DTYPES[dtype_name]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((shape.n, shape.h, shape.h, shape.c)), dtype)
    w = jnp.asarray(rng.random((shape.r, shape.r, shape.c, shape.c)), dtype)
    scale = 1e-2 if dtype == jnp.float16 else 1.0
    dy = jnp.asarray(scale * rng.random((shape.n, shape.out_hw, shape.out_hw, shape.c)), dtype)
    kwargs = dict(window_strides=(1, 1), padding=shape.padding, dimension_numbers=DN, precision=precision)

    def xla(x: jax.Array, dy: jax.Array) -> jax.Array:
        return jax.vjp(lambda w: lax.conv_general_dilated(x, w, **kwargs), w)[1](dy)[0]

    def ours(x: jax.Array, dy: jax.Array) -> jax.Array:
        return winrs_jax.conv_backward_filter(x, dy, w.shape, **kwargs)

    compiled = {name: jax.jit(fn).lower(x, dy).compile() for name, fn in (("xla", xla), ("winrs", ours))}
    times = {name: time_ms(lambda c=c: c(x, dy), repeats, calls) for name, c in compiled.items()}
    expected = np.asarray(compiled["xla"](x, dy), np.float64)
    actual = np.asarray(compiled["winrs"](x, dy), np.float64)
    plan = winrs_jax.plan(x, w, **kwargs)
    return Result(
        shape=shape,
        dtype=dtype_name,
        xla_ms=times["xla"],
        winrs_ms=times["winrs"],
        xla_temp_bytes=_temp_bytes(compiled["xla"]),
        winrs_workspace_bytes=plan.workspace_bytes,
        winrs_temp_bytes=_temp_bytes(compiled["winrs"]),
        max_rel_diff=float(np.abs(actual - expected).max() / np.abs(expected).max()),
        plan=str(plan),
    )
