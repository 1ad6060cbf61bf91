"""Benchmark layers and the timing method of shared/baselines/README.md: XLA's filter gradient, winrs_jax's and,
where PyTorch is importable with a GPU, cuDNN's through PyTorch, on the same inputs in the same process."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import winrs_jax
from winrs_jax import choice

DN = {2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}
WINRS = winrs_jax.PlannerOptions(mode="winrs")


@dataclasses.dataclass(frozen=True)
class Shape:
    """One layer: batch, input height x width, input -> output channels, filter height x width; stride 1,
    padding (FH // 2, FW // 2). A 1D layer has height 1 and filter height 1; a 3D layer has an input depth d
    and a filter depth fd (padding fd // 2)."""

    n: int
    h: int
    w: int
    cin: int
    cout: int
    fh: int
    fw: int
    name: str = ""
    d: int = 1
    fd: int = 1
    stride: int = 1  # in every spatial axis
    dilation: int = 1  # of the filter, in every spatial axis (of the width for a 1D layer)
    groups: int = 1  # feature_group_count; cin == cout == groups is depthwise

    @classmethod
    def cube(cls, n: int, dhw: tuple[int, int, int], cin: int, cout: int, r: int, name: str = "") -> Shape:
        return cls(n, dhw[1], dhw[2], cin, cout, r, r, name, dhw[0], r)

    @property
    def rank(self) -> int:
        return 3 if self.d > 1 or self.fd > 1 else 2

    @property
    def spatial(self) -> tuple[int, ...]:
        return (self.d, self.h, self.w) if self.rank == 3 else (self.h, self.w)

    @property
    def filter(self) -> tuple[int, ...]:
        return (self.fd, self.fh, self.fw) if self.rank == 3 else (self.fh, self.fw)

    @classmethod
    def square(cls, n: int, h: int, c: int, r: int, name: str = "") -> Shape:
        return cls(n, h, h, c, c, r, r, name)

    @classmethod
    def conv1d(cls, n: int, length: int, c: int, k: int, name: str = "") -> Shape:
        return cls(n, 1, length, c, c, 1, k, name)

    @classmethod
    def parse(cls, text: str) -> Shape:
        """N:H:C:r (square, C in = C out), N:H:W:CIN:COUT:FH:FW, or N:D:H:W:CIN:COUT:FD:FH:FW (3D), optionally
        followed by :gG (groups), :sS (stride) and :dD (dilation), e.g. 128:112:96:3:g96:s2."""
        forms = "N:H:C:r, N:H:W:CIN:COUT:FH:FW or N:D:H:W:CIN:COUT:FD:FH:FW, then :gG, :sS, :dD"
        tokens = text.split(":")
        extras = {"g": "groups", "s": "stride", "d": "dilation"}
        options = {}
        while tokens and tokens[-1][:1] in extras:
            key = tokens.pop()
            try:
                options[extras[key[0]]] = int(key[1:])
            except ValueError as e:
                raise ValueError(f"shape must be {forms}, got {text!r}") from e
        try:
            values = [int(v) for v in tokens]
        except ValueError as e:
            raise ValueError(f"shape must be {forms}, got {text!r}") from e
        if len(values) == 4:
            shape = cls.square(*values)
        elif len(values) == 7:
            shape = cls(*values)
        elif len(values) == 9:
            n, d, h, w, cin, cout, fd, fh, fw = values
            shape = cls(n, h, w, cin, cout, fh, fw, "", d, fd)
        else:
            raise ValueError(f"shape must be {forms}, got {text!r}")
        return dataclasses.replace(shape, **options)

    def __str__(self) -> str:
        if self.stride > 1:
            return f"{dataclasses.replace(self, stride=1)} s{self.stride}"
        if self.dilation > 1:
            return f"{dataclasses.replace(self, dilation=1)} d{self.dilation}"
        if self.groups > 1:
            return f"{dataclasses.replace(self, groups=1)} g{self.groups}"
        if self.rank == 3:
            dhw = f"{self.d}^3" if self.d == self.h == self.w else f"{self.d}x{self.h}x{self.w}"
            ch = f"{self.cin}" if self.cin == self.cout else f"{self.cin}->{self.cout}"
            return f"{self.fd}x{self.fh}x{self.fw} {self.n}:{dhw}:{ch}"
        if self.h == 1 and self.fh == 1:
            return f"1D k={self.fw} {self.n}:{self.w}:{self.cin}->{self.cout}"
        hw = f"{self.h}" if self.h == self.w else f"{self.h}x{self.w}"
        ch = f"{self.cin}" if self.cin == self.cout else f"{self.cin}->{self.cout}"
        return f"{self.fh}x{self.fw} {self.n}:{hw}:{ch}"

    @property
    def padding(self) -> tuple[tuple[int, int], ...]:
        return tuple(
            ((f - 1) * d // 2, (f - 1) * d // 2) for f, d in zip(self.filter, self.dilations, strict=True)
        )

    @property
    def strides(self) -> tuple[int, ...]:
        return (1, self.stride) if self.h == 1 and self.fh == 1 else (self.stride,) * self.rank

    @property
    def dilations(self) -> tuple[int, ...]:
        return (1, self.dilation) if self.h == 1 and self.fh == 1 else (self.dilation,) * self.rank

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple((size + lo + hi - (f - 1) * d - 1) // s + 1
                     for size, f, s, d, (lo, hi) in zip(self.spatial, self.filter, self.strides, self.dilations,
                                                        self.padding, strict=True))  # fmt: skip

    @property
    def flops(self) -> float:
        return (
            2.0
            * self.n
            * math.prod(self.out_spatial)
            * self.cout
            * math.prod(self.filter)
            * self.cin
            / self.groups
        )


# The baselines' paper suite (comparable FLOPs per filter size).
PAPER_SUITE = [
    Shape.square(32, 128, 128, 2),
    *(Shape.square(32, h, c, 3) for h, c in ((14, 1024), (28, 512), (56, 256), (112, 128), (224, 64))),
    Shape.square(32, 64, 256, 4),
    *(Shape.square(32, h, c, 5) for h, c in ((16, 512), (32, 256), (64, 128), (128, 64))),
    Shape.square(32, 64, 256, 6),
    *(Shape.square(32, h, c, 7) for h, c in ((16, 512), (32, 256), (64, 128), (128, 64))),
    Shape.square(32, 32, 256, 8),
    *(Shape.square(32, h, c, 9) for h, c in ((16, 512), (32, 256), (64, 128), (128, 64))),
]

# Layers of real networks, chosen apart from the paper suite and not tuned on: ResNet-18/34/50 3x3 stages at
# batch 128, odd Inception-style maps, VGG and U-Net levels, 5x5 and 7x7 layers of 96-256 channels, 1D audio.
REAL_SUITE = [
    Shape.square(128, 56, 64, 3, "ResNet conv2_x"),
    Shape.square(128, 28, 128, 3, "ResNet conv3_x"),
    Shape.square(128, 14, 256, 3, "ResNet conv4_x"),
    Shape.square(128, 7, 512, 3, "ResNet conv5_x"),
    Shape(128, 35, 35, 64, 96, 3, 3, "Inception-v3 35x35"),
    Shape(128, 17, 17, 192, 192, 3, 3, "Inception 17x17"),
    Shape(32, 112, 112, 64, 128, 3, 3, "VGG block 2"),
    Shape.square(16, 128, 64, 3, "U-Net level 1"),
    Shape.square(16, 64, 128, 3, "U-Net level 2"),
    Shape(128, 27, 27, 96, 256, 5, 5, "AlexNet conv2"),
    Shape(128, 28, 28, 96, 128, 5, 5, "Inception 5x5"),
    Shape.square(64, 14, 256, 7, "7x7, 256 channels"),
    Shape.square(32, 56, 96, 7, "7x7, 96 channels"),
    Shape.conv1d(32, 16000, 256, 3, "audio conv1d k=3"),
    Shape.conv1d(64, 4096, 256, 5, "audio conv1d k=5"),
    Shape.conv1d(16, 8192, 512, 7, "audio conv1d k=7"),
]

# Small enough for a CPU.
SMALL_SUITE = [
    Shape.square(8, 56, 64, 3),
    Shape.square(8, 28, 64, 5),
    Shape.square(4, 32, 32, 7),
    Shape.square(8, 32, 32, 2),
]

# 3D layers (issue 9): volumes of 3D U-Nets and medical segmentation, video, 3x3x3 and 5x5x5, strided
# downsampling and a depthwise layer.
SUITE_3D = [
    Shape.cube(1, (64, 64, 64), 32, 64, 3, "3D, 64^3 volume"),
    Shape.cube(4, (32, 32, 32), 64, 64, 3, "3D U-Net level"),
    Shape.cube(8, (16, 56, 56), 64, 64, 3, "video (C3D-style)"),
    Shape.cube(2, (96, 96, 96), 16, 16, 3, "medical, 96^3 volume"),
    Shape.cube(2, (32, 32, 32), 32, 32, 5, "5x5x5, 32^3"),
    Shape.cube(16, (8, 28, 28), 128, 128, 3, "video, deep level"),
    dataclasses.replace(Shape.cube(2, (64, 64, 64), 32, 64, 3, "nnU-Net encoder downsampling s2"), stride=2),
    dataclasses.replace(Shape.cube(8, (16, 56, 56), 64, 128, 3, "3D ResNet-18 conv3_1 s2"), stride=2),
    dataclasses.replace(Shape.cube(8, (16, 28, 28), 96, 96, 3, "X3D depthwise 3x3x3"), groups=96),
]

# Strided layers (issue 9): ResNet-50's stem and downsampling 3x3 convolutions at batch 128, DCGAN's 4x4 stride 2,
# a 1D strided audio front end.
SUITE_STRIDED = [
    dataclasses.replace(Shape(128, 224, 224, 3, 64, 7, 7, "ResNet stem 7x7 s2"), stride=2),
    dataclasses.replace(Shape.square(128, 56, 128, 3, "ResNet-50 conv3_1 3x3 s2"), stride=2),
    dataclasses.replace(Shape.square(128, 28, 256, 3, "ResNet-50 conv4_1 3x3 s2"), stride=2),
    dataclasses.replace(Shape.square(128, 14, 512, 3, "ResNet-50 conv5_1 3x3 s2"), stride=2),
    dataclasses.replace(Shape(64, 64, 64, 128, 256, 4, 4, "DCGAN 4x4 s2"), stride=2),
    dataclasses.replace(Shape.conv1d(32, 16000, 256, 4, "audio conv1d k=4 s2"), stride=2),
]

# Strided layers held out from tuning (issue 9; the 3D suite's two strided layers set the strided tile's segments
# and packing, twenty-eighth stop): nnU-Net's encoder downsampling at three depths, a 16-channel medical volume,
# 3D ResNet-18's conv4_1, a video layer of 112 x 112 frames; ResNet-18's 2D downsampling 3x3 layers at batch 128,
# a 2D U-Net's and wav2vec 2.0's feature encoder's k=3 stride-2 convolution.
SUITE_STRIDED_HELD_OUT = [
    dataclasses.replace(Shape.cube(2, (128, 128, 128), 32, 64, 3, "nnU-Net stage 1->2 s2"), stride=2),
    dataclasses.replace(Shape.cube(2, (64, 64, 64), 64, 128, 3, "nnU-Net stage 2->3 s2"), stride=2),
    dataclasses.replace(Shape.cube(2, (32, 32, 32), 128, 256, 3, "nnU-Net stage 3->4 s2"), stride=2),
    dataclasses.replace(Shape.cube(2, (96, 96, 96), 16, 32, 3, "medical 16->32 s2"), stride=2),
    dataclasses.replace(Shape.cube(8, (8, 28, 28), 128, 256, 3, "3D ResNet-18 conv4_1 s2"), stride=2),
    dataclasses.replace(Shape.cube(4, (16, 112, 112), 32, 64, 3, "video 112x112 s2"), stride=2),
    dataclasses.replace(Shape(128, 56, 56, 64, 128, 3, 3, "ResNet-18 conv3_1 3x3 s2"), stride=2),
    dataclasses.replace(Shape(128, 28, 28, 128, 256, 3, 3, "ResNet-18 conv4_1 3x3 s2"), stride=2),
    dataclasses.replace(Shape(16, 128, 128, 64, 128, 3, 3, "U-Net 2D downsampling s2"), stride=2),
    dataclasses.replace(Shape(32, 1, 8000, 512, 512, 1, 3, "wav2vec 2.0 conv k=3 s2"), stride=2),
]

# Dilated layers (issue 9): DeepLab-v3 ASPP branches at output stride 16, WaveNet-style dilated 1D.
SUITE_DILATED = [
    dataclasses.replace(Shape(16, 33, 33, 512, 256, 3, 3, "ASPP rate 6"), dilation=6),
    dataclasses.replace(Shape(16, 33, 33, 512, 256, 3, 3, "ASPP rate 12"), dilation=12),
    dataclasses.replace(Shape(8, 65, 65, 256, 256, 3, 3, "DeepLab atrous block rate 2"), dilation=2),
    dataclasses.replace(Shape.conv1d(16, 16000, 128, 2, "WaveNet k=2 dilation 64"), dilation=64),
    dataclasses.replace(Shape.conv1d(16, 16000, 128, 3, "dilated 1D k=3 dilation 4"), dilation=4),
]

# Grouped and depthwise layers (issue 9): Mamba's causal depthwise conv1d, a depthwise conv1d, RepLKNet's 31x31,
# ConvNeXt's 7x7 and MobileNet's 3x3 depthwise layers, ResNeXt-50's 32-group 3x3 of its first three stages, and
# a RegNet-style group width of 8.
SUITE_GROUPED = [
    dataclasses.replace(Shape.conv1d(16, 2048, 2048, 4, "Mamba depthwise conv1d k=4"), groups=2048),
    dataclasses.replace(Shape.conv1d(32, 1024, 512, 5, "depthwise conv1d k=5"), groups=512),
    dataclasses.replace(Shape.square(32, 28, 256, 31, "RepLKNet depthwise 31x31"), groups=256),
    dataclasses.replace(Shape.square(64, 28, 256, 7, "ConvNeXt depthwise 7x7"), groups=256),
    dataclasses.replace(Shape.square(64, 56, 128, 3, "MobileNet depthwise 3x3"), groups=128),
    dataclasses.replace(Shape.square(64, 56, 128, 3, "ResNeXt 32 groups 3x3"), groups=32),
    dataclasses.replace(Shape.square(64, 28, 256, 3, "ResNeXt 32 groups 3x3, stage 2"), groups=32),
    dataclasses.replace(Shape.square(64, 14, 512, 3, "ResNeXt 32 groups 3x3, stage 3"), groups=32),
    dataclasses.replace(Shape.square(128, 28, 192, 3, "RegNet group width 8"), groups=24),
    dataclasses.replace(
        Shape.square(128, 112, 96, 3, "MobileNetV2 depthwise 3x3 stride 2"), groups=96, stride=2
    ),
    dataclasses.replace(Shape.square(128, 14, 672, 5, "EfficientNet-B0 depthwise 5x5"), groups=672),
    dataclasses.replace(Shape.square(64, 14, 512, 7, "ConvNeXt depthwise 7x7, stage 3"), groups=512),
    dataclasses.replace(Shape.square(128, 7, 960, 3, "MobileNetV2 depthwise 3x3, 7x7 maps"), groups=960),
    Shape(32, 56, 56, 64, 128, 3, 3, "depthwise 3x3, multiplier 2", groups=64),
]

SUITES = {
    "paper": PAPER_SUITE,
    "real": REAL_SUITE,
    "3d": SUITE_3D,
    "strided": SUITE_STRIDED,
    "strided-heldout": SUITE_STRIDED_HELD_OUT,
    "dilated": SUITE_DILATED,
    "grouped": SUITE_GROUPED,
    "small": SMALL_SUITE,
}

DTYPES: dict[str, tuple[Any, Any]] = {
    "f32_highest": (jnp.float32, lax.Precision.HIGHEST),
    "f32_default": (jnp.float32, None),
    "bf16": (jnp.bfloat16, None),
    "f16": (jnp.float16, None),
}


@dataclasses.dataclass
class Result:
    shape: Shape
    dtype: str
    xla_ms: float
    winrs_ms: float
    torch_ms: float | None
    xla_temp_bytes: int
    winrs_workspace_bytes: int
    winrs_mare: float | None  # against float64 (PyTorch on the GPU), None without PyTorch
    xla_mare: float | None
    # ||dW - exact|| / ||exact|| on standard normal X and dY (zero-mean, as real activations and gradients are;
    # the paper's [0, 1) inputs never cancel), None without PyTorch
    winrs_signed_error: float | None
    xla_signed_error: float | None
    max_rel_diff: float  # |winrs - XLA| / max |XLA|
    path: str  # the WinRS arithmetic path, or "xla" when the plan fell back
    auto: str  # what the default mode "auto" runs for this layer after its own measurement: "winrs" or "xla"
    plan: str
    choice_s: float = 0.0  # seconds the first auto plan of the layer took (measuring both), beyond the plan
    cached_choice_ms: float = 0.0  # milliseconds the same auto plan took again (from the cache; median of 3)
    # Where auto runs WinRS on another path than the forced column's (a measured alternative): its path and time.
    auto_path: str = ""
    auto_ms: float | None = None
    # XLA's temporary bytes for the compiled WinRS filter gradient: the workspace plus what the graph around the
    # kernels needs (dW in float32 before its cast and transpose to the filter's dtype and layout).
    winrs_temp_bytes: int = 0
    # The auto plan's measured choice with its own timings ("WinRS (measured: WinRS 0.081 ms, XLA 0.092 ms)"):
    # where auto picked WinRS and this benchmark timed it slower than XLA, the two measurements disagree.
    auto_choice: str = ""
    # Auto's samples behind that choice (choice._time_all's debug log), to compare with this benchmark's timings.
    auto_samples: str = ""

    @property
    def speedup(self) -> float:
        return self.xla_ms / self.winrs_ms

    @property
    def speedup_auto(self) -> float:
        """XLA's time over what mode "auto" runs (by this benchmark's timing of its choice)."""
        if self.auto != "winrs":
            return 1.0
        return self.xla_ms / (self.auto_ms if self.auto_ms is not None else self.winrs_ms)

    @property
    def speedup_torch(self) -> float | None:
        return None if self.torch_ms is None else self.torch_ms / self.winrs_ms

    def tflops(self, ms: float) -> float:
        return self.shape.flops / (ms * 1e-3) / 1e12

    def as_json(self) -> dict[str, Any]:
        s = self.shape
        return dict(
            layer=str(s), name=s.name, N=s.n, H=s.h, W=s.w, CIN=s.cin, COUT=s.cout, FH=s.fh, FW=s.fw,
            dtype=self.dtype, path=self.path, auto=self.auto, xla_ms=self.xla_ms, winrs_ms=self.winrs_ms,
            torch_ms=self.torch_ms, speedup=self.speedup, speedup_auto=self.speedup_auto,
            speedup_torch=self.speedup_torch, xla_tflops=self.tflops(self.xla_ms),
            winrs_tflops=self.tflops(self.winrs_ms), xla_temp_bytes=self.xla_temp_bytes,
            winrs_workspace_bytes=self.winrs_workspace_bytes, winrs_mare=self.winrs_mare, xla_mare=self.xla_mare,
            winrs_signed_error=self.winrs_signed_error, xla_signed_error=self.xla_signed_error,
            max_rel_diff=self.max_rel_diff, plan=self.plan, choice_s=self.choice_s,
            cached_choice_ms=self.cached_choice_ms, auto_path=self.auto_path, auto_ms=self.auto_ms,
            winrs_temp_bytes=self.winrs_temp_bytes, auto_choice=self.auto_choice, auto_samples=self.auto_samples,
        )  # fmt: skip


@contextlib.contextmanager
def _choice_log() -> Iterator[list[str]]:
    """The messages winrs_jax logs meanwhile, debug level included (auto's samples)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, handler = logging.getLogger("winrs_jax"), Collect()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # the debug lines go to the results, not to the console
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _calls(fn: Callable[[], jax.Array], calls: int) -> int:
    """`calls`, or where it is 0 as many as run about 10 ms (auto mode's samples: choice.per_call_estimate)."""
    return calls if calls > 0 else choice.per_call_estimate(fn)[1]


def time_ms(fn: Callable[[], jax.Array], repeats: int, calls: int) -> float:
    """Median over `repeats` of (calls back-to-back, then block_until_ready) / calls, after one warm-up (calls 0:
    about 10 ms of them, so that the host's synchronisation, 0.2-0.4 ms on an H100's host, weighs little)."""
    fn().block_until_ready()
    calls = _calls(fn, calls)
    return statistics.median(choice.sample_ms(fn, calls) for _ in range(repeats))


def _temp_bytes(compiled: Any) -> int:
    analysis = compiled.memory_analysis()
    return int(getattr(analysis, "temp_size_in_bytes", 0)) if analysis is not None else 0


def _torch() -> Any:
    """PyTorch, when it is importable and sees a GPU (the other system users would pick)."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_case(
    shape: Shape, dtype_name: str, x: np.ndarray, dy: np.ndarray, repeats: int, calls: int
) -> Any:
    """cuDNN's filter gradient through torch.ops.aten.convolution_backward (cudnn.benchmark on, TF32 only at
    float32 default precision), timed with CUDA events (None when repeats is 0); and the float64 reference dW
    (O x I x FH x FW)."""
    torch = _torch()
    dtypes = {"f32_highest": torch.float32, "f32_default": torch.float32, "bf16": torch.bfloat16,
              "f16": torch.float16}  # fmt: skip
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = dtype_name == "f32_default"
    rank = shape.rank
    cl = torch.channels_last if rank == 2 else torch.channels_last_3d
    to_torch = (0, rank + 1, *range(1, rank + 1))  # N[D]HWC -> NC[D]HW

    def tensor(
        a: np.ndarray, dtype: Any
    ) -> Any:  # channels-last array -> NC... tensor in channels-last memory
        return torch.from_numpy(a).to("cuda").permute(*to_torch).to(dtype).contiguous(memory_format=cl)

    def backward_filter(tx: Any, tdy: Any, dtype: Any) -> Any:
        w = torch.zeros((shape.cout, shape.cin // shape.groups, *shape.filter), device="cuda", dtype=dtype)
        w = w.contiguous(memory_format=cl)
        pads = tuple(lo for lo, _ in shape.padding)
        zeros = (0,) * rank
        return lambda: torch.ops.aten.convolution_backward(
            tdy,
            tx,
            w,
            None,
            shape.strides,
            pads,
            shape.dilations,
            False,
            zeros,
            shape.groups,
            (False, True, False),
        )[1]

    elapsed = None
    if repeats > 0:  # else the float64 reference only
        fn = backward_filter(
            tensor(x, dtypes[dtype_name]), tensor(dy, dtypes[dtype_name]), dtypes[dtype_name]
        )
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / calls)
        elapsed = statistics.median(samples)
    reference = backward_filter(tensor(x, torch.float64), tensor(dy, torch.float64), torch.float64)()
    # O x I x spatial -> O x spatial x I
    return elapsed, reference.permute(0, *range(2, rank + 2), 1).cpu().numpy()


def _mare(actual: np.ndarray, expected: np.ndarray) -> float:
    nonzero = expected != 0
    return float(np.mean(np.abs(actual[nonzero] - expected[nonzero]) / np.abs(expected[nonzero])))


def _signed_error(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def _inputs(shape: Shape, dtype: Any, draw: Callable[..., np.ndarray]) -> tuple[jax.Array, jax.Array]:
    """X and dY of a layer from `draw`, dY scaled by 1e-2 for float16 (the paper's protocol)."""
    x = jnp.asarray(draw((shape.n, *shape.spatial, shape.cin)).astype(np.float32), dtype)
    scale = 1e-2 if dtype == jnp.float16 else 1.0
    dy = jnp.asarray(scale * draw((shape.n, *shape.out_spatial, shape.cout)).astype(np.float32), dtype)
    return x, dy


def _signed_errors(shape: Shape, dtype_name: str, compiled: dict[str, Any]) -> tuple[float, float]:
    """Norm-relative errors of the compiled WinRS and XLA filter gradients on standard normal inputs, against
    PyTorch's float64 dW."""
    dtype = DTYPES[dtype_name][0]
    xs, dys = _inputs(shape, dtype, np.random.default_rng(1).standard_normal)
    _, reference = _torch_case(shape, dtype_name, np.asarray(xs.astype(jnp.float32)),
                               np.asarray(dys.astype(jnp.float32)), 0, 0)  # fmt: skip
    reference = np.moveaxis(reference, 0, -1)  # O x spatial x I -> spatial x I x O
    winrs, xla = (
        _signed_error(np.asarray(compiled[name](xs, dys).astype(jnp.float32), np.float64), reference)
        for name in ("winrs", "xla")
    )
    return winrs, xla


def signed_errors(shape: Shape, dtype_name: str) -> tuple[float, float, str]:
    """(WinRS's error, XLA's error, WinRS's path) on zero-mean inputs, without timing (tools/accuracy.py
    --gpu). Needs PyTorch with a GPU for the float64 reference."""
    x, dy, w, kwargs, compiled = _compiled(shape, dtype_name)
    plan = winrs_jax.plan(x, w, **kwargs, options=WINRS)
    return (*_signed_errors(shape, dtype_name, compiled), plan.path if plan.supported else "xla")


def _layer(shape: Shape, dtype_name: str, rng: np.random.Generator) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The paper's inputs X and dY of a layer, its filter's shape and the convolution's arguments."""
    dtype, precision = DTYPES[dtype_name]
    x, dy = _inputs(shape, dtype, rng.random)
    w = jax.ShapeDtypeStruct((*shape.filter, shape.cin // shape.groups, shape.cout), dtype)
    kwargs = dict(window_strides=shape.strides, padding=shape.padding, rhs_dilation=shape.dilations,
                  dimension_numbers=DN[shape.rank], feature_group_count=shape.groups, precision=precision)  # fmt: skip
    return x, dy, w, kwargs


def _compiled(
    shape: Shape, dtype_name: str, options: winrs_jax.PlannerOptions = WINRS
) -> tuple[Any, Any, Any, dict[str, Any], dict[str, Any]]:
    """_layer's inputs and arguments, and XLA's and WinRS's filter gradients of the layer compiled for them."""
    x, dy, w, kwargs = _layer(shape, dtype_name, np.random.default_rng(0))
    compiled = {
        name: jax.jit(fn).lower(x, dy).compile() for name, fn in _filter_grads(w, kwargs, options).items()
    }
    return x, dy, w, kwargs, compiled


def _filter_grads(
    w: Any, kwargs: dict[str, Any], options: winrs_jax.PlannerOptions = WINRS
) -> dict[str, Callable[[jax.Array, jax.Array], jax.Array]]:
    """XLA's filter gradient (as lax.conv's VJP computes it) and WinRS's, forced whatever the measured choice."""

    def xla(x: jax.Array, dy: jax.Array) -> jax.Array:
        zeros = jnp.zeros(w.shape, w.dtype)
        return jax.vjp(lambda w: lax.conv_general_dilated(x, w, **kwargs), zeros)[1](dy)[0]

    def ours(x: jax.Array, dy: jax.Array) -> jax.Array:
        return winrs_jax.conv_backward_filter(x, dy, w.shape, **kwargs, options=options)

    return {"xla": xla, "winrs": ours}


def measure(
    shape: Shape,
    dtype_name: str,
    repeats: int = 7,
    calls: int = 0,
    deterministic: bool | None = None,
    kernels: tuple[int, int] | None = None,
) -> Result:
    """Times XLA's, winrs_jax's (and PyTorch's) filter gradient of one layer on the paper's inputs (uniform
    [0, 1), dY scaled by 1e-2 for float16), and measures both errors on those and on zero-mean inputs.
    `deterministic`: PlannerOptions.deterministic of WinRS's runs (None: the planner's default); `kernels`: the
    forced runs' kernel pair (PlannerOptions.kernels; None: the planner's; auto plans its own)."""
    forced = dataclasses.replace(WINRS, deterministic=deterministic, kernels=kernels)
    x, dy, w, kwargs, compiled = _compiled(shape, dtype_name, forced)
    # Timed as auto times them: repeated in one program, so that the host's dispatch of one short call at a time
    # does not weigh in (choice.repeated_calls), as many times as the shorter of the two calls needs.
    fns = _filter_grads(w, kwargs, forced)
    repeated, gradients_per_call = choice.repeated_calls(list(fns.values()), x, dy, every=True)
    times = {
        name: time_ms(call, repeats, calls) / gradients_per_call
        for name, call in zip(fns, repeated, strict=True)
    }
    expected = np.asarray(compiled["xla"](x, dy).astype(jnp.float32), np.float64)
    actual = np.asarray(compiled["winrs"](x, dy).astype(jnp.float32), np.float64)
    # Auto's own measurement before PyTorch's runs, as in a program without them.
    start = time.perf_counter()
    plan = winrs_jax.plan(x, w, **kwargs, options=forced)
    plan_s = time.perf_counter() - start
    auto_options = winrs_jax.PlannerOptions(mode="auto", deterministic=deterministic)
    start = time.perf_counter()
    with _choice_log() as auto_log:
        auto = winrs_jax.plan(x, w, **kwargs, options=auto_options)  # new layer: measures WinRS and XLA
    choice_s = time.perf_counter() - start - plan_s
    cached = []
    for _ in range(3):  # the cached decision: the median of three, as one call may meet a garbage collection
        start = time.perf_counter()
        winrs_jax.plan(x, w, **kwargs, options=auto_options)
        cached.append((time.perf_counter() - start) * 1e3)
    cached_choice_ms = statistics.median(cached)
    torch_ms = winrs_mare = xla_mare = winrs_signed = xla_signed = None
    if _torch() is not None:
        x64, dy64 = np.asarray(x.astype(jnp.float32)), np.asarray(dy.astype(jnp.float32))
        torch_calls = _calls(lambda: compiled["xla"](x, dy), calls)  # XLA's count: PyTorch's times are alike
        torch_ms, reference = _torch_case(shape, dtype_name, x64, dy64, repeats, torch_calls)
        reference = np.moveaxis(reference, 0, -1)  # O x spatial x I -> spatial x I x O
        winrs_mare, xla_mare = _mare(actual, reference), _mare(expected, reference)
        winrs_signed, xla_signed = _signed_errors(shape, dtype_name, compiled)
    auto_winrs = auto.supported and auto.choice.startswith("WinRS")
    auto_ms = None
    # Auto measured another path faster, or the forced column runs forced kernels: time what auto runs (its own
    # plan on its path).
    if auto_winrs and (auto.path != plan.path or kernels is not None):
        on_path = dataclasses.replace(WINRS, deterministic=deterministic, path=auto.path)
        (other,), _ = choice.repeated_calls(
            [lambda x, dy: winrs_jax.conv_backward_filter(x, dy, w.shape, **kwargs, options=on_path)],
            x,
            dy,
            gradients_per_call,
        )
        auto_ms = time_ms(other, repeats, calls) / gradients_per_call
    return Result(
        shape=shape,
        dtype=dtype_name,
        xla_ms=times["xla"],
        winrs_ms=times["winrs"],
        torch_ms=torch_ms,
        xla_temp_bytes=_temp_bytes(compiled["xla"]),
        winrs_workspace_bytes=plan.workspace_bytes,
        winrs_mare=winrs_mare,
        xla_mare=xla_mare,
        winrs_signed_error=winrs_signed,
        xla_signed_error=xla_signed,
        max_rel_diff=float(np.abs(actual - expected).max() / np.abs(expected).max()),
        path=plan.path if plan.supported else "xla",
        auto="winrs" if auto_winrs else "xla",
        plan=str(plan),
        choice_s=choice_s,
        cached_choice_ms=cached_choice_ms,
        auto_path=auto.path if auto_ms is not None else "",
        auto_ms=auto_ms,
        winrs_temp_bytes=_temp_bytes(compiled["winrs"]),
        auto_choice=auto.choice,
        auto_samples="\n".join(auto_log),
    )
