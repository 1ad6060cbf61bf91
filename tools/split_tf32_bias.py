"""The split-TF32 tiles' sum of one dW element, emulated on the CPU, to choose the order of their products.

The tiles (cpp/cuda/wgmma_tf32_taps.cuh) add each step's products (64 units: eight k8 slices, three products a
slice: low x high, high x low, high x high) into a fresh partial sum by wgmma, then the partial sum into the
running sum by an FP32 add. The tensor cores' accumulation truncates (rounds toward zero), so each of a step's
MMAs into a partial sum of the step's magnitude biases it down by about half a unit in its last place; the
emulation takes each MMA as an exact k8 dot product added to the accumulator and truncated to FP32. Its
interleaved order gives the MARE the H200 measured on every layer the tiles ran (4.7e-7, docs/benchmarks.md,
thirty-ninth stop). Positive inputs (the paper's protocol), MARE against float64.

python tools/split_tf32_bias.py [--units 3584 11264 28672] [--folds 8 2 1] [--elements 512]

Each row: the interleaved order folded every F slices (8: once a step, as built), and the low products first.
"""

import argparse
from collections.abc import Sequence

import numpy as np


def tf32(v: np.ndarray) -> np.ndarray:
    """float32 to the nearest TF32 (10-bit mantissa), ties to even, as cvt.rn.tf32.f32."""
    bits = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
    return bits.astype(np.uint32).view(np.float32)


def truncated(v: np.ndarray) -> np.ndarray:
    """float64 to float32, toward zero."""
    r = v.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(v)
    r[over] = np.nextafter(r[over], np.float32(0))
    return r


def mare(units: int, low_first: bool, elements: int, fold: int = 8, seed: int = 0) -> float:
    """MARE of `elements` dW sums of `units` positive products each, a multiple of 64 (whole steps), the partial
    sum folded every `fold` slices (a divisor of 8; the low-first order folds once a step)."""
    if units % 64 or 8 % fold:
        raise ValueError(f"units must be whole steps of 64 ({units}) and fold a divisor of 8 ({fold})")
    rng = np.random.default_rng(seed)
    x = rng.random((elements, units), dtype=np.float32)
    dy = rng.random((elements, units), dtype=np.float32)
    x_high, dy_high = tf32(x), tf32(dy)
    x_low, dy_low = tf32(x - x_high), tf32(dy - dy_high)
    exact = (x.astype(np.float64) * dy.astype(np.float64)).sum(1)

    def mma(acc: np.ndarray, a: np.ndarray, b: np.ndarray, k: slice) -> np.ndarray:
        return truncated(acc.astype(np.float64) + (a[:, k].astype(np.float64) * b[:, k]).sum(1))

    group = 8 if low_first else fold
    running = np.zeros(elements, np.float32)
    for first in range(0, units // 8, group):
        partial = np.zeros(elements, np.float32)
        slices = [slice(8 * s, 8 * s + 8) for s in range(first, first + group)]
        lows, highs = ((dy_low, x_high), (dy_high, x_low)), ((dy_high, x_high),)
        passes = ([(k, lows) for k in slices] + [(k, highs) for k in slices] if low_first
                  else [(k, lows + highs) for k in slices])  # fmt: skip
        for k, products in passes:
            for a, b in products:
                partial = mma(partial, a, b, k)
        running = (running + partial).astype(np.float32)
    return float(np.mean(np.abs(running - exact) / np.abs(exact)))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, nargs="+", default=[3584, 11264, 28672], help="products a sum (x64)")
    parser.add_argument("--folds", type=int, nargs="+", default=[8, 2, 1], help="slices a partial sum (divide 8)")
    parser.add_argument("--elements", type=int, default=512)
    args = parser.parse_args(argv)
    for units in args.units:
        folded = ", ".join(f"every {f} {mare(units, False, args.elements, f):.2e}" for f in args.folds)
        low_first = mare(units, True, args.elements)
        print(f"{units} units a sum: MARE interleaved, folded {folded}; low products first {low_first:.2e}")


if __name__ == "__main__":
    main()
