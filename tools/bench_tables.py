"""Markdown tables of `python -m winrs_jax.bench --json` files, for docs/benchmarks.md.

python tools/bench_tables.py summary docs/bench-h100-*.jsonl
python tools/bench_tables.py rows docs/bench-h100-3d.jsonl
python tools/bench_tables.py latest $(cat docs/latest-runs.txt)   # the README's table: each suite's newest run
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path


def _load(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if "layer" in row:
                rows.append(row)
    return rows


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _speedups(group: list[dict]) -> tuple[list[float], list[float], list[float]]:
    """Forced WinRS's and auto's speedups over XLA, and forced WinRS's over PyTorch where it ran."""
    return (
        [r["speedup"] for r in group],
        [r["speedup_auto"] for r in group],
        [r["speedup_torch"] for r in group if r.get("speedup_torch")],
    )


def _by_suite_and_dtype(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["suite"], row["dtype"]), []).append(row)
    return groups


def summary(rows: list[dict]) -> str:
    """One line per suite and dtype: forced WinRS and the measured `auto` choice against XLA and PyTorch."""
    out = [
        "| suite | dtype | layers | WinRS / XLA geomean | min | max | WinRS wins | auto / XLA geomean | auto min "
        "| WinRS / PyTorch geomean | first auto choice, max s | cached, max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (suite, dtype), group in _by_suite_and_dtype(rows).items():
        speedups, auto, torch = _speedups(group)
        out.append(
            f"| {suite} | {dtype} | {len(group)} | {_geomean(speedups):.2f}x | {min(speedups):.2f}x | "
            f"{max(speedups):.2f}x | {sum(s > 1 for s in speedups)} | {_geomean(auto):.2f}x | {min(auto):.2f}x | "
            + (f"{_geomean(torch):.2f}x" if torch else "-")
            + f" | {max(r.get('choice_s', 0) for r in group):.2f} | "
            f"{max(r.get('cached_choice_ms', 0) for r in group):.2f} |"
        )
    return "\n".join(out)


def table(rows: list[dict]) -> str:
    """Every row: times, ratios, the choice, accuracy and memory."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    def sci(value: float | None) -> str:
        return "-" if value is None else f"{value:.1e}"

    out = [
        "| layer | dtype | path | XLA ms | WinRS ms | PyTorch ms | WinRS / XLA | auto runs | WinRS / PyTorch "
        "| MARE WinRS | MARE XLA | signed error WinRS | signed error XLA | workspace MB | XLA temp MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['layer']} | {r['dtype']} | {r['path']} | {ms(r['xla_ms'])} | {ms(r['winrs_ms'])} | "
            f"{ms(r['torch_ms'])} | {ratio(r['speedup'])} | {r['auto']} | {ratio(r['speedup_torch'])} | "
            f"{sci(r['winrs_mare'])} | {sci(r['xla_mare'])} | {sci(r.get('winrs_signed_error'))} | "
            f"{sci(r.get('xla_signed_error'))} | {r['winrs_workspace_bytes'] / 2**20:.1f} | "
            f"{r['xla_temp_bytes'] / 2**20:.1f} |"
        )
    return "\n".join(out)


SUITES = ("paper", "real", "3d", "strided", "strided3d", "strided-heldout", "dilated", "grouped")
DTYPES = (
    ("f32_highest", "float32 HIGHEST"),
    ("f32_default", "float32 DEFAULT"),
    ("bf16", "bfloat16"),
    ("f16", "float16"),
)


def _added(path: str) -> str:
    """The date (YYYY-MM-DD) of the commit that added path; "" for a file git does not track."""
    out = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%cs", "--", path], capture_output=True, text=True
    ).stdout.split()
    return out[-1] if out else ""


def latest(paths: list[str]) -> str:
    """One row per suite, one column per dtype: each cell from the last of `paths` that holds that suite and
    dtype (forced WinRS, auto and PyTorch against XLA as geomeans; the date its rows were committed)."""
    newest: dict[tuple[str, str], tuple[str, list[dict]]] = {}
    for path in paths:
        for key, group in _by_suite_and_dtype(_load([path])).items():
            newest[key] = (_added(path), group)
    out = ["| suite | " + " | ".join(name for _, name in DTYPES) + " |", "|---" * (len(DTYPES) + 1) + "|"]
    for suite in SUITES:
        runs = {dtype: newest[(suite, dtype)] for dtype, _ in DTYPES if (suite, dtype) in newest}
        if not runs:
            continue
        layers = max(len(group) for _, group in runs.values())
        cells = []
        for dtype, _ in DTYPES:
            if dtype not in runs:
                cells.append("-")
                continue
            date, group = runs[dtype]
            speedups, auto, torch = _speedups(group)
            cells.append(
                f"**{_geomean(speedups):.2f}x**, auto {_geomean(auto):.2f}x"
                + (f", {_geomean(torch):.2f}x PyTorch" if torch else "")
                + f" ({date or 'not committed'}"
                + (f", {len(group)} layers)" if len(group) != layers else ")")
            )
        out.append(f"| {suite} ({layers} layers) | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    commands = {"summary": lambda a: summary(_load(a)), "rows": lambda a: table(_load(a)), "latest": latest}
    if len(argv) < 2 or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    print(commands[argv[0]](argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
