"""What auto mode adds to a user's first step with a new layer (issue 8: <= 1 s on the GPU, cached <= 1 ms).

python tools/first_trace.py [--dtype bf16] [--jit-cache off|warm] [--runs N] LAYER...   (LAYER in Shape.parse's forms)

For each layer, fresh processes time the first call of a jitted training step of that one layer (the forward
convolution, then the gradients of X and of the filter, as jax.grad of a loss gives them): with
lax.conv_general_dilated; with winrs_jax.conv in auto mode and an empty decision cache (the measured choice
runs inside the trace); and with winrs_jax.conv again on the cache the second process wrote. Each process
first starts the GPU with a small program, so that what differs is the layer's compile, measurement and first
run. The same processes time re-traces (jax.jit(...).trace(...).lower() after jax.clear_caches(), the median of
RETRACES). "extra" is auto's time less lax's; "choice_s" the part of auto's first step spent in its measurement
(choice._measure), of which "xla_compile_s" compiling XLA's program (WinRS's compile beside it) and "timing_s"
the timing; "own_s" is the measurement less XLA's program's compile and first run (which lax's step pays too):
auto's own share.

A process's first step varies by seconds where XLA autotunes and cuDNN compiles (a 7x7 depthwise layer's lax
step took 14.3-17.9 s on one H200): --runs N repeats the three processes N times, lax's first in odd rounds and
last in even ones, and ends with a row of medians.

cuDNN compiles some of XLA's convolution kernels when they first run, and the CUDA driver keeps them in its
on-disk cache: with the cache on, whichever process ran a layer first paid for them and the later ones did not.
--jit-cache off (the default) turns that cache off in every process (CUDA_CACHE_DISABLE=1): each pays them, as on
a new machine. --jit-cache warm keeps it and runs lax's process twice first, the first to fill it: a user who has
trained the model with lax before.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

RETRACES = 15


def child(impl: str, layer: str, dtype_name: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax import lax

    import winrs_jax
    from winrs_jax import choice as choice_module
    from winrs_jax.bench.suite import DN, DTYPES, Shape

    jax.jit(lambda a: a + 1)(jnp.ones(8)).block_until_ready()  # the GPU and jax started
    shape = Shape.parse(layer)
    dtype, precision = DTYPES[dtype_name]
    x = jnp.ones((shape.n, *shape.spatial, shape.cin), dtype)
    dy = jnp.ones((shape.n, *shape.out_spatial, shape.cout), dtype)
    w = jnp.full((*shape.filter, shape.cin // shape.groups, shape.cout), 0.01, dtype)
    kwargs = dict(window_strides=shape.strides, padding=shape.padding, rhs_dilation=shape.dilations,
                  dimension_numbers=DN[shape.rank], feature_group_count=shape.groups, precision=precision)  # fmt: skip
    conv = lax.conv_general_dilated if impl == "lax" else winrs_jax.conv
    seconds = dict(choice_s=0.0, xla_compile_s=0.0, timing_s=0.0)

    def timed(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def run(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - start

        return run

    # The measurement, within it XLA's program's compile (repeated_calls, beside WinRS's compiles) and the timing;
    # and from the measurement's debug line, when XLA's program had compiled and run once (lax's step pays as
    # much for that filter gradient: the rest is auto's own).
    class XlaReady(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.startswith("auto's measurement of"):
                seconds["xla_ready_s"] += float(record.args[2])

    seconds["xla_ready_s"] = 0.0
    logger = logging.getLogger("winrs_jax")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(XlaReady())
    choice_module._measure = timed("choice_s", choice_module._measure)
    choice_module.repeated_calls = timed("xla_compile_s", choice_module.repeated_calls)
    choice_module._time_all = timed("timing_s", choice_module._time_all)

    def loss(x: jax.Array, w: jax.Array, dy: jax.Array) -> jax.Array:
        return jnp.sum(conv(x, w, **kwargs).astype(jnp.float32) * dy.astype(jnp.float32))

    step = jax.grad(loss, argnums=(0, 1))
    start = time.perf_counter()
    jax.block_until_ready(jax.jit(step)(x, w, dy))
    first = time.perf_counter() - start
    retraces = []
    for _ in range(RETRACES):  # one re-trace varied by milliseconds either way (H200, thirty-first stop)
        jax.clear_caches()
        start = time.perf_counter()
        jax.jit(step).trace(x, w, dy).lower()  # the cached choice is looked up in the lowering
        retraces.append(time.perf_counter() - start)
    retrace = statistics.median(retraces)
    choice = winrs_jax.plan(x, w, **kwargs).choice if impl != "lax" else ""
    print(json.dumps(dict(first_s=first, retrace_s=retrace, choice=choice, **seconds)))


def run(impl: str, layer: str, dtype_name: str, cache: str, jit_cache: str) -> dict:
    env = dict(os.environ, WINRS_JAX_CACHE_DIR=cache, WINRS_JAX_MODE="auto")
    if jit_cache == "off":
        env["CUDA_CACHE_DISABLE"] = "1"
    done = subprocess.run([sys.executable, __file__, "--child", impl, "--dtype", dtype_name, layer], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{impl} {layer}: {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("layers", nargs="+")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--jit-cache", choices=("off", "warm"), default="off")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--child", choices=("lax", "auto"))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.layers[0], args.dtype)
        return
    for layer in args.layers:
        rows = [one_round(layer, args.dtype, args.jit_cache, lax_first=i % 2 == 0) for i in range(args.runs)]
        if args.runs > 1:
            medians = {key: round(statistics.median(row[key] for row in rows), 3) for key in MEDIANS}
            print(json.dumps(dict(layer=layer, dtype=args.dtype, jit_cache=args.jit_cache, runs=args.runs,
                                  median=medians)), flush=True)  # fmt: skip


MEDIANS = (
    "lax_first_s",
    "auto_first_s",
    "extra_s",
    "choice_s",
    "xla_compile_s",
    "timing_s",
    "own_s",
    "cached_first_s",
    "cached_extra_s",
    "retrace_extra_ms",
)


def one_round(layer: str, dtype: str, jit_cache: str, lax_first: bool) -> dict:
    """lax's process, auto's on an empty decision cache and auto's on the cache it wrote (lax's before the two
    or after them), and their row, printed."""
    cache = tempfile.mkdtemp(prefix="winrs-first-")
    if jit_cache == "warm":
        run("lax", layer, dtype, cache, jit_cache)  # fills the driver's cache
    lax_run = run("lax", layer, dtype, cache, jit_cache) if lax_first else None
    new = run("auto", layer, dtype, cache, jit_cache)
    cached = run("auto", layer, dtype, cache, jit_cache)
    lax_run = lax_run or run("lax", layer, dtype, cache, jit_cache)
    row = dict(
        layer=layer, dtype=dtype, jit_cache=jit_cache, lax_first=lax_first, lax_first_s=round(lax_run["first_s"], 3),
        auto_first_s=round(new["first_s"], 3), extra_s=round(new["first_s"] - lax_run["first_s"], 3),
        choice_s=round(new["choice_s"], 3), xla_compile_s=round(new["xla_compile_s"], 3),
        timing_s=round(new["timing_s"], 3), own_s=round(new["choice_s"] - new["xla_ready_s"], 3),
        cached_first_s=round(cached["first_s"], 3),
        cached_extra_s=round(cached["first_s"] - lax_run["first_s"], 3),
        retrace_extra_ms=round(1e3 * (cached["retrace_s"] - lax_run["retrace_s"]), 2),
        choice=new["choice"].splitlines()[0] if new["choice"] else "",
    )  # fmt: skip
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
