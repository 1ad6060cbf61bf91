"""A/B of a launch-time switch in one process: WinRS's filter gradient (forced) of each layer timed with an
environment variable the CUDA launches read at every call (WINRS_JAX_WINDOW, WINRS_JAX_WGMMA, or an
experiment's own) set to each value in turn, rounds interleaved, beside XLA's; whether the results of the two
values are identical, and close. A variable the planner reads (PLAN_TIME) gives each value its own program,
traced and planned with it set (the handler plans again at each call, with the value set for the call).

python tools/ab_env.py VAR VALUE_A VALUE_B [VALUE_C ...] DTYPE SHAPE...   # shapes in bench's form, e.g. 32:56:256:3

Results are compared with VALUE_A's: "same" and "close" for VALUE_B, and "close_<value>" for each further one.

VAR DETERMINISTIC (values 1 and 0) sets PlannerOptions.deterministic instead: each value its own program.
AB_KERNELS="I J" forces the kernel pair (PlannerOptions.kernels, indices into winrs_jax.variants()), e.g. "0 0"
for the direct kernel where the planner would pick a Winograd variant.
"""

import dataclasses
import json
import os  # noqa: I001
import statistics
import sys

import numpy as np

# XLA replays a captured command buffer (CUDA graph) of the FFI call's launches: without them each call
# launches anew and reads the variable.
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer="

from winrs_jax import choice, planner
from winrs_jax.bench.suite import DTYPES, WINRS, Shape, _compiled, _filter_grads, time_ms

PLAN_TIME = {"WINRS_JAX_DEPTHWISE_MMA", "WINRS_JAX_TF32X3_ROW_TILE_LAYERS", "DETERMINISTIC"}


def main(var: str, values: list[str], dtype_name: str, texts: list[str]) -> None:
    for text in texts:
        shape = Shape.parse(text)
        programs, compiled_by_value = {}, {}
        for value in values if var in PLAN_TIME else values[:1]:
            os.environ[var] = value
            planner._plan_grouped.cache_clear()
            planner._plan_canonical.cache_clear()
            options = (
                dataclasses.replace(WINRS, deterministic=value == "1") if var == "DETERMINISTIC" else WINRS
            )
            if forced := os.environ.get("AB_KERNELS"):
                options = dataclasses.replace(options, kernels=tuple(int(k) for k in forced.split()))
            x, dy, w, kwargs, compiled = _compiled(shape, dtype_name, options)
            fns = _filter_grads(w, kwargs, options)
            per_call = programs["per_call"] if programs else None
            (xla, ours), per_call = choice.repeated_calls(list(fns.values()), x, dy, per_call, every=True)
            programs |= {"per_call": per_call, "xla": xla, value: ours}
            compiled_by_value[value] = compiled["winrs"]
        per_call, xla = programs["per_call"], programs["xla"]
        times: dict[str, list[float]] = {value: [] for value in values}
        times["xla"] = []
        results = {}
        for _ in range(5):  # rounds, the values interleaved
            for value in values:
                os.environ[var] = value
                ours = programs.get(value, programs[values[0]])
                times[value].append(time_ms(ours, 3, 0) / per_call)
                results[value] = np.asarray(compiled_by_value.get(value, compiled_by_value[values[0]])(x, dy),
                                            np.float32)  # fmt: skip
            times["xla"].append(time_ms(xla, 3, 0) / per_call)
        base = results[values[0]]
        close = {v: bool(np.allclose(base, results[v], rtol=1e-2, atol=1e-3)) for v in values[1:]}
        same = bool(np.array_equal(base, results[values[1]]))
        row = {"layer": str(shape), "dtype": dtype_name, "var": var, "same": same, "close": close[values[1]]}
        row |= {f"close_{v}": close[v] for v in values[2:]}
        row |= {f"{name}_ms": statistics.median(t) for name, t in times.items()}
        row["flops"] = shape.flops
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    args = sys.argv[2:]
    at = next((i for i, a in enumerate(args) if a in DTYPES), None)  # the values end at the dtype
    if at is None or at < 2:
        sys.exit(
            f"usage: ab_env.py VAR VALUE_A VALUE_B [VALUE ...] DTYPE SHAPE... (DTYPE one of {', '.join(DTYPES)})"
        )
    main(sys.argv[1], args[:at], args[at], args[at + 1 :])
