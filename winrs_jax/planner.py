"""Trace-time planning of the WinRS backward-filter convolution (paper section 4).

The arithmetic lives in C++ (cpp/winrs/plan.cc) so that the planner and the FFI handlers that validate its
output share one implementation; this module decides whether a layer is eligible at all and presents the plan.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from winrs_jax import _winrs
from winrs_jax.geometry import ConvSpec

# The device the default plan is made for when no GPU is visible: an H100 SXM. The CPU handler then runs
# exactly the plan an H100 would.
REFERENCE_SM_COUNT = 132


@dataclasses.dataclass(frozen=True)
class Variant:
    """One kernel Omega_alpha(n, r) of the paper's Figure 6."""

    index: int
    n: int
    r: int
    alpha: int
    alpha_class: int
    block_oc: int
    block_ic: int
    gemm_efficiency: float
    blocks_per_sm: int

    @property
    def name(self) -> str:
        return f"Omega_{self.alpha_class}({self.n}, {self.r})"


@functools.cache
def variants() -> tuple[Variant, ...]:
    """The 13 WinRS kernel variants, from the C++ table that drives kernels, planner and tests."""
    return tuple(Variant(index=i, **v) for i, v in enumerate(_winrs.variants()))


@dataclasses.dataclass(frozen=True)
class PlannerOptions:
    """Overrides for the planner.

    sm_count: SMs of the target GPU (default: the visible GPU, else an H100).
    segments: force the baseline segment count Z^ (Algorithm 2 still shapes the segments).
    kernels: force the kernel pair, as indices into variants() (tests and kernel tuning).
    """

    sm_count: int | None = None
    segments: int | None = None
    kernels: tuple[int, int] | None = None


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
    sm_count: int = 0
    variant0: int = -1
    variant1: int = -1
    width0: int = 0
    segments: int = 0
    buckets: int = 0
    baseline_segments: float = 0.0
    segment_rows: int = 0
    segment_shape: tuple[int, int] = (0, 0)
    workspace_elems: int = 0

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
        return 4 * self.workspace_elems

    @property
    def filter_shape_ohwi(self) -> tuple[int, int, int, int]:
        return (self.channels[1], *self.filter_hw, self.channels[0])

    def ffi_attributes(self) -> dict[str, int]:
        top, bottom, left, right = self.pads
        seg_h = self.segment_shape[0]
        return dict(
            pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right,
            variant0=self.variant0, variant1=self.variant1, seg_rows=self.segment_rows, seg_h=seg_h,
            seg_w=self.segment_shape[1], width0=self.width0,
        )  # fmt: skip

    def __str__(self) -> str:
        if not self.supported:
            return f"WinRS plan: not used, XLA computes the filter gradient ({self.reason})"
        kernels = self.kernels
        lines = [
            "WinRS plan",
            f"  problem    N={self.batch} input {self.input_hw[0]}x{self.input_hw[1]}x{self.channels[0]} "
            f"out_grad {self.out_grad_hw[0]}x{self.out_grad_hw[1]}x{self.channels[1]} "
            f"filter {self.filter_hw[0]}x{self.filter_hw[1]} pads(t,b,l,r)={self.pads}",
            f"  kernels    {kernels[0].name} on columns [0, {self.width0})"
            + (f", {kernels[1].name} on [{self.width0}, {self.out_grad_hw[1]})" if len(kernels) > 1 else ""),
            f"  segments   Z={self.segments} = {self.segment_rows} x {self.segments // self.segment_rows} "
            f"(rows x columns; Z^={self.baseline_segments:g} for {self.sm_count} SMs), segment "
            f"{self.segment_shape[0]} x {self.segment_shape[1]}; the last row and column take the remainder",
            f"  workspace  {self.workspace_bytes} bytes ({self.buckets} buckets of |dW| float32, the first is dW; "
            "residual segments add into their row's first bucket)",
        ]
        return "\n".join(lines)


def default_sm_count() -> int:
    """SMs of the first visible GPU, else the reference H100's."""
    for backend in ("cuda", "gpu"):
        try:
            devices = jax.devices(backend)
        except RuntimeError:
            continue
        count = getattr(devices[0], "core_count", None)
        if isinstance(count, int) and count > 0:
            return count
    return REFERENCE_SM_COUNT


def make_plan(
    lhs_shape: tuple[int, ...],
    rhs_shape: tuple[int, ...],
    dtype: np.dtype,
    spec: ConvSpec,
    options: PlannerOptions | None = None,
) -> Plan:
    """Plans the filter gradient of a validated convolution, or says why WinRS does not handle it."""
    options = options or PlannerOptions()
    rank = len(lhs_shape) - 2
    reason = ""
    if np.dtype(dtype) != np.float32:
        reason = f"dtype {np.dtype(dtype).name}: the WinRS kernels are float32 only for now"
    elif spec.preferred_element_type not in (None, np.dtype(np.float32)):
        reason = f"preferred_element_type {spec.preferred_element_type}: the WinRS kernels produce float32"
    elif spec.feature_group_count != 1 or spec.batch_group_count != 1:
        reason = "grouped convolution (feature_group_count or batch_group_count > 1)"
    elif any(s != 1 for s in spec.window_strides):
        reason = f"window strides {spec.window_strides}: WinRS needs stride 1"
    elif any(d != 1 for d in spec.lhs_dilation):
        reason = f"lhs dilation {spec.lhs_dilation} (transposed convolution)"
    elif any(d != 1 for d in spec.rhs_dilation):
        reason = f"rhs dilation {spec.rhs_dilation} (dilated filter)"
    elif rank not in (1, 2):
        reason = f"{rank}D convolution: WinRS handles 1D and 2D"
    if reason:
        return Plan(supported=False, reason=reason)

    dn = spec.dimension_numbers
    batch, in_c = lhs_shape[dn.lhs_spec[0]], lhs_shape[dn.lhs_spec[1]]
    out_c = rhs_shape[dn.rhs_spec[0]]
    in_hw = [lhs_shape[d] for d in dn.lhs_spec[2:]]
    filter_hw = [rhs_shape[d] for d in dn.rhs_spec[2:]]
    pads = list(spec.padding)
    if rank == 1:  # a 1D convolution is a 2D one of height 1
        in_hw, filter_hw, pads = [1, *in_hw], [1, *filter_hw], [(0, 0), *pads]
    pads_flat = (pads[0][0], pads[0][1], pads[1][0], pads[1][1])
    return plan_canonical(
        batch, (in_hw[0], in_hw[1]), in_c, out_c, (filter_hw[0], filter_hw[1]), pads_flat, options
    )


def plan_canonical(
    batch: int,
    input_hw: tuple[int, int],
    in_c: int,
    out_c: int,
    filter_hw: tuple[int, int],
    pads: tuple[int, int, int, int],
    options: PlannerOptions | None = None,
) -> Plan:
    """The plan of a float32 2D problem in the kernels' layout (X: N x H x W x C), stride 1, no groups."""
    options = options or PlannerOptions()
    top, bottom, left, right = pads
    out_hw = (input_hw[0] + top + bottom - filter_hw[0] + 1, input_hw[1] + left + right - filter_hw[1] + 1)
    sm_count = options.sm_count or default_sm_count()
    raw = _winrs.make_plan(
        batch=batch, in_h=input_hw[0], in_w=input_hw[1], in_c=in_c, out_h=out_hw[0], out_w=out_hw[1], out_c=out_c,
        filter_h=filter_hw[0], filter_w=filter_hw[1], pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right,
        sm_count=sm_count, segments=options.segments or 0,
        variant0=options.kernels[0] if options.kernels else -1,
        variant1=options.kernels[1] if options.kernels else -1,
    )  # fmt: skip
    if not raw["supported"]:
        return Plan(supported=False, reason=raw["reason"])
    return Plan(
        supported=True,
        reason="",
        batch=batch,
        input_hw=input_hw,
        out_grad_hw=out_hw,
        filter_hw=filter_hw,
        channels=(in_c, out_c),
        pads=pads,
        sm_count=sm_count,
        variant0=raw["variant0"],
        variant1=raw["variant1"],
        width0=raw["width0"],
        segments=raw["segments"],
        buckets=raw["buckets"],
        baseline_segments=raw["baseline_segments"],
        segment_rows=raw["seg_rows"],
        segment_shape=(raw["seg_h"], raw["seg_w"]),
        workspace_elems=raw["workspace_elems"],
    )
