"""python -m winrs_jax.bench: winrs_jax vs XLA (and PyTorch/cuDNN where PyTorch with CUDA is importable)
backward-filter convolution, same process, same inputs."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

# JAX would otherwise take 75% of the GPU's memory at start and leave PyTorch's column none.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

import winrs_jax  # noqa: E402
from winrs_jax.bench.suite import DTYPES, SUITES, Result, Shape, measure  # noqa: E402


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else format(value, spec) + unit


_HEAD = (
    f"{'suite':<6} {'layer':<24} {'dtype':<12} {'path':<7} {'XLA ms':>8} {'WinRS ms':>9} {'torch ms':>9} "
    f"{'vs XLA':>7} {'auto':>6} {'vs torch':>9} {'WinRS TF/s':>10} {'MARE WinRS':>10} {'MARE XLA':>9} "
    f"{'signed WinRS':>12} {'signed XLA':>10} {'ws MB':>7} "
    f"{'XLA tmp MB':>10}"
)


def _row(suite: str, r: Result) -> str:
    return (
        f"{suite:<6} {str(r.shape):<24} {r.dtype:<12} {r.path:<7} {r.xla_ms:>8.3f} {r.winrs_ms:>9.3f} "
        f"{_fmt(r.torch_ms, '9.3f'):>9} {r.speedup:>6.2f}x {r.auto:>6} {_fmt(r.speedup_torch, '.2f', 'x'):>9} "
        f"{r.tflops(r.winrs_ms):>10.3g} {_fmt(r.winrs_mare, '10.1e'):>10} {_fmt(r.xla_mare, '9.1e'):>9} "
        f"{_fmt(r.winrs_signed_error, '12.1e'):>12} {_fmt(r.xla_signed_error, '10.1e'):>10} "
        f"{r.winrs_workspace_bytes / 2**20:>7.1f} {r.xla_temp_bytes / 2**20:>10.1f}"
    )


def _summary(results: list[tuple[str, Result]]) -> str:
    rows = []
    groups: dict[tuple[str, str], list[Result]] = {}
    for suite, r in results:
        groups.setdefault((suite, r.dtype), []).append(r)
    for (suite, dtype), group in groups.items():
        line = f"{suite} {dtype}: WinRS vs XLA geomean {_geomean([r.speedup for r in group]):.2f}x, min "
        line += f"{min(r.speedup for r in group):.2f}x; auto vs XLA geomean "
        line += (
            f"{_geomean([r.speedup_auto for r in group]):.2f}x, min {min(r.speedup_auto for r in group):.2f}x"
        )
        line += f"; first auto choice at most {max(r.choice_s for r in group):.2f} s"
        torch = [r.speedup_torch for r in group if r.speedup_torch is not None]
        if torch:
            line += f"; WinRS vs PyTorch/cuDNN geomean {_geomean(torch):.2f}x, min {min(torch):.2f}x"
        rows.append(f"{line} ({len(group)} layers)")
    return "\n".join(rows)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _plot(results: list[tuple[str, Result]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    dtypes = list(dict.fromkeys(r.dtype for _, r in results))
    fig, axes = plt.subplots(
        len(dtypes), 1, figsize=(max(10, 0.35 * len(results) / len(dtypes)), 3.5 * len(dtypes))
    )
    axes = axes if len(dtypes) > 1 else [axes]
    for ax, dtype in zip(axes, dtypes, strict=True):
        rows = [(s, r) for s, r in results if r.dtype == dtype]
        xs = range(len(rows))
        ax.bar(xs, [r.speedup for _, r in rows], 0.4, label="vs XLA")
        if any(r.speedup_torch is not None for _, r in rows):
            ax.bar(
                [x + 0.4 for x in xs], [r.speedup_torch or 0 for _, r in rows], 0.4, label="vs PyTorch/cuDNN"
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + 0.2 for x in xs], [f"{s}: {r.shape}" for s, r in rows], rotation=90, fontsize=6)
        ax.set_ylabel(f"{dtype} speedup")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    axes[0].set_title(f"winrs_jax filter gradient on {jax.devices()[0].device_kind}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _shape(text: str) -> Shape:
    """--shape's parser: Shape.parse, its ValueError an argparse usage error."""
    try:
        return Shape.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m winrs_jax.bench", description=__doc__)
    parser.add_argument("--suite", action="append", choices=[*SUITES, "none"],
                        help="built-in layers, repeatable (default, without --shape: paper and real on a GPU, else "
                        "small)")  # fmt: skip
    parser.add_argument("--shape", action="append", default=[], type=_shape,
                        help="extra layer N:H:C:r, N:H:W:CIN:COUT:FH:FW or N:D:H:W:CIN:COUT:FD:FH:FW, "
                        "then optionally :gG (groups) :sS (stride) :dD (dilation)")  # fmt: skip
    parser.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="default: all four")
    parser.add_argument("--repeats", type=_positive, default=7)
    parser.add_argument("--calls", type=int, default=0,
                        help="calls back to back per repeat (default 0: as many as run about 10 ms); a call of a "
                        "short layer is a program of several filter gradients (auto mode's timing)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write one JSON object per result")
    parser.add_argument("--plot", type=Path, help="write a PNG of the speedups")
    parser.add_argument("--deterministic", choices=["true", "false"],
                        help="PlannerOptions.deterministic for WinRS (default: the planner's, atomic adds unless "
                        "XLA_FLAGS asks for deterministic ops)")  # fmt: skip
    parser.add_argument("--kernels", type=int, nargs=2, metavar=("I", "J"),
                        help="the kernel pair of the forced WinRS column (indices into winrs_jax.variants(); 0 0: "
                        "the direct kernel), as PlannerOptions(kernels=(I, J)); auto plans its own")  # fmt: skip
    args = parser.parse_args(argv)
    if args.kernels and not all(0 <= k < len(winrs_jax.variants()) for k in args.kernels):
        parser.error(f"--kernels takes two indices into winrs_jax.variants(), 0 to {len(winrs_jax.variants()) - 1}")
    # A fresh decision cache: the "auto" column and the first-choice times are this run's own measurements.
    os.environ["WINRS_JAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="winrs-jax-bench-")

    default = ["paper", "real"] if jax.default_backend() == "gpu" else ["small"]
    suites = args.suite or ([] if args.shape else default)  # --shape alone runs just those layers
    cases = [(s, shape) for s in suites if s != "none" for shape in SUITES[s]]
    cases += [("shape", shape) for shape in args.shape]
    dtypes = args.dtype or list(DTYPES)
    device = jax.devices()[0]
    print(f"device {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}", flush=True)
    print(_HEAD + "\n" + "-" * len(_HEAD), flush=True)
    sink = args.json.open("w") if args.json else None
    if sink:
        sink.write(json.dumps({"device": device.device_kind, "jax": jax.__version__}) + "\n")
    results = []
    total = len(cases) * len(dtypes)
    progress = sys.stderr.isatty()
    for i, ((suite, shape), dtype) in enumerate((c, d) for c in cases for d in dtypes):
        if progress:  # on a terminal only: in a log, the carriage returns ran it into the rows
            print(
                f"\r[{i + 1}/{total}] {suite} {shape} {dtype}".ljust(70), end="", file=sys.stderr, flush=True
            )
        deterministic = None if args.deterministic is None else args.deterministic == "true"
        kernels = tuple(args.kernels) if args.kernels else None
        result = measure(shape, dtype, args.repeats, args.calls, deterministic, kernels)
        results.append((suite, result))
        print(_row(suite, result), flush=True)  # each row as it is measured: a long run may be cut short
        if sink:
            sink.write(json.dumps({"suite": suite, **result.as_json()}) + "\n")
            sink.flush()
    if progress:
        print(file=sys.stderr)
    print(_summary(results))
    if sink:
        sink.close()
    if args.plot:
        _plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
