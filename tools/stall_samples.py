"""Warp stall samples of one WinRS kernel by SASS instruction (Nsight Compute's SourceCounters), top N.

python tools/stall_samples.py LAYER DTYPE OUT_PREFIX [TOP]   # LAYER in bench's form, e.g. 32:56:256:3

Profiles the first omega kernel (PROFILE_KERNEL: another name's regex) of `tools/profile_layer.py LAYER DTYPE winrs
$PROFILE_ARGS` (after two launches), writes
OUT_PREFIX.ncu-rep and OUT_PREFIX.csv (the source page) and prints the instructions with the most samples:
where the warps wait (the instruction after a barrier's try-wait, an HGMMA waiting for its operands or the
tensor pipe, an atomic).
"""

import csv
import io
import os
import pathlib
import subprocess
import sys


def main(layer: str, dtype: str, prefix: str, top: int = 12) -> None:
    root = pathlib.Path(__file__).resolve().parent
    kernel = "regex:" + os.environ.get("PROFILE_KERNEL", "omega")  # the persistent block: "persistent"
    subprocess.run(
        ["ncu", "--kernel-name", kernel, "--launch-skip", "2", "--launch-count", "1",
         "--section", "WarpStateStats", "--section", "SourceCounters", "--import-source", "no", "-f",
         "-o", prefix, sys.executable, str(root / "profile_layer.py"), layer, dtype, "winrs",
         *os.environ.get("PROFILE_ARGS", "").split()],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    text = subprocess.run(
        ["ncu", "-i", f"{prefix}.ncu-rep", "--page", "source", "--csv", "--print-source", "sass"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    pathlib.Path(f"{prefix}.csv").write_text(text)
    lines = text.splitlines()  # the table's header is the line naming the samples' column
    header = next(i for i, line in enumerate(lines) if "Warp Stall Sampling (All" in line)
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[header:]))))
    samples = next(k for k in rows[0] if k and k.startswith("Warp Stall Sampling (All"))
    executed = next(k for k in rows[0] if k and k.startswith("Instructions Executed"))

    def count(row: dict[str, str], key: str) -> int:
        try:
            return int(float((row.get(key) or "0").replace(",", "")))
        except ValueError:
            return 0

    total = sum(count(row, samples) for row in rows)
    print(f"== {layer} {dtype}: total warp stall samples {total}")
    for row in sorted(rows, key=lambda row: -count(row, samples))[:top]:
        share = 100.0 * count(row, samples) / max(total, 1)
        print(f"{share:5.1f}%  executed {count(row, executed):>8}  {row.get('Source', '').strip()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:5]))
