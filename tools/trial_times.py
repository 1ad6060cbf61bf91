"""Times the kernels and plans not yet on by default (cpp/winrs/trial.h) against the defaults and XLA, in one
process: WINRS_JAX_TRY is read at each plan and launch, so each setting compiles and runs with its own.

python tools/trial_times.py [--dtype bf16] [--trials 'taps-wide;tma;taps-partial,taps-wide'] [--layers 128:56:64:3 ...]
Prints one line per trial and layer (milliseconds, and the trial's speed-up over the default).
"""

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

import jax

from winrs_jax.bench.suite import Shape, _compiled, time_ms

# The layers each trial targets: where the default loses most (docs/benchmarks.md) and where it must not lose.
TARGETS = {
    "taps-per-tap": "128:56:64:3 32:112:112:64:128:3:3 16:128:64:3 128:35:35:64:96:3:3 32:56:256:3",
    "taps-wide": "128:56:64:3 32:112:112:64:128:3:3 16:128:64:3 128:35:35:64:96:3:3 32:56:256:3",
    "tma": "128:28:128:3 128:14:256:3 128:7:512:3 32:56:256:3 64:14:14:256:256:7:7 16:64:128:3",
    "grouped-pipeline": "64:56:128:3:g128 64:28:256:7:g256 128:14:672:5:g672",
    "taps-partial,taps-wide": "32:128:64:5 32:128:64:7 32:56:56:64:128:5:5",
    "taps-any-channels,taps-wide": "128:28:128:3 128:14:256:3 16:64:128:3 32:56:256:3",
}


@contextmanager
def trying(trials: str) -> Iterator[None]:
    saved = os.environ.get("WINRS_JAX_TRY")
    os.environ["WINRS_JAX_TRY"] = trials
    try:
        yield
    finally:
        if saved is None:
            del os.environ["WINRS_JAX_TRY"]
        else:
            os.environ["WINRS_JAX_TRY"] = saved


def run(shape: Shape, dtype: str, trials: str) -> dict[str, float]:
    times: dict[str, float] = {}
    for name, setting in (("default", ""), ("trial", trials)):
        with trying(setting):
            x, dy, _, _, compiled = _compiled(shape, dtype)
            if name == "default":
                times["xla"] = time_ms(lambda: compiled["xla"](x, dy), 7, 10)
            times[name] = time_ms(lambda: compiled["winrs"](x, dy), 7, 10)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--trials", default=";".join(TARGETS), help="';'-separated WINRS_JAX_TRY settings")
    parser.add_argument("--layers", nargs="*")
    args = parser.parse_args()
    print(jax.devices()[0].device_kind, args.dtype)
    for trials in args.trials.split(";"):
        for layer in args.layers or TARGETS[trials].split():
            t = run(Shape.parse(layer), args.dtype, trials)
            print(
                f"{trials:28s} {layer:24s} xla {t['xla']:.3f} default {t['default']:.3f} trial {t['trial']:.3f}"
                f"  trial/default speed-up {t['default'] / t['trial']:.2f}x  vs xla {t['xla'] / t['trial']:.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
