"""A/B of a launch-time switch in one process: WinRS's filter gradient (forced) of each layer timed with an
environment variable the CUDA launches read at every call (WINRS_JAX_WINDOW, WINRS_JAX_WGMMA, or an
experiment's own) set to each value in turn, rounds interleaved, beside XLA's; whether the results of the two
values are identical, and close.

python tools/ab_env.py VAR VALUE_A VALUE_B DTYPE SHAPE...   # shapes in bench's form, e.g. 32:56:256:3
"""

import json
import os  # noqa: I001
import statistics
import sys

import numpy as np

# XLA replays a captured command buffer (CUDA graph) of the FFI call's launches: without them each call
# launches anew and reads the variable.
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer="

from winrs_jax import choice
from winrs_jax.bench.suite import Shape, _compiled, _filter_grads, time_ms


def main(var: str, values: list[str], dtype_name: str, texts: list[str]) -> None:
    for text in texts:
        shape = Shape.parse(text)
        x, dy, w, kwargs, compiled = _compiled(shape, dtype_name)
        fns = _filter_grads(w, kwargs)
        (xla, ours), per_call = choice.repeated_calls(list(fns.values()), x, dy, every=True)
        times: dict[str, list[float]] = {value: [] for value in values}
        times["xla"] = []
        results = {}
        for _ in range(5):  # rounds, the values interleaved
            for value in values:
                os.environ[var] = value
                times[value].append(time_ms(ours, 3, 0) / per_call)
                results[value] = np.asarray(compiled["winrs"](x, dy), np.float32)
            times["xla"].append(time_ms(xla, 3, 0) / per_call)
        same = bool(np.array_equal(results[values[0]], results[values[1]]))
        close = bool(np.allclose(results[values[0]], results[values[1]], rtol=1e-2, atol=1e-3))
        row = {"layer": str(shape), "dtype": dtype_name, "var": var, "same": same, "close": close}
        row |= {f"{name}_ms": statistics.median(t) for name, t in times.items()}
        row["flops"] = shape.flops
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:4], sys.argv[4], sys.argv[5:])
