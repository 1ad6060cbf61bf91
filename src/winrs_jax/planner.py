"""Trace-time planning of the WinRS backward-filter convolution (paper section 4).

The arithmetic lives in C++ (cpp/winrs/plan.cc): the FFI call carries only the planner's inputs (padding,
arithmetic path, SM count, overrides) and each handler derives the same plan from them and its buffer shapes.
This module decides whether a layer is eligible at all, which arithmetic path its dtype and precision ask for,
and presents the plan.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
from typing import Any

import jax
import numpy as np
from jax import lax

from winrs_jax import _winrs
from winrs_jax.geometry import ConvSpec

# The device the default plan is made for when no GPU is visible: an H100 SXM. The CPU handler then runs
# exactly the plan an H100 would.
REFERENCE_SM_COUNT = 132

# The arithmetic paths of cpp/winrs/paths.h, by index, and what they mean in plain words.
PATHS = tuple(p["name"] for p in _winrs.paths())
MODES = ("auto", "winrs", "xla", "model")  # what computes filter gradients (winrs_jax.choice)
# The largest errors (MARE, signed error) a kernel may have when XLA would use the given arithmetic
# (cpp/winrs/plan.cc).
ACCURACY_BUDGET: dict[str, tuple[float, float]] = {p["name"]: p["accuracy_budget"] for p in _winrs.paths()}
# The budget's multiple of XLA's error with that reference arithmetic (4 at float32 HIGHEST, else 2).
ACCURACY_FACTOR: dict[str, float] = {p["name"]: p["accuracy_factor"] for p in _winrs.paths()}
PATH_DESCRIPTIONS = {
    "fp32": "float32 FMA (CUDA cores on the GPU)",
    "tf32x3": "float32-accurate split TF32 on tensor cores (3 products per operand pair)",
    "tf32": "TF32 on tensor cores (10-bit mantissa operands, float32 accumulation)",
    "bf16": "bfloat16 on tensor cores, float32 transforms and accumulation",
    "fp16": "float16 on tensor cores, float32 transforms and accumulation",
}
# The input dtype each path runs on (X and dY are stored in it), from the same table.
PATH_DTYPES = {p["name"]: np.dtype(getattr(jax.numpy, p["storage"])) for p in _winrs.paths()}
# Paths each input dtype may use; float32 ones differ in accuracy (see _float32_paths).
_DTYPE_PATHS = {d: tuple(p for p in PATHS if PATH_DTYPES[p] == d) for d in set(PATH_DTYPES.values())}


@dataclasses.dataclass(frozen=True)
class KernelShape:
    """How a variant runs on one arithmetic path (cpp/winrs/variants.h)."""

    block_oc: int
    block_ic: int
    gemm_tflops: float
    blocks_per_sm: int
    # Errors of dW against float64 on the CPU executor (tools/accuracy.py): the mean absolute relative error in
    # the paper's protocol (uniform [0, 1) inputs) and the norm-relative error on zero-mean inputs.
    mare: float
    signed_error: float


@dataclasses.dataclass(frozen=True)
class Variant:
    """One kernel Omega_alpha(n, r) of the paper's Figure 6."""

    index: int
    n: int
    r: int
    alpha: int
    alpha_class: int
    shapes: dict[str, KernelShape]

    @property
    def name(self) -> str:
        return f"Omega_{self.alpha_class}({self.n}, {self.r})"


@functools.cache
def variants() -> tuple[Variant, ...]:
    """The 13 WinRS kernel variants, from the C++ table that drives kernels, planner and tests."""
    out = []
    for i, v in enumerate(_winrs.variants()):
        shapes = {name: KernelShape(*shape) for name, shape in zip(PATHS, v.pop("shapes"), strict=True)}
        out.append(Variant(index=i, shapes=shapes, **v))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class PlannerOptions:
    """Overrides for the planner.

    sm_count: SMs of the target GPU (default: the visible GPU, else an H100).
    smem_per_block: the target GPU's shared memory per thread block in bytes, opted into (default: the visible
        GPU's, from its compute capability, else an H100's 227 KiB); tiles whose kernels need more are not planned
        (sm_86 and sm_89 GPUs give 99 KiB, sm_80 163 KiB).
    segments: force the baseline segment count Z^ (Algorithm 2 still shapes the segments), or the split count of
        a direct grouped plan.
    buckets: cap the float32 partial filter gradients that the segments add into (the workspace holds all but
        the first). Segments beyond the cap add into the buckets one after another in a fixed order (serial
        split-K): the result stays deterministic, but each segment waits for the one before it, which costs up
        to several times the layer's time when many segments share few buckets (docs/benchmarks.md).
    deterministic: how the segments' partial filter gradients are added up. True: into buckets in a fixed order,
        so that every run gives the same bits (paper section 3, phase 3). False: into dW by atomic adds as the
        segments finish, with no workspace, no reduction pass and more segments to fill the GPU; the order, and
        so the last bits of dW, change from run to run (the accuracy does not: docs/benchmarks.md). By default
        (None) atomic, as cuDNN's filter gradients and XLA's scatters are, unless XLA_FLAGS asks XLA for
        deterministic ops (--xla_gpu_deterministic_ops or --xla_gpu_exclude_nondeterministic_ops). `buckets`
        implies True. The direct grouped kernels (depthwise layers) add their splits the same way: atomically,
        or (True) as partial filter gradients in the workspace, summed with compensation in a fixed order (also
        by default where many splits meet a small dW, whose atomic adds measured slower).
    kernels: force the kernel pair, as indices into variants() (tests and kernel tuning).
    mode: "auto" (measured choice between WinRS and XLA per layer), "winrs", "xla" or "model"; by default the
        winrs_jax.mode(...) context or $WINRS_JAX_MODE, else "auto" (winrs_jax.choice).
    path: force the arithmetic path, one of PATHS that the dtype allows: "fp32", "tf32x3" or "tf32" for
        float32, "bf16" for bfloat16, "fp16" for float16. By default float32 follows `precision` as XLA does on
        the platform (see resolve_paths).
    tf32_tiles: whether float32 layers may run Hopper's TF32 tiles (the direct kernel as a persistent kernel on
        wgmma, 3 filter columns of 128 x 128 channels a tile; at HIGHEST precision split TF32 on 128 x 64
        channels), which the planner picks where they fit and its rates say they are faster than the Winograd
        kernels. By default (None):
        on an sm_90 GPU with the package's sm_90a kernels built, unless $WINRS_JAX_TF32_TAPS (or a switch that
        keeps Hopper's wgmma or persistent kernels off: WINRS_JAX_WGMMA, WINRS_JAX_PERSISTENT,
        WINRS_JAX_TAP_RUNS) is 0.
    """

    sm_count: int | None = None
    smem_per_block: int | None = None
    segments: int | None = None
    buckets: int | None = None
    deterministic: bool | None = None
    kernels: tuple[int, int] | None = None
    path: str | None = None
    mode: str | None = None
    tf32_tiles: bool | None = None

    def __post_init__(self) -> None:
        for name in ("segments", "buckets", "sm_count", "smem_per_block"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not hasattr(value, "__index__") or operator.index(value) < 1:
                raise ValueError(f"PlannerOptions.{name} must be a positive int or None, got {value!r}")
            object.__setattr__(self, name, operator.index(value))
        if self.deterministic is not None and not isinstance(self.deterministic, bool):
            raise ValueError(
                f"PlannerOptions.deterministic must be True, False or None, got {self.deterministic!r}"
            )
        if self.deterministic is False and self.buckets is not None:
            raise ValueError("PlannerOptions: buckets order the segments' sums, deterministic=False adds them "
                             "atomically; give one of them")  # fmt: skip
        if self.buckets is not None:  # buckets are the deterministic sum
            object.__setattr__(self, "deterministic", True)
        if self.kernels is not None:  # hashable, whatever sequence was given
            count = len(_winrs.variants())
            try:
                kernels = tuple(operator.index(k) for k in self.kernels if not isinstance(k, bool))
            except TypeError:
                kernels = ()
            if len(kernels) != 2 or not all(0 <= k < count for k in kernels):
                raise ValueError(f"PlannerOptions.kernels must be two indices into winrs_jax.variants() (0 to "
                                 f"{count - 1}), got {self.kernels!r}")  # fmt: skip
            object.__setattr__(self, "kernels", kernels)
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"PlannerOptions.mode must be one of {MODES} or None, got {self.mode!r}")
        if self.path is not None and self.path not in PATHS:
            raise ValueError(f"PlannerOptions.path must be one of {PATHS} or None, got {self.path!r}")
        if self.tf32_tiles is not None and not isinstance(self.tf32_tiles, bool):
            raise ValueError(f"PlannerOptions.tf32_tiles must be True, False or None, got {self.tf32_tiles!r}")


@dataclasses.dataclass(frozen=True)
class Phase:
    """One stride-1 piece of a strided or too wide layer (DWM's splits, ../shared/papers): the filter taps from
    offset in steps of the stride meet the input X[offset::stride] as a stride-1 problem with the same dY. (A
    dilated layer keeps its one stacked problem here.)"""

    offset: tuple[int, int]  # first filter tap of the piece in height and width
    plan: Plan  # its stride-1 plan, padding already applied; unsupported ones run on XLA


@dataclasses.dataclass(frozen=True)
class Plan:
    """How the filter gradient of one layer is computed. Print it to see the kernels, Z and the workspace."""

    supported: bool
    reason: str
    batch: int = 0
    input_hw: tuple[int, int] = (0, 0)
    out_grad_hw: tuple[int, int] = (0, 0)
    filter_hw: tuple[int, int] = (0, 0)
    channels: tuple[int, int] = (0, 0)  # (input, output)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    path: str = "fp32"
    reference: str = "fp32"  # the arithmetic XLA would use; sets the accuracy budget
    sm_count: int = 0
    smem_per_block: int = 0  # the target GPU's opt-in shared memory per block (bytes)
    forced_segments: int = 0
    forced_buckets: int = 0
    deterministic: bool | None = None  # PlannerOptions.deterministic as given
    forced_kernels: tuple[int, int] = (-1, -1)
    variant0: int = -1
    variant1: int = -1
    width0: int = 0
    segments: int = 0
    buckets: int = 0
    chain: int = 1  # kernel 0's segments per bucket, added in a fixed order
    atomic: bool = False  # segments (direct: splits) add into dW atomically (PlannerOptions.deterministic)
    baseline_segments: float = 0.0
    segment_rows: int = 0
    segment_shape: tuple[int, int] = (0, 0)
    # The batch cut into this many ranges of consecutive images, each segment covering one (the filter-window
    # tile's segments: whole rows of fewer images).
    image_parts: int = 1
    workspace_elems: int = 0
    predicted_seconds: float = 0.0
    # Kernel 0's work tile on the GPU, one thread block: (filter columns, output channels, input channels, filter
    # rows).
    work_tile: tuple[int, int, int, int] = (0, 0, 0, 0)
    # Hopper's TF32 tiles run the direct kernel (forced_kernels (0, 0), PlannerOptions.tf32_tiles).
    tf32_tiles: bool = False
    # Whether the kernels of this 2D problem can read a 3D layer's X by depth slice, in place (the direct
    # kernel's filter-row and filter-window tiles on tensor cores; cpp/winrs/operator.h).
    reads_depth_in_place: bool = False
    # A 3D layer read in place with this many depth taps packed into each problem's input channels (16-bit
    # layers of 16 channels: up to 4 taps side by side, so that the kernels' 64-channel blocks fill more; the
    # printout's kernels line describes the packed problem, its channels times this).
    depth_packing: int = 1
    # A 3D layer (paper section 3, Level 2): (input depth, output depth, filter depth), the depth padding,
    # stride and filter dilation. Each filter depth tap fd meets the padded input's depth slices
    # fd * dilation + stride * j (j < output depth) as the 2D problem described by the rest of the plan (strided
    # or dilated in height and width too), over batch N x output depth; the taps run stacked.
    depth: tuple[int, int, int] = (0, 0, 0)
    depth_pads: tuple[int, int] = (0, 0)
    depth_stride: int = 1
    depth_dilation: int = 1
    # A strided layer: its strides and its stride-1 pieces (the fields above then describe the whole layer).
    strides: tuple[int, int] = (1, 1)
    phases: tuple[Phase, ...] = ()
    # A dilated layer: its filter dilation; phases then holds the one stride-1 problem that all dh x dw output
    # phases run, stacked.
    dilation: tuple[int, int] = (1, 1)
    # A grouped layer (feature_group_count): everything above describes one group's problem; the groups run
    # stacked in one launch.
    groups: int = 1
    # A layer grouped over the batch (batch_group_count B): output-channel group b is computed from the b-th
    # N / B images of X (lax's grouping). Everything above describes the ungrouped layer (all N images and K
    # output channels), which runs with a block-diagonal dY (_partition.run_plan): B times the groups' work.
    batch_groups: int = 1
    # A layer of G feature groups with a few input channels per group, run as the dense layer of all C -> K
    # channels (G times the groups' work on the dense kernels) whose dW keeps its diagonal blocks: everything
    # above describes the dense layer (dense_groups_plan says when).
    dense_groups: int = 1
    # "winrs", or "direct" for a grouped layer with few input channels per group (winrs/grouped.h): each GPU
    # thread sums a tile of filter taps (rows, columns) of one output channel directly over the batch, rows and
    # columns, reading strides, dilation and padding in place; the sum is split into `splits` parts added at
    # the end. channels then hold one group's (input, output) channels.
    method: str = "winrs"
    tile: tuple[int, int] = (0, 0)
    spatial_tile: tuple[int, int] = (0, 0)  # output rows x columns summed per step
    tile_images: int = 1  # images side by side in a step (maps of 16 columns or less when streamed)
    # Direct depthwise layers of 1, 2, 4 or 8 output channels per input channel: the GPU streams X and dY row
    # by row through a small ring in shared memory (two 16-bit or one float32 channel per thread); other direct
    # layers stage each spatial tile in shared memory first.
    streams: bool = False
    # 16-bit 3x3 layers of 2 to 16 channels per group (as many out as in): streamed the same way, each group's
    # channel products summed on tensor cores; and 16-bit depthwise layers of 7x7 and larger filters at unit
    # steps (in tap tiles of 7x7), each channel's rows multiplied on tensor cores (the band kernel,
    # cpp/cuda/grouped_band.cuh).
    tensor_cores: bool = False
    splits: int = 0
    mode: str = "auto"
    choice: str = ""  # what computes the filter gradient, and the measurement behind it in mode "auto"
    runs_winrs: bool = False  # whether WinRS computes it (winrs_jax.plan sets it with `choice`)

    @property
    def kernels(self) -> tuple[Variant, ...]:
        if not self.supported:
            return ()
        table = variants()
        if self.variant1 == self.variant0 or self.width0 == self.out_grad_hw[1]:
            return (table[self.variant0],)
        return (table[self.variant0], table[self.variant1])

    @property
    def workspace_bytes(self) -> int:
        if self.method == "direct":
            return 4 * self.workspace_elems
        if self.phases:
            per_problem = (
                max(phase.plan.workspace_bytes for phase in self.phases) * self.dilation[0] * self.dilation[1]
            )
        else:
            per_problem = 4 * self.workspace_elems
        return per_problem * self.stacked_depth_problems * self.groups

    @property
    def depth_in_place(self) -> bool:
        """Whether a 3D layer's FFI call reads X in place by depth slice (_ffi.DEPTH_TARGET) instead of
        the depth-shifted copies: its 2D problem is a plain one (no groups or dilation in height and width, strides
        only where its kernels read them in place) whose kernels read X by depth slice. Under vmap the copies
        stay."""
        plain = (self.method == "winrs" and self.groups == 1 and self.dense_groups == 1 and self.batch_groups == 1
                 and self.dilation == (1, 1) and not self.phases)  # fmt: skip
        return bool(self.depth[2]) and plain and self.reads_depth_in_place

    @property
    def stacked_depth_problems(self) -> int:
        """The 2D problems a 3D layer's depth taps make: one per tap, or per depth_packing taps."""
        return -(-self.depth_taps // self.depth_packing)

    @property
    def depth_taps(self) -> int:
        """Stacked 2D problems of the layer: the filter depth of a 3D layer, else 1."""
        return self.depth[2] or 1

    def canonical_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """X, dY and dW of the layer in the canonical layouts N[D]HWC, N[D]HWK and K[D]HWC (of a grouped layer: C
        and K of all groups, dW's input channels of one group, as lax's filter)."""
        (h, w), (oh, ow), (fh, fw), (c, k) = self.input_hw, self.out_grad_hw, self.filter_hw, self.channels
        if self.batch_groups > 1:  # dY has N / B images
            x, dy, dw = dataclasses.replace(self, batch_groups=1).canonical_shapes()
            return x, (dy[0] // self.batch_groups, *dy[1:]), dw
        if self.dense_groups > 1:  # dW: one group's input channels
            x, dy, dw = dataclasses.replace(self, dense_groups=1).canonical_shapes()
            return x, dy, (*dw[:-1], dw[-1] // self.dense_groups)
        if self.groups > 1:
            x, dy, dw = dataclasses.replace(self, groups=1).canonical_shapes()
            g = self.groups
            return (*x[:-1], x[-1] * g), (*dy[:-1], dy[-1] * g), (dw[0] * g, *dw[1:])
        if not self.depth[2]:
            return (self.batch, h, w, c), (self.batch, oh, ow, k), (k, fh, fw, c)
        d, od, fd = self.depth
        n = self.batch // od
        return (n, d, h, w, c), (n, od, oh, ow, k), (k, fd, fh, fw, c)

    @property
    def filter_shape_ohwi(self) -> tuple[int, int, int, int]:
        return (self.channels[1], *self.filter_hw, self.channels[0])

    def ffi_attributes(self) -> dict[str, int]:
        """The planner's inputs, from which the handler derives this same plan (cpp/ffi/launch.h,
        cpp/ffi/grouped_call.h)."""
        top, bottom, left, right = self.pads
        if self.method == "direct":
            return dict(
                pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right, stride_h=self.strides[0],
                stride_w=self.strides[1], dilation_h=self.dilation[0], dilation_w=self.dilation[1],
                groups=self.groups, path=PATHS.index(self.path), sm_count=self.sm_count, splits=self.forced_segments,
                atomic=int(self.atomic),
            )  # fmt: skip
        return dict(
            pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right, stride_h=self.strides[0],
            stride_w=self.strides[1], path=PATHS.index(self.path), reference=PATHS.index(self.reference),
            sm_count=self.sm_count, segments=self.forced_segments, buckets=self.forced_buckets,
            variant0=self.forced_kernels[0], variant1=self.forced_kernels[1], atomic=int(self.atomic),
            smem_per_block=self.smem_per_block,
        )  # fmt: skip

    def __str__(self) -> str:
        if not self.supported:
            return f"WinRS plan: not used, XLA computes the filter gradient ({self.reason})"
        if self.depth[2]:
            return self._depth_text()
        if self.method == "direct":
            return self._direct_text()
        if self.batch_groups > 1:
            b, (_, k), dense = self.batch_groups, self.channels, dataclasses.replace(self, batch_groups=1)
            lines = str(dense).split("\n")
            n = dense.canonical_shapes()[0][0]
            grouped = (f"  grouped    {b} groups of the batch ({n // b} images -> {k // b} output channels each): run "
                       f"as the layer below with a block-diagonal dY (each image's dY zero outside its group's "
                       f"channels: {b}x the groups' work and dY's size)")  # fmt: skip
            return "\n".join([lines[0], grouped, *lines[1:]])
        if self.dense_groups > 1:
            (c, k), g = self.channels, self.dense_groups
            lines = str(dataclasses.replace(self, dense_groups=1)).split("\n")
            grouped = (f"  grouped    {g} groups of {c // g} -> {k // g} channels: run as the layer below of all "
                       f"{c} -> {k} channels, whose dW keeps its {g} diagonal blocks ({g}x the groups' work, on "
                       "the dense kernels)")  # fmt: skip
            return "\n".join([lines[0], grouped, *lines[1:]])
        if self.groups > 1:
            (c, k), g = self.channels, self.groups
            lines = str(dataclasses.replace(self, groups=1)).split("\n")
            grouped = (f"  grouped    {g} groups of {c} -> {k} channels: the problem below once per group, all "
                       "stacked in one launch (X and dY regrouped group-major: copies)")  # fmt: skip
            return "\n".join([lines[0], grouped, *lines[1:]])
        if self.phases:
            return self._phases_text()
        kernels = self.kernels
        lines = [
            *self._head(f" strides {self.strides} (read in place)" if self.strides != (1, 1) else ""),
            f"  arithmetic {self.path}: {PATH_DESCRIPTIONS[self.path]}; kernels within "
            f"{ACCURACY_FACTOR[self.reference]:g}x of the error of XLA's {self.reference} "
            f"arithmetic on an H100 (MARE <= {ACCURACY_BUDGET[self.reference][0]:.1e}, error on zero-mean data <= "
            f"{ACCURACY_BUDGET[self.reference][1]:.1e})",
            f"  kernels    {kernels[0].name} on columns [0, {self.width0})"
            + (f", {kernels[1].name} on [{self.width0}, {self.out_grad_hw[1]})" if len(kernels) > 1 else "")
            + self._tile_text(),
            self._segments_text(),
            "  workspace  0 bytes: the segments add into dW (float32) as they finish, on the GPU by atomic adds in "
            "no fixed order (not bitwise reproducible; PlannerOptions(deterministic=True) sums buckets in a fixed "
            "order)"
            if self.atomic
            else f"  workspace  {self.workspace_bytes} bytes: "
            + (f"{self.buckets} buckets of |dW| float32, the first is dW" if self.buckets > 1 else "dW alone")
            + (
                f"; segment s adds into bucket s mod {self.buckets}, {self.chain} segments one after another "
                "(serial split-K), ordered by semaphores"
                if self.chain > 1
                else "; one segment of kernel 0 per bucket"
            )
            + ("; the residual column adds into them after kernel 0" if len(kernels) > 1 else ""),
        ]
        return "\n".join(lines)

    def _segments_text(self) -> str:
        """The segment grid in words: rows x columns of dY, and image parts where the batch is cut."""
        parts, rows = self.image_parts, self.segment_rows
        cols = self.segments // (parts * rows)
        grid = f"{rows} x {cols} (rows x columns"
        if parts > 1:
            grid = f"{parts} x {rows} x {cols} (image parts x rows x columns"
        images = "" if parts == 1 else f", {self.batch // parts}-{-(-self.batch // parts)} images each"
        return (
            f"  segments   Z={self.segments} = {grid}; Z^={self.baseline_segments:g} for {self.sm_count} SMs"
            f"{_no_gpu_note(self.sm_count)}), segment {self.segment_shape[0]} x {self.segment_shape[1]}{images}; "
            "the last row and column take the remainder"
        )

    def _tile_text(self) -> str:
        """Kernel 0's GPU work tile in words (a thread block's share of dW)."""
        columns, out_c, in_c, rows = self.work_tile
        if not columns:
            return ""
        filter_columns = "1 filter column" if columns == 1 else f"{columns} filter columns"
        if rows > 1:
            filter_columns = f"{rows} filter rows x {filter_columns} (on Hopper)"
        text = f"; on the GPU a thread block computes {filter_columns} of {out_c} x {in_c} channels"
        if (columns, out_c) == (1, 128) and self.path in ("bf16", "fp16") and self.strides == (1, 1):
            text += (
                " (on Hopper, at batches of 32 or multiples of 64, a persistent kernel may take the layer instead: "
                "tiles of 3 filter columns (2 for filters two wide) of 128 x 128 channels on segments of its own "
                "where the sums are atomic and rows long, or of 1 column of 128 x 256 where the input channels "
                "fill pairs of 128)"
            )
        if self.tf32_tiles:
            tiles, channels = ("split-TF32 tiles", "128 x 64") if self.path == "tf32x3" else ("TF32 tiles", "128 x 128")
            text += (
                f" (on Hopper a persistent kernel takes it instead, {tiles} of 3 filter columns (2 for filters "
                f"two wide) of {channels} channels on wgmma, on segments of its own where the sums are atomic)"
            )
        return text

    def _depth_text(self) -> str:
        (d, od, fd), sd, dd = self.depth, self.depth_stride, self.depth_dilation
        flat = dataclasses.replace(self, depth=(0, 0, 0), depth_pads=(0, 0), depth_stride=1, depth_dilation=1)
        lines = str(flat).split("\n")
        geometry = (f", depth stride {sd}" if sd != 1 else "") + (f", depth dilation {dd}" if dd != 1 else "")
        slices = f"fd{f' * {dd}' if dd != 1 else ''} + {f'{sd} * ' if sd != 1 else ''}j"
        return "\n".join([
            lines[0],
            f"  3D layer   depth {d} -> {od}, filter depth {fd}, depth pads {self.depth_pads}{geometry}: each of the "
            f"{fd} filter depth taps fd meets the padded input's depth slices {slices} (j < {od}) as the 2D "
            f"problem below over N x output depth = {self.batch} images, all taps stacked (paper section 3, "
            "Level 2)",
            *lines[1:],
            "  copies     none: the kernels read X by depth slice, zeros in the depth padding"
            + (f", {self.depth_packing} taps packed side by side in each problem's {self.depth_packing} x "
               f"{self.channels[0]} input channels ({self.stacked_depth_problems} problem"
               f"{'s' if self.stacked_depth_problems > 1 else ''}; on the GPU the filter-row tile, a block per "
               "filter row: the window tile's TMA boxes cannot unpack them)"
               if self.depth_packing > 1 else "")
            + f" (under vmap: {fd} depth-shifted views of X made by XLA); workspace {self.workspace_bytes} bytes "
            "for all taps"
            if self.depth_in_place else
            f"  copies     {fd} depth-shifted views of X ({fd} x N x output depth images), made by XLA before the "
            f"call; workspace {self.workspace_bytes} bytes for all taps",
        ])  # fmt: skip

    def _head(self, geometry: str) -> list[str]:
        """The first two lines of every printout: what computes the gradient, and the layer's problem."""
        return [
            "WinRS plan"
            + (f": {self.choice} computes the filter gradient" if self.choice else "")
            # (a new user read the lines below as what runs)
            + (
                "; below, the WinRS plan it was measured against"
                if self.choice and self.mode == "auto" and not self.runs_winrs
                else ""
            ),
            f"  problem    N={self.batch} input {self.input_hw[0]}x{self.input_hw[1]}x{self.channels[0]} "
            f"out_grad {self.out_grad_hw[0]}x{self.out_grad_hw[1]}x{self.channels[1]} "
            f"filter {self.filter_hw[0]}x{self.filter_hw[1]}{geometry} pads(t,b,l,r)={self.pads}",
        ]

    def _direct_text(self) -> str:
        (c, k), g, (th, tw) = self.channels, self.groups, self.tile
        geometry = (f" strides {self.strides}" if self.strides != (1, 1) else "") + (
            f" dilation {self.dilation}" if self.dilation != (1, 1) else "")  # fmt: skip
        per_thread = "two channels" if PATH_DTYPES[self.path].itemsize == 2 else "one channel"
        # A streamed 1D layer's tile is one row of taps (a 2D map of one output row keeps its tap rows).
        along = "32 positions at a time" if self.streams and th == 1 else "row by row"
        reads = ("streamed row by row through shared memory on the GPU" if self.tensor_cores
                 else f"streamed {along} through shared memory on the GPU, {per_thread} per thread" if self.streams
                 else "staged in shared memory on the GPU")  # fmt: skip
        images = f" of each of {self.tile_images} images" if self.tile_images > 1 else ""
        arithmetic = ("tensor cores (mma.sync m16n8k16, float32 accumulators)" if self.tensor_cores
                      else "float32 FMA on CUDA cores")  # fmt: skip
        band = self.tensor_cores and c == 1  # depthwise on tensor cores
        summed = (f"each warp sums the {th}x{tw} taps of 16 channels, two X rows against the dY rows they meet, "
                  "32 pixels of a row at a time" if band
                  else f"each warp sums the {th}x{tw} taps of 16 output channels with their groups' input channels, "
                  "32 pixels of a row at a time" if self.tensor_cores
                  else f"each thread sums {th}x{tw} taps of one output channel over column chunks of 8")  # fmt: skip
        return "\n".join([
            *dataclasses.replace(self, channels=(c * g, k * g))._head(geometry),
            f"  grouped    {g} groups of {c} -> {k} channels"
            + (" (depthwise)" if c == 1 else "")
            + (": each channel's products on tensor cores, no GEMM across channels" if band
               else ": each group's products on tensor cores" if self.tensor_cores
               else ": direct sums, no GEMM across channels")
            + " (one launch; padding, strides and dilation read in place)",
            f"  arithmetic {arithmetic}, {PATH_DTYPES[self.path].name} inputs; at least as accurate as XLA's "
            f"{self.reference} arithmetic",
            f"  tiles      {summed}, {self.spatial_tile[0]}x{self.spatial_tile[1]} outputs{images} at a time "
            f"({reads}); the sum is split into {self.splits} parts",
            "  workspace  0 bytes: the parts add into dW (float32) as they finish, on the GPU by atomic adds in no "
            "fixed order (not bitwise reproducible; PlannerOptions(deterministic=True) adds them in a fixed order)"
            if self.atomic
            else f"  workspace  {self.workspace_bytes} bytes ({self.splits - 1} partial filter gradients of float32; "
            "the parts are added with compensation)",
        ])  # fmt: skip

    def _phases_text(self) -> str:
        if self.dilation != (1, 1):
            return self._dilation_text()
        sh, sw = self.strides
        split = (
            f"  pieces     {len(self.phases)} stride-1 pieces (DWM's split): piece (p, q) takes the filter taps "
            f"from (p, q) with steps ({sh}, {sw}) and meets X[p::{sh}, q::{sw}] (a copy) with the same dY; "
            "their dW interleave"
            if self.strides != (1, 1)
            else f"  pieces     {len(self.phases)} pieces of the filter's columns (its width has no kernels; DWM's "
            "filter split): piece (0, q) takes the taps from column q on and meets X shifted by q columns (a copy) "
            "with the same dY; their dW sit side by side"
        )
        lines = [*self._head(f" strides {self.strides}" if self.strides != (1, 1) else ""), split]
        for phase in self.phases:
            piece = phase.plan
            head = f"  piece {phase.offset}: taps {piece.filter_hw[0]}x{piece.filter_hw[1]} on "
            head += f"{piece.input_hw[0]}x{piece.input_hw[1]}: "
            if not piece.supported:
                lines.append(head + f"XLA ({piece.reason})")
                continue
            names = " + ".join(v.name for v in piece.kernels)
            lines.append(
                head + f"{names}, Z={piece.segments}, {piece.path}, workspace {piece.workspace_bytes} B"
            )
        return "\n".join(lines)

    def _dilation_text(self) -> str:
        (dh, dw), piece = self.dilation, self.phases[0].plan
        names = " + ".join(v.name for v in piece.kernels)
        return "\n".join([
            *self._head(f" dilation {self.dilation}"),
            f"  dilated    {dh * dw} stacked stride-1 problems, one per output phase (rows r::{dh}, columns "
            f"c::{dw} of dY, with X_padded[r::{dh}, c::{dw}]), each {piece.input_hw[0]}x{piece.input_hw[1]} with "
            f"the undilated filter; their dW summed",
            f"  kernels    {names}, Z={piece.segments}, {piece.path}, workspace {self.workspace_bytes} B",
        ])  # fmt: skip


def _no_gpu_note(sm_count: int) -> str:
    """Said where segments are counted for a GPU that is not there: the CPU executor runs the same plan."""
    if jax.default_backend() != "cpu":
        return ""
    h100 = ", an H100's" if sm_count == REFERENCE_SM_COUNT else ""
    return f"{h100}: no GPU here, the CPU runs the same segments"


# Opt-in shared memory per thread block by compute capability (CUDA's technical specifications), bytes; others
# (sm_86, sm_89, sm_120, unknown) the least of them.
REFERENCE_SMEM_PER_BLOCK: int = _winrs.hopper_smem_per_block  # the reference H100's (cpp/winrs/smem.h)
_SMEM_PER_BLOCK = {
    "8.0": 163 * 1024,
    "8.7": 163 * 1024,
    "9.0": REFERENCE_SMEM_PER_BLOCK,
    "10.0": REFERENCE_SMEM_PER_BLOCK,
    "10.3": REFERENCE_SMEM_PER_BLOCK,
}
_LEAST_SMEM_PER_BLOCK = 99 * 1024  # sm_86, sm_89, sm_120


def _first_gpu() -> Any:
    """The first visible GPU device, or None."""
    for backend in ("cuda", "gpu"):
        try:
            return jax.devices(backend)[0]
        except RuntimeError:
            continue
    return None


def default_smem_per_block() -> int:
    """Opt-in shared memory per block of the first visible GPU, else the reference H100's."""
    capability = getattr(_first_gpu(), "compute_capability", None)
    if capability is None:
        return REFERENCE_SMEM_PER_BLOCK
    return _SMEM_PER_BLOCK.get(str(capability), _LEAST_SMEM_PER_BLOCK)


# The TF32 tiles' throughput in direct-convolution TFLOP/s where a tile's 128 x 128 channels are all the
# layer's: 228-328 on the paper suite's 3x3-9x9 layers where they fit, 232-343 on the real suite's (H200,
# thirty-eighth stop; docs/benchmarks.md), taken near the low end. Channels past the layer's (96 of a tile's
# 128) are computed and dropped: the rate scales by the share used (5x5 128:28:96->128 ran 180).
TF32_TAP_TILES_TFLOPS = 240.0
# The split-TF32 tiles (float32 at HIGHEST): three products a pair on 128 x 64-channel tiles, a third of the
# tensor cores' TF32 rate at best: 101-129 TFLOP/s on seven 3x3-9x9 layers, forced (H200, thirty-ninth stop;
# docs/benchmarks.md), taken at the low end.
TF32X3_TAP_TILES_TFLOPS = 100.0
# A tile's output x input channels on each path (cpp/cuda/wgmma_tf32_taps.cuh, WgmmaTf32TapsConfig).
_TF32_TILE_CHANNELS = {"tf32": (128, 128), "tf32x3": (128, 64)}


# Launch-time switches that keep the TF32 tiles off (the kernels' launch reads them too): the tiles themselves,
# every wgmma kernel, the persistent block, its T-tap tiles.
_TF32_TILES_OFF = ("WINRS_JAX_TF32_TAPS", "WINRS_JAX_WGMMA", "WINRS_JAX_PERSISTENT", "WINRS_JAX_TAP_RUNS")


def default_tf32_tiles() -> bool:
    """Whether the first visible GPU runs the TF32 tiles: compute capability 9.0 with the package's sm_90a kernels
    built, unless one of _TF32_TILES_OFF is 0."""
    if any(os.environ.get(name, "")[:1] == "0" for name in _TF32_TILES_OFF) or not _winrs.wgmma_built:
        return False
    return _first_gpu_is_sm90()


@functools.cache
def _first_gpu_is_sm90() -> bool:
    """Whether the first visible GPU has compute capability 9.0 (asked once: every plan asks it)."""
    return str(getattr(_first_gpu(), "compute_capability", "")) == "9.0"


def tf32_tiles_seconds(
    batch: int, out_hw: tuple[int, int], in_c: int, out_c: int, filter_hw: tuple[int, int], path: str = "tf32"
) -> float:
    """The TF32 (or split-TF32, path "tf32x3") tiles' time by their rate and the share of their channels the
    layer uses."""
    flops = 2.0 * batch * out_hw[0] * out_hw[1] * out_c * filter_hw[0] * filter_hw[1] * in_c
    tile_out, tile_in = _TF32_TILE_CHANNELS[path]
    share = in_c / (tile_in * -(-in_c // tile_in)) * out_c / (tile_out * -(-out_c // tile_out))
    rate = TF32_TAP_TILES_TFLOPS if path == "tf32" else TF32X3_TAP_TILES_TFLOPS
    return flops / (rate * 1e12 * share)


def default_sm_count() -> int:
    """SMs of the first visible GPU, else the reference H100's."""
    count = getattr(_first_gpu(), "core_count", None)
    return count if isinstance(count, int) and count > 0 else REFERENCE_SM_COUNT


def _operand_precisions(precision: Any) -> tuple[lax.Precision, lax.Precision]:
    """lax's precision argument (or jax_default_matmul_precision when None) as (lhs, rhs) Precisions."""
    if precision is None:
        precision = jax.config.jax_default_matmul_precision
        if precision is None:
            return (lax.Precision.DEFAULT, lax.Precision.DEFAULT)
    pair = precision if isinstance(precision, tuple) else (precision, precision)
    out = []
    for p in pair:
        try:
            out.append(p if isinstance(p, lax.Precision) else lax.Precision(p))
        except (TypeError, ValueError):  # an algorithm preset: take the most accurate reading
            out.append(lax.Precision.HIGHEST)
    return (out[0], out[1])


def _float32_paths(precision: Any) -> tuple[tuple[str, ...], str]:
    """The float32 paths for `precision` and the arithmetic XLA uses for it on this platform (the reference).

    Measured on an H100 with jax 0.11.2 (tests/test_gpu.py checks it): XLA's GPU convolutions run float32 on
    TF32 tensor cores at DEFAULT and at HIGH precision (operands truncated to TF32: MARE about 7e-4 to 9e-4 in
    the paper's protocol) and in FP32 only at HIGHEST (about 1e-7); XLA's CPU convolutions always run in FP32.
    Any path at least as accurate as the reference may run, and the cost model picks among them; the CPU
    emulates split TF32 at three times the cost, so it runs FP32."""
    if jax.default_backend() != "gpu":
        return ("fp32",), "fp32"
    if lax.Precision.HIGHEST not in _operand_precisions(precision):
        return ("tf32", "fp32", "tf32x3"), "tf32"
    return ("fp32", "tf32x3"), "fp32"


def resolve_paths(dtype: Any, precision: Any, options: PlannerOptions) -> tuple[tuple[str, ...], str, str]:
    """(candidate paths, reference path, "") for an input dtype and precision, or ((), "", reason) when WinRS
    has no kernels for the dtype. A path forced by options is its own reference, unless it is one of the paths
    the precision asks for anyway (fp32 or tf32x3 at HIGHEST): then the accuracy promise stays the precision's."""
    dtype = np.dtype(dtype)
    allowed = _DTYPE_PATHS.get(dtype)
    if allowed is None:
        return (), "", f"dtype {dtype.name}: WinRS has float32, bfloat16 and float16 kernels"
    if options.path is not None:
        if options.path not in PATHS:
            raise ValueError(f"PlannerOptions.path must be one of {PATHS}, got {options.path!r}")
        if options.path not in allowed:
            raise ValueError(
                f"PlannerOptions.path {options.path!r} cannot run {dtype.name} inputs; use {allowed}"
            )
        natural, reference = _float32_paths(precision) if dtype == np.float32 else (allowed, allowed[0])
        return (options.path,), reference if options.path in natural else options.path, ""
    if dtype == np.float32:
        paths, reference = _float32_paths(precision)
        return paths, reference, ""
    return allowed, allowed[0], ""


def _unsupported(spec: ConvSpec, dtype: np.dtype, direct: bool) -> str:
    """Why WinRS cannot compute this layer's filter gradient, or "" (`direct`: by the direct grouped kernels,
    which take strides and dilation together)."""
    preferred = spec.preferred_element_type
    if preferred is not None and preferred not in (np.dtype(np.float32), dtype):  # (None == float64 in numpy)
        return f"preferred_element_type {preferred}: WinRS produces the filter gradient in float32 or {dtype}"
    if any(d != 1 for d in spec.lhs_dilation):
        return f"lhs dilation {spec.lhs_dilation} (transposed convolution)"
    # Height and width (a 3D layer's depth takes both in its stacking of depth slices).
    plane_strides, plane_dilation = spec.window_strides[-2:], spec.rhs_dilation[-2:]
    if any(d != 1 for d in plane_dilation) and any(s != 1 for s in plane_strides) and not direct:
        return f"rhs dilation {spec.rhs_dilation} (dilated filter) with strides {spec.window_strides}"
    if len(spec.window_strides) not in (1, 2, 3):
        return f"{len(spec.window_strides)}D convolution: WinRS handles 1D, 2D and 3D"
    return ""


# Paths of equal accuracy whose predicted times lie within this factor are all measured in mode "auto"
# (choice.py): the cost model called fp32 and split TF32 ties within 2% on the paper suite's HIGHEST layers
# where the H100 measured split TF32 9-37% faster on every one of them (docs/benchmarks.md, 2026-11-23).
PATH_CANDIDATE_BAND = 1.25


def with_path(options: PlannerOptions | None, path: str) -> PlannerOptions:
    """`options` with the arithmetic path forced (the measured choice among path_alternatives)."""
    return dataclasses.replace(options or PlannerOptions(), path=path)


def path_alternatives(
    lhs_shape: tuple[int, ...],
    rhs_shape: tuple[int, ...],
    dtype: np.dtype,
    spec: ConvSpec,
    options: PlannerOptions | None,
    plan: Plan,
) -> tuple[Plan, ...]:
    """Plans of the layer on the other paths its dtype and precision allow (same accuracy promise), predicted
    within PATH_CANDIDATE_BAND of `plan`; none where options force the path."""
    options = options or PlannerOptions()
    if not plan.supported or options.path is not None or plan.method != "winrs" or plan.phases:
        return ()  # a strided or dilated layer's pieces pick their paths one by one
    paths, _, _ = resolve_paths(dtype, spec.precision, options)
    out = []
    for path in paths:
        if path == plan.path:
            continue
        other = make_plan(lhs_shape, rhs_shape, dtype, spec, with_path(options, path))
        if other.supported and other.predicted_seconds <= PATH_CANDIDATE_BAND * plan.predicted_seconds:
            out.append(other)
    return tuple(out)


def make_plan(
    lhs_shape: tuple[int, ...],
    rhs_shape: tuple[int, ...],
    dtype: np.dtype,
    spec: ConvSpec,
    options: PlannerOptions | None = None,
) -> Plan:
    """Plans the filter gradient of a validated convolution, or says why WinRS does not handle it."""
    options = options or PlannerOptions()
    if spec.xla_only:
        return Plan(supported=False, reason=spec.xla_only)
    symbolic = [d for d in (*lhs_shape, *rhs_shape) if not isinstance(d, int | np.integer)]
    if symbolic:  # jax.export with shape polymorphism: the plan needs every size
        return Plan(supported=False, reason=f"symbolic sizes ({', '.join(map(str, symbolic))}): WinRS plans from "
                                            "concrete shapes")  # fmt: skip
    paths, reference, reason = resolve_paths(dtype, spec.precision, options)
    groups = spec.feature_group_count
    dn = spec.dimension_numbers
    in_c = lhs_shape[dn.lhs_spec[1]]
    group_path = _direct_path(dtype, options) if groups > 1 else None
    direct = group_path if in_c // groups <= DIRECT_MAX_GROUP_CHANNELS else None
    reason = reason or _unsupported(spec, np.dtype(dtype), direct is not None)
    if reason:
        return Plan(supported=False, reason=reason)
    if spec.batch_group_count > 1:
        # Runs as the ungrouped layer (all N images, all K output channels) with a block-diagonal dY (lax allows
        # no feature groups here).
        b = spec.batch_group_count
        dense = make_plan(
            lhs_shape, rhs_shape, dtype, dataclasses.replace(spec, batch_group_count=1), options
        )
        if not dense.supported:
            return dataclasses.replace(dense, reason=f"{b} batch groups: {dense.reason}")
        # (A 3D one runs its depth taps as copies, then the batch groups in each: run_plan.)
        return dataclasses.replace(dense, batch_groups=b, reads_depth_in_place=False, depth_packing=1)
    if group_path in ("bf16", "fp16") and in_c // groups <= TENSOR_CORE_MAX_GROUP_CHANNELS:
        on_tensor_cores = _layer_plan(lhs_shape, rhs_shape, spec, group_path, paths, reference, options)
        if on_tensor_cores.tensor_cores:
            return on_tensor_cores
    if groups > 1 and dense_groups_plan(in_c, groups, lhs_shape, rhs_shape, dn, dtype):
        rhs_dense = list(rhs_shape)
        rhs_dense[dn.rhs_spec[1]] = in_c
        dense = make_plan(lhs_shape, tuple(rhs_dense), dtype, dataclasses.replace(spec, feature_group_count=1),
                          options)  # fmt: skip
        if dense.supported:
            return dataclasses.replace(dense, dense_groups=groups)
    if groups > 1 and direct is None:
        # G independent problems of C / G -> K / G channels, stacked in one launch.
        lhs_one, rhs_one = list(lhs_shape), list(rhs_shape)
        lhs_one[dn.lhs_spec[1]] //= groups
        rhs_one[dn.rhs_spec[0]] //= groups
        # (Stacked problems share a launch, which Hopper's TF32 tiles do not take: _partition.)
        one = make_plan(tuple(lhs_one), tuple(rhs_one), dtype, dataclasses.replace(spec, feature_group_count=1),
                        dataclasses.replace(options, tf32_tiles=False))  # fmt: skip
        if not one.supported:
            return dataclasses.replace(one, reason=f"{groups} groups: {one.reason}")
        return dataclasses.replace(one, groups=groups, predicted_seconds=one.predicted_seconds * groups)
    return _layer_plan(lhs_shape, rhs_shape, spec, direct, paths, reference, options)


def _layer_plan(
    lhs_shape: tuple[int, ...], rhs_shape: tuple[int, ...], spec: ConvSpec, direct: str | None,
    paths: tuple[str, ...], reference: str, options: PlannerOptions,
) -> Plan:  # fmt: skip
    """The plan of a 1D, 2D or 3D layer as 2D problems: the direct grouped kernels' on `direct`'s path, else
    WinRS's."""
    dn, groups, rank = spec.dimension_numbers, spec.feature_group_count, len(lhs_shape) - 2
    in_c = lhs_shape[dn.lhs_spec[1]]
    batch = lhs_shape[dn.lhs_spec[0]]
    out_c = rhs_shape[dn.rhs_spec[0]]
    in_hw = [lhs_shape[d] for d in dn.lhs_spec[2:]]
    filter_hw = [rhs_shape[d] for d in dn.rhs_spec[2:]]
    pads = list(spec.padding)
    depth, depth_pads, depth_stride, depth_dilation = (0, 0, 0), (0, 0), 1, 1
    strides, dilation = list(spec.window_strides), list(spec.rhs_dilation)
    if rank == 1:  # a 1D convolution is a 2D one of height 1
        in_hw, filter_hw, pads, strides = [1, *in_hw], [1, *filter_hw], [(0, 0), *pads], [1, *strides]
        dilation = [1, *dilation]
    elif rank == 3:  # each filter depth tap is a 2D problem over batch x output depth (Level 2)
        (d, *in_hw), (fd, *filter_hw), (depth_pads, *pads) = in_hw, filter_hw, pads
        (depth_stride, *strides), (depth_dilation, *dilation) = strides, dilation
        out_depth = (d + depth_pads[0] + depth_pads[1] - depth_dilation * (fd - 1) - 1) // depth_stride + 1
        depth = (d, out_depth, fd)
        batch *= out_depth
        if fd > 1:  # depth taps stacked in one launch, in place or on copies: no TF32 tiles (_partition)
            options = dataclasses.replace(options, tf32_tiles=False)
    flat = _plan_2d(batch, in_hw, in_c, out_c, filter_hw, pads, strides, dilation, groups, direct, paths,
                    reference, options, depth[2] or 1)  # fmt: skip
    if not flat.supported or not depth[2]:
        return flat
    taps = 1 if flat.method == "direct" else depth[2]  # a direct plan covers the taps of its call
    if dataclasses.replace(flat, depth=depth).depth_in_place:
        # X read in place: the taps share one launch, which the plan fills with all of them (the handler plans
        # the same, _ffi.DEPTH_TARGET); where that plan would not read in place, the copies' plan. Layers
        # of 16 input channels pack their taps into each problem's channels where that plan reads in place.
        packed = depth_packing(flat.channels[0], taps, flat.path, flat.strides != (1, 1))
        for packing in dict.fromkeys((packed, 1)):  # packed where that plan reads in place, else unpacked
            shared = plan_depth_in_place(flat.batch, flat.input_hw, *flat.channels, flat.filter_hw, flat.pads,
                                         flat.path, flat.reference, options, taps, packing, flat.strides)  # fmt: skip
            if shared.reads_depth_in_place:
                break
        if shared.reads_depth_in_place:
            taps = -(-taps // packing)
            flat = dataclasses.replace(shared, channels=flat.channels, depth_packing=packing)
        else:
            flat = dataclasses.replace(flat, reads_depth_in_place=False)
    return dataclasses.replace(
        flat,
        depth=depth,
        depth_pads=tuple(depth_pads),
        depth_stride=depth_stride,
        depth_dilation=depth_dilation,
        predicted_seconds=flat.predicted_seconds * taps,
    )


# A launch's stacked problems are its blockIdx.y: a 3D layer read in place takes its depth taps in one launch.
MAX_DEPTH_PROBLEMS = 65535


def plan_depth_in_place(
    batch: int, input_hw: tuple[int, int], in_c: int, out_c: int, filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int], path: str, reference: str, options: PlannerOptions, taps: int, packing: int,
    strides: tuple[int, int] = (1, 1),
) -> Plan:  # fmt: skip
    """The plan of the 2D problem of a 3D layer whose X the kernels read in place: `packing` of its `taps` depth
    taps (of in_c channels each) per problem, all problems in one launch, as the _ffi.DEPTH_TARGET handler
    derives it. reads_depth_in_place is False where its kernels cannot, and beyond one launch's problems (the
    copies' launches split them). Without Hopper's TF32 tiles: their maps take X as the batch of dY's images, not
    by depth slice (the launch refuses them there too, cuda/wgmma_tf32_taps.cuh)."""
    problems = -(-taps // packing)
    options = dataclasses.replace(options, tf32_tiles=False)
    plan = plan_canonical(batch, input_hw, in_c * packing, out_c, filter_hw, pads, path, reference, options,
                          problems=min(problems, MAX_DEPTH_PROBLEMS), strides=strides)  # fmt: skip
    return plan if problems <= MAX_DEPTH_PROBLEMS else dataclasses.replace(plan, reads_depth_in_place=False)


def depth_packing(in_c: int, taps: int, path: str, strided: bool = False) -> int:
    """Depth taps a 3D layer read in place packs into each problem's input channels: up to 4 for 16-bit layers of
    16 input channels (the kernels' 64-channel blocks would run a sixteenth full), as few problems as that allows
    with the taps spread evenly over them (5 taps: 3 and 2, not 4 and 1); 2 for 32 channels where the layer is
    strided in height or width (the filter-row tile runs either way); else 1. (32 channels packed on the
    filter-row tile ran slower than unpacked on the window tile: docs/benchmarks.md, twenty-seventh stop.)"""
    if path not in ("bf16", "fp16") or in_c not in (16, 32) or taps < 2 or (in_c == 32 and not strided):
        return 1
    problems = -(-taps // (64 // in_c))
    return -(-taps // problems)


def _plan_2d(
    batch: int, in_hw: list[int], in_c: int, out_c: int, filter_hw: list[int], pads: list[tuple[int, int]],
    strides: list[int], dilation: list[int], groups: int, direct: str | None, paths: tuple[str, ...],
    reference: str, options: PlannerOptions, taps: int,
) -> Plan:  # fmt: skip
    """The plan of a 2D layer, or of the 2D problem of each of a 3D layer's `taps` filter depth taps (the direct
    grouped kernels plan all taps of one call together)."""
    pads_flat = (pads[0][0], pads[0][1], pads[1][0], pads[1][1])
    if direct is not None:
        return plan_grouped(batch, (in_hw[0], in_hw[1]), in_c, out_c, (filter_hw[0], filter_hw[1]), pads_flat,
                            (strides[0], strides[1]), (dilation[0], dilation[1]), groups, direct, reference,
                            options, taps)  # fmt: skip
    if dilation != [1, 1]:
        return _dilated_plan(batch, tuple(in_hw), in_c, out_c, tuple(filter_hw), pads_flat, tuple(dilation), paths,
                             reference, options)  # fmt: skip
    plans = [plan_canonical(batch, (in_hw[0], in_hw[1]), in_c, out_c, (filter_hw[0], filter_hw[1]), pads_flat,
                            path, reference, options, strides=(strides[0], strides[1]))
             for path in paths]  # fmt: skip
    supported = [p for p in plans if p.supported]
    best = min(supported, key=lambda p: p.predicted_seconds) if supported else plans[0]
    if strides != [1, 1] and not supported:  # strides the kernels do not read in place: DWM's pieces
        return _strided_plan(batch, tuple(in_hw), in_c, out_c, tuple(filter_hw), pads_flat, tuple(strides), paths,
                             reference, options)  # fmt: skip
    if not best.supported and filter_hw[1] > 1:  # a width without kernels: split it into pieces
        pieces = _strided_plan(batch, tuple(in_hw), in_c, out_c, tuple(filter_hw), pads_flat, (1, 1), paths,
                               reference, options)  # fmt: skip
        return pieces if pieces.supported else best
    return best


# Grouped layers of 2 to DENSE_MAX_GROUP_CHANNELS input channels per group and at most DENSE_MAX_GROUPS groups run
# as the dense layer of all channels (Plan.dense_groups): G times the work, but on the dense kernels. Measured on an
# H100 (tools/tune.py grouped, 2026-11-24; ms on the direct kernels or stacked groups, then as the dense layer):
# bf16 3x3 64:56:128 g32 1.385 / 0.127 (XLA 0.144), g64 0.738 / 0.127 (XLA 0.760), 64:28:256 g32 1.285 / 0.128,
# 128:28:192 g24 1.94 / 0.362, 32:56:256 g64 1.366 / 0.266; 16 channels per group: 64:56:128 g8 0.568 / 0.128,
# 64:14:512 g32 0.198 / 0.149; 32 channels: 64:7:1024 g32 0.078 / 0.174 (so not taken). float32 DEFAULT: 3x3
# 64:56:128 g32 0.942 / 0.478, 64:28:256 g32 0.918 / 0.475; HIGHEST 0.950 / 0.836, 0.934 / 0.898. The dense dW
# (float32) may take at most DENSE_MAX_DW_SHARE of X's and dY's bytes.
DENSE_MAX_GROUP_CHANNELS = 16
DENSE_MAX_GROUPS = 64
DENSE_MAX_DW_SHARE = 1.0


def dense_groups_plan(
    in_c: int, groups: int, lhs_shape: tuple[int, ...], rhs_shape: tuple[int, ...], dn: Any, dtype: Any
) -> bool:
    """Whether a layer of `groups` feature groups runs as the dense layer of all its channels (above)."""
    group_c = in_c // groups
    if not 2 <= group_c <= DENSE_MAX_GROUP_CHANNELS or groups > DENSE_MAX_GROUPS:
        return False
    out_c = rhs_shape[dn.rhs_spec[0]]
    filter_elems = int(np.prod([rhs_shape[d] for d in dn.rhs_spec[2:]]))
    batch, spatial = lhs_shape[dn.lhs_spec[0]], int(np.prod([lhs_shape[d] for d in dn.lhs_spec[2:]]))
    # X's and dY's bytes, dY counted at X's spatial size (exact at stride 1, an over-count for strided layers).
    activations = np.dtype(dtype).itemsize * batch * spatial * (in_c + out_c)
    return 4 * out_c * in_c * filter_elems <= DENSE_MAX_DW_SHARE * activations


# The most input channels per group the direct grouped kernels take (depthwise layers have 1, ResNeXt's 4 to
# 32); wider groups run WinRS's GEMMs, stacked. The measured choice still compares either with XLA.
DIRECT_MAX_GROUP_CHANNELS = 8
# ... and on tensor cores (Plan.tensor_cores), which the planner prefers to the dense layer of all channels.
TENSOR_CORE_MAX_GROUP_CHANNELS = 16
# The path of each input dtype on the direct kernels: its storage type, with float32 FMA arithmetic.
_DIRECT_PATHS = {
    np.dtype(np.float32): "fp32",
    np.dtype(jax.numpy.bfloat16): "bf16",
    np.dtype(np.float16): "fp16",
}


def _direct_path(dtype: Any, options: PlannerOptions) -> str | None:
    """The direct grouped kernels' path for the dtype, or None where the options force WinRS's kernels (a
    tensor-core path or a kernel pair)."""
    path = _DIRECT_PATHS.get(np.dtype(dtype))
    if path is None or options.kernels is not None or options.path not in (None, path):
        return None
    return path


def plan_grouped(
    batch: int, input_hw: tuple[int, int], in_c: int, out_c: int, filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int], strides: tuple[int, int], dilation: tuple[int, int], groups: int, path: str,
    reference: str, options: PlannerOptions | None = None, stacked: int = 1,
) -> Plan:  # fmt: skip
    """The direct plan of a grouped 2D layer (cpp/winrs/grouped.h; X: N x H x W x in_c with all groups), as the
    handler derives it for `stacked` problems in one call. Its splits add into dW atomically unless
    PlannerOptions.deterministic (or XLA_FLAGS) asks for a fixed order."""
    options = options or PlannerOptions()
    atomic = not deterministic_sum(options.deterministic)
    return _plan_grouped(batch, input_hw, in_c, out_c, filter_hw, pads, strides, dilation, groups, path, reference,
                         options, stacked, atomic)  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _plan_grouped(
    batch: int, input_hw: tuple[int, int], in_c: int, out_c: int, filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int], strides: tuple[int, int], dilation: tuple[int, int], groups: int, path: str,
    reference: str, options: PlannerOptions, stacked: int, atomic: bool,
) -> Plan:  # fmt: skip
    top, bottom, left, right = pads
    out_hw = tuple(
        (size + before + after - (taps - 1) * d - 1) // s + 1
        for size, before, after, taps, s, d in zip(
            input_hw, (top, left), (bottom, right), filter_hw, strides, dilation, strict=True
        )
    )
    sm_count = options.sm_count or default_sm_count()
    raw = _winrs.make_grouped_plan(
        batch=batch, in_h=input_hw[0], in_w=input_hw[1], in_c=in_c, out_h=out_hw[0], out_w=out_hw[1], out_c=out_c,
        filter_h=filter_hw[0], filter_w=filter_hw[1], groups=groups, pad_top=top, pad_bottom=bottom,
        pad_left=left, pad_right=right, stride_h=strides[0], stride_w=strides[1], dilation_h=dilation[0],
        dilation_w=dilation[1], path=PATHS.index(path), sm_count=sm_count, splits=options.segments or 0,
        stacked=stacked, atomic=atomic,
    )  # fmt: skip
    if not raw["supported"]:
        return Plan(
            supported=False, reason=f"{groups} groups: {raw['reason']}", path=path, reference=reference
        )
    return Plan(
        supported=True, reason="", batch=batch, input_hw=input_hw, out_grad_hw=(out_hw[0], out_hw[1]),
        filter_hw=filter_hw, channels=(in_c // groups, out_c // groups), pads=pads, path=path, reference=reference,
        sm_count=sm_count, forced_segments=options.segments or 0, workspace_elems=raw["workspace_elems"],
        predicted_seconds=raw["predicted_seconds"], strides=strides, dilation=dilation, groups=groups,
        method="direct", tile=raw["tile"], spatial_tile=raw["spatial_tile"], splits=raw["splits"],
        streams=raw["streams"], tile_images=raw["tile_images"], tensor_cores=raw["tensor_cores"],
        deterministic=options.deterministic, atomic=raw["atomic"],
    )  # fmt: skip


def _strided_plan(
    batch: int, in_hw: tuple[int, int], in_c: int, out_c: int, filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int], strides: tuple[int, int], paths: tuple[str, ...], reference: str,
    options: PlannerOptions,
) -> Plan:  # fmt: skip
    """A strided layer, or one whose filter width has no kernels, as stride-1 pieces (DWM,
    ../shared/papers/dwm-decomposable-winograd-aaai20.md): the taps a = p + s i of each axis meet the phase input
    X_p[j] = X_padded[s j + p] at j = oh + i; a phase whose width has no kernels (11, 13, 31, ...) is split
    further into chunks of at most 8 taps, each a piece that starts at its first tap."""
    (sh, sw), (fh, fw) = strides, filter_hw
    out_hw = ((in_hw[0] + pads[0] + pads[1] - fh) // sh + 1, (in_hw[1] + pads[2] + pads[3] - fw) // sw + 1)

    def piece(taps: tuple[int, int]) -> Plan:
        sub_hw = (out_hw[0] + taps[0] - 1, out_hw[1] + taps[1] - 1)
        plans = [plan_canonical(batch, sub_hw, in_c, out_c, taps, (0, 0, 0, 0), path, reference, options)
                 for path in paths]  # fmt: skip
        supported = [plan for plan in plans if plan.supported]
        if supported:
            return min(supported, key=lambda plan: plan.predicted_seconds)
        # Keep the shapes for the printout and the XLA piece.
        return dataclasses.replace(plans[0], batch=batch, input_hw=sub_hw, out_grad_hw=out_hw, filter_hw=taps,
                                   channels=(in_c, out_c))  # fmt: skip

    phases = []
    for p in range(min(sh, fh)):
        for q in range(min(sw, fw)):
            taps = (-(-(fh - p) // sh), -(-(fw - q) // sw))
            whole = piece(taps)
            if whole.supported or taps[1] == 1:
                phases.append(Phase((p, q), whole))
                continue
            first = 0
            for width in _width_chunks(taps[1]):
                phases.append(Phase((p, q + sw * first), piece((taps[0], width))))
                first += width
    runs = [phase.plan for phase in phases if phase.plan.supported]
    if not runs:
        sizes = sorted({phase.plan.filter_hw for phase in phases})
        return Plan(supported=False, reason=f"strides {strides}: the {filter_hw[0]}x{filter_hw[1]} filter splits "
                                            f"into stride-1 pieces of {', '.join(f'{h}x{w}' for h, w in sizes)} "
                                            f"taps, and WinRS has no kernels for any of them "
                                            f"({phases[0].plan.reason})")  # fmt: skip
    return Plan(
        supported=True, reason="", batch=batch, input_hw=in_hw, out_grad_hw=out_hw, filter_hw=filter_hw,
        channels=(in_c, out_c), pads=pads, path=runs[0].path, reference=reference, sm_count=runs[0].sm_count,
        smem_per_block=runs[0].smem_per_block, forced_segments=runs[0].forced_segments,
        forced_buckets=runs[0].forced_buckets, deterministic=runs[0].deterministic,
        forced_kernels=runs[0].forced_kernels, tf32_tiles=any(plan.tf32_tiles for plan in runs),
        predicted_seconds=sum(plan.predicted_seconds for plan in runs), strides=strides, phases=tuple(phases),
    )  # fmt: skip


def _width_chunks(width: int) -> list[int]:
    """Widths of at most 8 taps, none 1 (which has no kernels), that add up to `width`."""
    chunks = []
    while width > 0:
        chunk = min(width, 8)
        if width - chunk == 1:
            chunk -= 1
        chunks.append(chunk)
        width -= chunk
    return chunks


def _dilated_plan(
    batch: int, in_hw: tuple[int, int], in_c: int, out_c: int, filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int], dilation: tuple[int, int], paths: tuple[str, ...], reference: str,
    options: PlannerOptions,
) -> Plan:  # fmt: skip
    """A dilated layer as dh x dw stacked stride-1 problems with the undilated filter (the polyphase split on the
    output): the dY rows oh = d m + r meet X_r[j] = X_padded[d j + r] at j = m + a. The phases' shapes differ by a
    row or column at most; dY is padded with zeros to the largest so that all run stacked, their dW summed."""
    (dh, dw), (fh, fw) = dilation, filter_hw
    out_hw = (in_hw[0] + pads[0] + pads[1] - (fh - 1) * dh, in_hw[1] + pads[2] + pads[3] - (fw - 1) * dw)
    rows, cols = -(-out_hw[0] // dh), -(-out_hw[1] // dw)
    sub_hw = (rows + fh - 1, cols + fw - 1)
    if dh * dw > 1:  # the phases stacked in one launch: no TF32 tiles (_partition)
        options = dataclasses.replace(options, tf32_tiles=False)
    plans = [plan_canonical(batch, sub_hw, in_c, out_c, filter_hw, (0, 0, 0, 0), path, reference, options)
             for path in paths]  # fmt: skip
    supported = [plan for plan in plans if plan.supported]
    if not supported:
        return Plan(supported=False, reason=f"rhs dilation {dilation}: {plans[0].reason}")
    piece = min(supported, key=lambda plan: plan.predicted_seconds)
    return Plan(
        supported=True, reason="", batch=batch, input_hw=in_hw, out_grad_hw=out_hw, filter_hw=filter_hw,
        channels=(in_c, out_c), pads=pads, path=piece.path, reference=reference, sm_count=piece.sm_count,
        smem_per_block=piece.smem_per_block, forced_segments=piece.forced_segments, forced_buckets=piece.forced_buckets,
        deterministic=piece.deterministic, forced_kernels=piece.forced_kernels, tf32_tiles=piece.tf32_tiles,
        predicted_seconds=piece.predicted_seconds * dh * dw, dilation=dilation, phases=(Phase((0, 0), piece),),
    )  # fmt: skip


_XLA_DETERMINISM_FLAGS = ("--xla_gpu_deterministic_ops", "--xla_gpu_exclude_nondeterministic_ops")


def xla_deterministic_ops() -> bool:
    """Whether XLA_FLAGS asks XLA for deterministic GPU ops (read per plan, as XLA reads it per process)."""
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = flag.partition("=")
        if name in _XLA_DETERMINISM_FLAGS and value.lower() in ("", "true", "1"):
            return True
    return False


def deterministic_sum(deterministic: bool | None) -> bool:
    """PlannerOptions.deterministic resolved: by default the segments add atomically, unless XLA_FLAGS asks XLA
    for deterministic ops."""
    return xla_deterministic_ops() if deterministic is None else deterministic


def plan_canonical(
    batch: int,
    input_hw: tuple[int, int],
    in_c: int,
    out_c: int,
    filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int],
    path: str,
    reference: str,
    options: PlannerOptions | None = None,
    problems: int = 1,
    strides: tuple[int, int] = (1, 1),
) -> Plan:
    """The plan of a 2D problem in the kernels' layout (X: N x H x W x C), no groups, on one arithmetic path, with
    kernels within the accuracy budget of the reference arithmetic (ACCURACY_BUDGET). Cached: a layer is planned
    once per shape, also when each shard plans its own part. `problems`: a 3D layer's filter depth taps read in
    place, which share the launch (the handler counts them the same way). `strides` other than 1: only where the
    direct kernel's filter-row tile reads them in place (cpp/winrs/variants.h, strided_taps), else unsupported
    (the caller splits the layer into DWM's stride-1 pieces)."""
    options = options or PlannerOptions()
    if options.tf32_tiles is None:
        options = dataclasses.replace(options, tf32_tiles=default_tf32_tiles())
    atomic = not deterministic_sum(options.deterministic)
    return _plan_canonical(batch, input_hw, in_c, out_c, filter_hw, pads, path, reference, options, atomic,
                           problems, (int(strides[0]), int(strides[1])))  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _plan_canonical(
    batch: int,
    input_hw: tuple[int, int],
    in_c: int,
    out_c: int,
    filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int],
    path: str,
    reference: str,
    options: PlannerOptions,
    atomic: bool,
    problems: int = 1,
    strides: tuple[int, int] = (1, 1),
) -> Plan:
    top, bottom, left, right = pads
    out_hw = ((input_hw[0] + top + bottom - filter_hw[0]) // strides[0] + 1,
              (input_hw[1] + left + right - filter_hw[1]) // strides[1] + 1)  # fmt: skip
    sm_count = options.sm_count or default_sm_count()
    smem_per_block = options.smem_per_block or default_smem_per_block()
    forced_segments = options.segments or 0
    forced_buckets = options.buckets or 0
    forced_kernels = tuple(options.kernels) if options.kernels else (-1, -1)

    def make(kernels: tuple[int, ...]) -> dict[str, Any]:
        return _winrs.make_plan(
            batch=batch, in_h=input_hw[0], in_w=input_hw[1], in_c=in_c, out_h=out_hw[0], out_w=out_hw[1],
            out_c=out_c, filter_h=filter_hw[0], filter_w=filter_hw[1], pad_top=top, pad_bottom=bottom,
            pad_left=left, pad_right=right, path=PATHS.index(path), reference=PATHS.index(reference),
            sm_count=sm_count, segments=forced_segments, buckets=forced_buckets, variant0=kernels[0],
            variant1=kernels[1], atomic=atomic, problems=problems, stride_h=strides[0], stride_w=strides[1],
            smem_per_block=smem_per_block,
        )  # fmt: skip

    raw = make(forced_kernels)
    # On Hopper the TF32 tiles take the direct kernel's plan where they fit: the planner's kernels unless the
    # tiles' rate makes them faster. (The plan forces the pair (0, 0), which the handler plans again.)
    tiles = False
    if raw["supported"] and path in _TF32_TILE_CHANNELS and options.tf32_tiles and options.kernels is None:
        direct = make((0, 0))
        seconds = tf32_tiles_seconds(batch, out_hw, in_c, out_c, filter_hw, path)
        if direct["tf32_tap_tiles"] and seconds < raw["predicted_seconds"]:
            raw, forced_kernels, tiles = {**direct, "predicted_seconds": seconds}, (0, 0), True
    if not raw["supported"]:
        return Plan(supported=False, reason=raw["reason"], path=path, reference=reference)
    return Plan(
        supported=True,
        reason="",
        batch=batch,
        input_hw=input_hw,
        out_grad_hw=out_hw,
        filter_hw=filter_hw,
        channels=(in_c, out_c),
        pads=pads,
        path=path,
        reference=reference,
        sm_count=sm_count,
        smem_per_block=smem_per_block,
        forced_segments=forced_segments,
        forced_buckets=forced_buckets,
        deterministic=options.deterministic,
        forced_kernels=(forced_kernels[0], forced_kernels[1]),
        variant0=raw["variant0"],
        variant1=raw["variant1"],
        width0=raw["width0"],
        segments=raw["segments"],
        buckets=raw["buckets"],
        chain=raw["chain"],
        atomic=raw["atomic"],
        baseline_segments=raw["baseline_segments"],
        segment_rows=raw["seg_rows"],
        segment_shape=(raw["seg_h"], raw["seg_w"]),
        image_parts=raw["image_parts"],
        workspace_elems=raw["workspace_elems"],
        predicted_seconds=raw["predicted_seconds"],
        work_tile=tuple(raw["work_tile"]),
        reads_depth_in_place=raw["reads_depth_in_place"],
        strides=strides,
        tf32_tiles=tiles,
    )
