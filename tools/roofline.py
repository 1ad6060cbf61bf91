"""An upper bound on the speed of the fused 1D-Winograd filter gradient on an H100, per layer of a bench run.

Issue 7 asks for 1.5x XLA's speed (geomean) in bf16/f16/TF32 and 2x at float32 HIGHEST on both suites. This tool
asks what the fastest kernel of WinRS's design could reach on each layer, with generous assumptions, and reads
that against the XLA times the bench measured in the same process.

The design (paper section 5, Algorithm 3): a thread block holds alpha x B_N x B_M FP32 accumulators in
registers; per unit (r output-gradient columns, alpha input columns) it transforms B_N dY rows by G and B_M X
rows by D^T in FP32 on the CUDA cores, converts them to the operand type, stores them to shared memory, and
runs alpha GEMMs of B_N x B_M on the tensor cores. Per unit and block, on one SM:

  tensor cycles = alpha B_N B_M / (MMA FMAs per cycle)            (x3 for split TF32)
  issue cycles  = [B_N ops(G) + B_M ops(D^T)                      FP32 transforms (nonzeros minus one per row)
                   + alpha (B_N + B_M) (cvt + st.shared) per element, vectorised as the kernels do
                   + (B_N r + B_M alpha) global loads, 16 bytes each] / 128 lanes per cycle

  shared-memory cycles = 2 alpha (B_N + B_M) b / 128 bytes        the staged operands written once and read
                                                                   once by the MMAs (each slice read by one
                                                                   warp or warpgroup: the least reads)
  L2 cycles     = (B_N + B_M) r s / (L2 bytes per SM and cycle)    dY and X brought to the SM once per unit
                                                                   (X's columns shared by neighbouring units)

(b: staged operand bytes, 2 in 16 bits, 4 for TF32 words; s: storage bytes) and the unit delivers n r B_N
B_M direct FMAs. Only the accumulators bound the block: alpha B_N B_M <= 32768 per SM (the kernels' 128 per
thread; --accumulators 49152 for three quarters of the register file), B_N = B_M as large as that allows
(capped by the layer's channels). Everything else is assumed free: fragment loads beyond one read, index
arithmetic, barriers, the output transform, latency, and any overlap is perfect. L2's rate is the highest
our kernels sustained (8.3 TB/s of reads, docs/benchmarks.md, seventh stop; --l2 to change it). The direct
kernel (alpha = 1, no transforms) is bounded by the tensor peak. Memory: X and dY read once from HBM. A
layer's bound is the best of its admissible variants: n divides the filter width, and the variant's errors
on the dtype's path are within the planner's accuracy budget (both protocols; in bfloat16 that leaves the
direct kernel alone). --any-accuracy admits every variant up to alpha 8 instead (the bound before the
twenty-ninth stop); --no-memory-terms drops the shared-memory and L2 terms (the twelfth stop's bound).

Usage: python tools/roofline.py docs/bench-h100-paper-bf16-twelfth.jsonl [more rows ...] [--accumulators N]
[--efficiency F] [--no-memory-terms]
(winrs_jax importable: installed, or PYTHONPATH=src with the extension built there).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import geometric_mean

import numpy as np

import winrs_jax
from winrs_jax import _winrs
from winrs_jax.bench.suite import DTYPES

# H100 SXM5 (NVIDIA's H100 whitepaper): 132 SMs at the 1.83 GHz boost clock of its peak figures.
SMS = 132
CLOCK_HZ = 1.83e9
HBM_BYTES_PER_S = 3.35e12
LANES_PER_CYCLE = 128  # FP32 lanes and issue slots (4 schedulers x 32) per SM
SMEM_BYTES_PER_CYCLE = 128  # per SM (32 banks of 4 bytes)
L2_BYTES_PER_S = 8.3e12  # the highest read rate our kernels sustained from L2
# The arithmetic path each dtype's bound runs, and the reference whose accuracy budget it must keep.
PATH_AND_REFERENCE = {
    "bf16": ("bf16", "bf16"),
    "f16": ("fp16", "fp16"),
    "f32_default": ("tf32", "tf32"),
    "f32_highest": ("tf32x3", "fp32"),
}
MMA_FMAS_PER_CYCLE = {"bf16": 2048, "f16": 2048, "f32_default": 1024, "f32_highest": 1024 / 3}
ACCUMULATOR_REGISTERS = 32 * 1024
# Per element staged: conversion and shared-memory store instructions (per lane), and element bytes.
STAGING = {
    "bf16": (1 / 2 + 1 / 8, 2),  # cvt.rn.bf16x2 packs two; st.shared.v4 stores eight
    "f16": (1 / 2 + 1 / 8, 2),
    "f32_default": (1 + 1 / 4, 4),  # cvt.rna.tf32 each; four per store
    "f32_highest": (3 + 2 / 4, 4),  # high part, remainder, its rounding; two stores of four
}


@dataclass(frozen=True)
class Bound:
    variant: int
    block: int
    tflops: float  # effective (direct) TFLOP/s
    limit: str  # the term that sets it: tensor, issue, smem or L2


def transform_ops(matrix: list[list[float]]) -> int:
    m = np.asarray(matrix)
    nonzero = np.count_nonzero(np.abs(m) > 1e-12, axis=1)
    return int(np.sum(np.maximum(nonzero - 1, 0)))


def variant_bound(
    variant: int, dtype: str, out_c: int, in_c: int, accumulators: int, l2_bytes_per_s: float | None
) -> Bound:
    """l2_bytes_per_s None: without the shared-memory and L2 terms."""
    info = _winrs.variants()[variant]
    alpha, n, r = info["alpha"], info["n"], info["r"]
    mma = MMA_FMAS_PER_CYCLE[dtype]
    peak = 2 * mma * SMS * CLOCK_HZ / 1e12
    if variant == 0:
        return Bound(0, 0, peak, "tensor")
    side = math.sqrt(accumulators / alpha)
    bn, bm = min(side, out_c), min(side, in_c)
    _, g, dt = _winrs.transform(variant)
    per_element, element_bytes = STAGING[dtype]
    tensor = alpha * bn * bm / mma
    issue = (
        bn * transform_ops(g)
        + bm * transform_ops(dt)
        + alpha * (bn + bm) * per_element
        + (bn * r + bm * alpha) * element_bytes / 16
    ) / LANES_PER_CYCLE
    cycles = {"tensor": tensor, "issue": issue}
    if l2_bytes_per_s is not None:
        storage_bytes = np.dtype(DTYPES[dtype][0]).itemsize
        cycles["smem"] = 2 * alpha * (bn + bm) * element_bytes / SMEM_BYTES_PER_CYCLE
        cycles["L2"] = (bn + bm) * r * storage_bytes / (l2_bytes_per_s / SMS / CLOCK_HZ)
    limit = max(cycles, key=lambda k: cycles[k])
    direct_fmas = n * r * bn * bm
    tflops = 2 * direct_fmas / cycles[limit] * SMS * CLOCK_HZ / 1e12
    return Bound(variant, int(round(min(bn, bm))), tflops, limit)


def admitted(variant: int, dtype: str) -> bool:
    """Whether the planner's accuracy budget admits the variant on the dtype's path (variants.h's measured
    errors on both protocols against the reference's budget, as plan.cc's AccuracyBudget::admits)."""
    names = [p["name"] for p in _winrs.paths()]
    path, reference = PATH_AND_REFERENCE[dtype]
    *_, mare, signed_error = _winrs.variants()[variant]["shapes"][names.index(path)]
    budget_mare, budget_signed = _winrs.paths()[names.index(reference)]["accuracy_budget"]
    return mare <= budget_mare and signed_error <= budget_signed


def layer_bound(
    row: dict, dtype: str, accumulators: int, l2_bytes_per_s: float | None, any_accuracy: bool = False
) -> tuple[float, Bound]:
    """Fastest time (ms) the design could reach on a bench row's layer, and the bound that sets it."""
    variants = _winrs.variants()
    filter_w = row["FW"]
    bounds = [
        variant_bound(v, dtype, row["COUT"], row["CIN"], accumulators, l2_bytes_per_s)
        for v, info in enumerate(variants)
        if filter_w % info["n"] == 0 and (info["alpha"] <= 8 if any_accuracy else admitted(v, dtype))
    ]
    best = max(bounds, key=lambda b: b.tflops)
    flops = row["xla_tflops"] * 1e12 * row["xla_ms"] * 1e-3
    itemsize = np.dtype(DTYPES[dtype][0]).itemsize
    spatial = [row.get(k, 1) for k in ("D", "H", "W")]
    elements = row["N"] * math.prod(spatial) * (row["CIN"] + row["COUT"])
    memory_ms = elements * itemsize / HBM_BYTES_PER_S * 1e3
    return max(flops / (best.tflops * 1e12) * 1e3, memory_ms), best


def modelled(row: dict) -> bool:
    """Dense, stride-1, undilated 1D and 2D layers: the bound's model (3D, grouped, strided and dilated are not)."""
    tokens = row["layer"].split()
    two_d = tokens[0] == "1D" or tokens[0].count("x") == 1
    return two_d and not any(t[0] in "sgd" and t[1:].isdigit() for t in tokens[1:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rows", nargs="+", type=Path)
    parser.add_argument(
        "--accumulators",
        type=int,
        default=ACCUMULATOR_REGISTERS,
        help="FP32 accumulators per SM that bound the block (default: the kernels' 128 per thread)",
    )
    parser.add_argument(
        "--l2", type=float, default=L2_BYTES_PER_S, help="L2 read bandwidth, bytes/s (default %(default).3g)"
    )
    parser.add_argument(
        "--no-memory-terms", action="store_true", help="without the shared-memory and L2 terms"
    )
    parser.add_argument(
        "--any-accuracy",
        action="store_true",
        help="every variant up to alpha 8, whether or not the accuracy budget admits it",
    )
    parser.add_argument(
        "--efficiency",
        type=float,
        default=1.0,
        help="the fraction of each bound a kernel reaches (cuDNN's wgrad kernels ran 3x3 layers at about 0.7 "
        "of the tensor peak)",
    )
    args = parser.parse_args()
    l2 = None if args.no_memory_terms else args.l2
    for path in args.rows:
        rows = [json.loads(line) for line in path.open()]
        rows = [r for r in rows if "layer" in r and modelled(r)]
        by_dtype: dict[str, list[dict]] = {}
        for r in rows:
            by_dtype.setdefault(r["dtype"], []).append(r)
        for dtype, group in by_dtype.items():
            print(f"\n{path.name} [{dtype}], {len(group)} layers")
            print(
                "| layer | XLA ms (TF/s) | WinRS ms | PyTorch ms | bound ms (variant, block, TF/s, limit) "
                "| bound / XLA |"
            )
            print("|---|---|---|---|---|---|")
            reach, forced, auto = [], [], []
            for r in group:
                bound_ms, best = layer_bound(r, dtype, args.accumulators, l2, args.any_accuracy)
                bound_ms /= args.efficiency
                speed = r["xla_ms"] / bound_ms
                reach.append(max(speed, 1.0))
                forced.append(r["speedup"])
                auto.append(r.get("speedup_auto") or r["speedup"])
                torch_ms = f"{r['torch_ms']:.3f}" if r.get("torch_ms") else "-"
                name = "direct" if best.variant == 0 else winrs_jax.variants()[best.variant].name
                print(
                    f"| {r['layer']} | {r['xla_ms']:.3f} ({r['xla_tflops']:.0f}) | {r['winrs_ms']:.3f} | {torch_ms} "
                    f"| {bound_ms:.3f} ({name}, {best.block}, {best.tflops:.0f}, {best.limit}) | {speed:.2f}x |"
                )
            print(
                f"geomean vs XLA: forced {geometric_mean(forced):.2f}x, auto {geometric_mean(auto):.2f}x, "
                f"bound of the design (with XLA where it is faster) {geometric_mean(reach):.2f}x"
            )


if __name__ == "__main__":
    main()
