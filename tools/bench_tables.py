"""Markdown tables of `python -m winrs_jax.bench --json` files, for docs/benchmarks.md.

python tools/bench_tables.py summary docs/bench-h100-*.jsonl
python tools/bench_tables.py rows docs/bench-h100-3d.jsonl
"""

from __future__ import annotations

import json
import math
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


def summary(rows: list[dict]) -> str:
    """One line per suite and dtype: forced WinRS and the measured `auto` choice against XLA and PyTorch."""
    out = [
        "| suite | dtype | layers | WinRS / XLA geomean | min | max | WinRS wins | auto / XLA geomean | auto min "
        "| WinRS / PyTorch geomean | first auto choice, max s | cached, max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["suite"], row["dtype"]), []).append(row)
    for (suite, dtype), group in groups.items():
        speedups = [r["speedup"] for r in group]
        auto = [r["speedup_auto"] for r in group]
        torch = [r["speedup_torch"] for r in group if r.get("speedup_torch")]
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


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("summary", "rows"):
        print(__doc__, file=sys.stderr)
        return 2
    rows = _load(argv[1:])
    print(summary(rows) if argv[0] == "summary" else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
