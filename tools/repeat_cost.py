"""What auto's repeated timing programs cost to compile and first run, against their number of applications
(issue 8: a new 2D depthwise layer's first trace spends seconds in XLA's filter gradient).

python tools/repeat_cost.py [--dtype bf16] [--repeats 1,16,1+16] [--impls xla,winrs,xla-loop,winrs-loop] LAYER...
(LAYER in Shape.parse's forms)

For each layer and repeat count R, a fresh process with the CUDA driver's kernel cache off (as on a new machine)
compiles a program of R applications of XLA's filter gradient (choice.repeated, as auto's measurement builds
it), then runs it twice, and does the same for WinRS's (the bench's filter gradients and inputs: bench.suite's
_filter_grads and _layer); one JSON line each: seconds to compile, to the end of
the first call, and of the second call, and the warm milliseconds per filter gradient from a burst of calls
(choice.per_call_estimate: with R = 1, how much of the host's dispatch shows in a short kernel's time). If
XLA's first call grows with R, each application pays cuDNN's run-time work of its own. "1+16": both programs
in one process, one after the other (what the first leaves in the process's caches). "-loop": the R
applications by a loop (choice.looped, as auto times 2D depthwise layers on a GPU). (The thirtieth stop's rows
ran WinRS through winrs_jax.conv's gradient, with its layout transposes and dW's cast.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def child(layer: str, dtype_name: str, sequence: str, impl: str) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from winrs_jax import choice
    from winrs_jax.bench import suite

    jax.jit(lambda a: a + 1)(jnp.ones(8)).block_until_ready()  # the GPU and jax started
    x, dy, w, kwargs = suite._layer(suite.Shape.parse(layer), dtype_name, np.random.default_rng(0))
    filter_grad = suite._filter_grads(w, kwargs)["xla" if impl.startswith("xla") else "winrs"]

    for position, repeats in enumerate(int(r) for r in sequence.split("+")):
        if impl.endswith("-loop"):
            xs, dys, program = x, dy, choice.looped(filter_grad, repeats)
        else:
            xs, dys, program = (x,) * repeats, (dy,) * repeats, choice.repeated(filter_grad)
        start = time.perf_counter()
        compiled = jax.jit(program).lower(xs, dys).compile()
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(compiled(xs, dys))
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(compiled(xs, dys))
        second_s = time.perf_counter() - start
        # Warm: ms per filter gradient from a burst of calls, as auto's timing estimates it.
        looped = impl.endswith("-loop")
        per_call_s, _ = choice.per_call_estimate(
            lambda c=compiled, xs=xs, dys=dys, looped=looped: c(xs, dys) if looped else c(xs, dys)[-1]
        )
        warm_ms = round(per_call_s * 1e3 / repeats, 4)
        print(json.dumps(dict(layer=layer, dtype=dtype_name, impl=impl, repeats=repeats, sequence=sequence,
                              position=position, compile_s=round(compile_s, 3), first_call_s=round(first_s, 3),
                              second_call_s=round(second_s, 4), warm_ms_per_gradient=warm_ms)), flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("layers", nargs="+")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--repeats", default="1,16,1+16")
    parser.add_argument("--impls", default="xla,winrs")
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "REPEATS"))
    args = parser.parse_args()
    if args.child:
        child(args.layers[0], args.dtype, args.child[1], args.child[0])
        return
    env = dict(os.environ, CUDA_CACHE_DISABLE="1")
    for layer in args.layers:
        for repeats in args.repeats.split(","):
            for impl in args.impls.split(","):
                done = subprocess.run(
                    [sys.executable, __file__, "--dtype", args.dtype, "--child", impl, repeats, layer],
                    env=env, capture_output=True, text=True, check=False,
                )  # fmt: skip
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                print("\n".join(lines) if lines else json.dumps(dict(layer=layer, impl=impl, repeats=repeats,
                                                                    error=done.stderr[-600:])), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
