"""PyTorch/cuDNN's filter gradient of one layer, for Nsight Compute: what cuDNN's wgrad kernel is made of.

ncu --profile-from-start off --section LaunchStats --section Occupancy \
    python tools/cudnn_wgrad_profile.py bf16 32:56:256:3   # N:H:C:F (H = W, C in = out, F x F), SAME padding

Runs torch.ops.aten.convolution_backward (weight only) with cudnn.benchmark on, NHWC: a few calls (cuDNN's
trials among them), then one between cudaProfilerStart and Stop, which ncu profiles.
"""

import sys

import torch


def main(dtype_name: str, n: int, h: int, c: int, f: int) -> None:
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
    torch.backends.cudnn.benchmark = True
    x = torch.rand((n, c, h, h), device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    w = torch.rand((c, c, f, f), device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    pads = [(f - 1) // 2] * 2
    y = torch.nn.functional.conv2d(x, w, padding=pads)
    dy = torch.rand_like(y).contiguous(memory_format=torch.channels_last)

    def call() -> None:
        torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], pads, [1, 1], False, [0, 0], 1,
                                            [False, True, False])  # fmt: skip

    for _ in range(4):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2].split(":")))
