"""python -m winrs_jax.bench: winrs_jax vs XLA backward-filter convolution, same process, same inputs."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import jax

from winrs_jax.bench.suite import DTYPES, PAPER_SUITE, SMALL_SUITE, Result, Shape, measure


def _table(results: list[Result]) -> str:
    head = (
        f"{'layer':<18} {'dtype':<12} {'XLA ms':>9} {'WinRS ms':>9} {'XLA TF/s':>9} {'WinRS TF/s':>10} "
        f"{'speedup':>8} {'XLA temp MB':>12} {'WinRS ws MB':>12} {'max rel diff':>12}"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(
            f"{str(r.shape):<18} {r.dtype:<12} {r.xla_ms:>9.3f} {r.winrs_ms:>9.3f} {r.tflops(r.xla_ms):>9.2f} "
            f"{r.tflops(r.winrs_ms):>10.2f} {r.speedup:>7.2f}x {r.xla_temp_bytes / 2**20:>12.1f} "
            f"{r.winrs_workspace_bytes / 2**20:>12.2f} {r.max_rel_diff:>12.1e}"
        )
    by_dtype: dict[str, list[float]] = {}
    for r in results:
        by_dtype.setdefault(r.dtype, []).append(r.speedup)
    for dtype, speedups in by_dtype.items():
        geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        rows.append(
            f"{dtype}: geometric-mean speedup {geo:.2f}x, min {min(speedups):.2f}x over {len(speedups)}"
        )
    return "\n".join(rows)


def _plot(results: list[Result], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    labels = [f"{r.shape}\n{r.dtype}" for r in results]
    xs = range(len(results))
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(results)), 4.5))
    ax.bar([x - 0.2 for x in xs], [r.tflops(r.xla_ms) for r in results], 0.4, label="XLA")
    ax.bar([x + 0.2 for x in xs], [r.tflops(r.winrs_ms) for r in results], 0.4, label="winrs_jax")
    ax.set_xticks(list(xs), labels, rotation=90, fontsize=7)
    ax.set_ylabel("effective TFLOP/s (direct-convolution FLOPs)")
    ax.set_title(f"Backward-filter convolution on {jax.devices()[0].device_kind}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m winrs_jax.bench", description=__doc__)
    parser.add_argument("--suite", choices=("paper", "small", "none"), default=None,
                        help="built-in shapes (default: paper on a GPU, small otherwise)")  # fmt: skip
    parser.add_argument("--shape", action="append", default=[], help="extra layer N:H:C:r (repeatable)")
    parser.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="default: f32_highest")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write one JSON object per result")
    parser.add_argument("--plot", type=Path, help="write a PNG bar chart")
    args = parser.parse_args(argv)

    suite = args.suite or ("paper" if jax.default_backend() == "gpu" else "small")
    shapes = {"paper": PAPER_SUITE, "small": SMALL_SUITE, "none": []}[suite] + [
        Shape.parse(s) for s in args.shape
    ]
    dtypes = args.dtype or ["f32_highest"]
    device = jax.devices()[0]
    print(f"device {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}", flush=True)
    results = []
    total = len(shapes) * len(dtypes)
    for i, (shape, dtype) in enumerate((s, d) for s in shapes for d in dtypes):
        print(f"\r[{i + 1}/{total}] {shape} {dtype}".ljust(60), end="", file=sys.stderr, flush=True)
        results.append(measure(shape, dtype, args.repeats, args.calls))
    print(file=sys.stderr)
    print(_table(results))
    if args.json:
        with args.json.open("w") as f:
            f.write(json.dumps({"device": device.device_kind, "jax": jax.__version__}) + "\n")
            for r in results:
                f.write(json.dumps(r.as_json()) + "\n")
    if args.plot:
        _plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
