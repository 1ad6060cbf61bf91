"""What a library GEMM (cuBLAS, through PyTorch) makes of the direct kernel's per-tap GEMM of a layer.

python tools/gemm_calibration.py DTYPE SHAPE...   # DTYPE bf16 or f16; shapes in bench's form, e.g. 32:56:256:3

The direct filter gradient of one filter tap is a GEMM dW_tap (OC x IC) = dY^T (OC x K) X_tap (K x IC) with
K = N OH OW, dY and X in NHWC (K-major for dY^T, IC contiguous for X), as the one-tap 128 x 128 block computes
it. Each row: cuBLAS's time for one tap's GEMM (X unshifted: the shift changes addresses, not work), its TFLOP/s,
and FH x FW times it, the time of a layer made of such GEMMs. Against the bench's XLA and WinRS times it says
whether the one-tap formulation (tall K, small OC x IC) is what holds WinRS's direct kernel below cuDNN's.
"""

import json
import math
import sys

import torch

from winrs_jax.bench.suite import Shape


def gemm_ms(m: int, n: int, k: int, dtype: torch.dtype, repeats: int = 20) -> float:
    dy = torch.rand((k, m), device="cuda", dtype=dtype)  # NHWC dY: K x OC, OC contiguous
    x = torch.rand((k, n), device="cuda", dtype=dtype)  # NHWC X: K x IC, IC contiguous
    a = dy.t()
    for _ in range(3):
        torch.mm(a, x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        torch.mm(a, x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main(dtype_name: str, texts: list[str]) -> None:
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
    for text in texts:
        shape = Shape.parse(text)
        k, taps = shape.n * math.prod(shape.out_spatial), math.prod(shape.filter)
        ms = gemm_ms(shape.cout, shape.cin, k, dtype)
        flops = 2.0 * shape.cout * shape.cin * k
        row = {"layer": str(shape), "dtype": dtype_name, "m": shape.cout, "n": shape.cin, "k": k,
               "gemm_ms": ms, "gemm_tflops": flops / ms / 1e9, "taps": taps, "layer_ms": ms * taps}  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
