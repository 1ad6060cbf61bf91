"""The WinRS filter gradient as XLA partitions it.

Under jit with the batch axis sharded over devices (weights replicated), each device computes the filter
gradient of its shard with its own plan and the results are summed with one all-reduce: activations are never
all-gathered (jax.experimental.custom_partitioning). Stacked problems (vmap, or the depth slices of a 3D
layer) arrive on leading axes and run in one FFI call; an operand whose leading axes all have size 1 is shared
by every problem.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from winrs_jax import _ffi
from winrs_jax.planner import Plan, PlannerOptions, plan_canonical, plan_depth_in_place, plan_grouped


@dataclasses.dataclass(frozen=True)
class DepthGeometry:
    """A 3D layer's depth (paper section 3, Level 2): filter depth tap fd meets the padded input's depth slices
    fd * dilation + stride * j (j < out_depth); `packing` taps share one 2D problem's input channels when X is read
    in place (Plan.depth_packing)."""

    in_depth: int
    out_depth: int
    taps: int
    stride: int
    dilation: int
    pads: tuple[int, int]
    packing: int = 1

    @classmethod
    def of(cls, plan: Plan) -> DepthGeometry:
        (in_depth, out_depth, taps), pads = plan.depth, plan.depth_pads
        return cls(
            in_depth, out_depth, taps, plan.depth_stride, plan.depth_dilation, pads, plan.depth_packing
        )


@dataclasses.dataclass(frozen=True)
class Layer:
    """What the filter gradient needs besides X (... x N x H x W x C) and dY (... x N x OH x OW x K)."""

    filter_hw: tuple[int, int]
    pads: tuple[int, int, int, int]
    path: str
    reference: str
    options: PlannerOptions
    stack: int = 0  # leading axes of stacked problems
    # A direct grouped layer (Plan.method "direct"): its geometry, read in place by the kernels.
    method: str = "winrs"
    strides: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    # X and dY of a 1D layer, given their unit height axis by a reshape: the FFI call takes them with that axis
    # most-major, which is their layout already (asked for row-major, XLA copied both operands to add the axis).
    unit_height_major: bool = False
    # A 3D layer read in place (Plan.depth_in_place): X N x D x H x W x C and dY N x OD x OH x OW x K; dW then
    # FD x K x FH x FW x C, from one 2D problem of N x OD images per filter depth tap, or per `packing` taps side
    # by side in its input channels.
    depth: DepthGeometry | None = None


def _local_depth_filter_grad(x: jax.Array, dy: jax.Array, layer: Layer) -> jax.Array:
    """dW (FD x K x FH x FW x C) of one device's part of a 3D layer read in place (Layer.depth): X by depth slice
    where the plan of its images allows (a smaller batch may plan other kernels), else its depth-shifted
    copies."""
    depth = layer.depth
    assert depth is not None
    taps, packing = depth.taps, depth.packing
    batch, in_hw, in_c, out_c = x.shape[0] * depth.out_depth, tuple(x.shape[2:4]), x.shape[4], dy.shape[4]
    problems = -(-taps // packing)
    plan = plan_depth_in_place(batch, in_hw, in_c, out_c, layer.filter_hw, layer.pads, layer.path, layer.reference,
                               layer.options, taps, packing, layer.strides)  # fmt: skip
    if not plan.supported:
        raise ValueError(f"WinRS cannot run this shard: {plan.reason}")
    if not plan.reads_depth_in_place:
        views, dy = depth_views(x, dy, depth, 0)
        flat = dataclasses.replace(layer, stack=1, depth=None)
        return _local_filter_grad(_full_or_shared(views, (taps,)), dy, flat)
    attributes = dict(plan.ffi_attributes(), in_depth=depth.in_depth, out_depth=depth.out_depth,
                      depth_stride=depth.stride, depth_dilation=depth.dilation, depth_pad=depth.pads[0],
                      filter_depth=taps)  # fmt: skip
    dw = _ffi.backward_filter_call(x, dy, (problems,), plan.filter_shape_ohwi, plan.workspace_elems, attributes,
                                   _ffi.DEPTH_TARGET)  # fmt: skip
    # Problem g's input channel j C + c is tap g P + j's channel c.
    dw = dw.reshape(*dw.shape[:-1], packing, in_c)
    dw = jax.numpy.moveaxis(dw, -2, 1).reshape(problems * packing, *dw.shape[1:-2], in_c)
    return dw[:taps]


def _local_filter_grad(x: jax.Array, dy: jax.Array, layer: Layer) -> jax.Array:
    """dW (... x K x FH x FW x C, of a grouped layer C / G) of one device's problems, planned for their own
    shapes."""
    if layer.depth is not None:
        return _local_depth_filter_grad(x, dy, layer)
    s = layer.stack
    stacked = tuple(np.broadcast_shapes(x.shape[:s], dy.shape[:s]))
    batch, in_hw, in_c, out_c = x.shape[s], tuple(x.shape[s + 1 : s + 3]), x.shape[s + 3], dy.shape[s + 3]
    if layer.method == "direct":
        plan = plan_grouped(batch, in_hw, in_c, out_c, layer.filter_hw, layer.pads, layer.strides,
                            layer.dilation, layer.groups, layer.path, layer.reference, layer.options,
                            int(np.prod(stacked)))  # fmt: skip
        target, dw_shape = _ffi.GROUPED_TARGET, (out_c, *layer.filter_hw, in_c // layer.groups)
    else:
        # Stacked problems (vmap, groups, a 3D layer's depth copies) share one launch, which Hopper's TF32 tiles
        # do not take (cuda/wgmma_persistent.cuh, persistent_launchable): their plan keeps the planner's kernels.
        one = int(np.prod(stacked)) == 1
        options = layer.options if one else dataclasses.replace(layer.options, tf32_tiles=False)
        plan = plan_canonical(batch, in_hw, in_c, out_c, layer.filter_hw, layer.pads, layer.path, layer.reference,
                              options, strides=layer.strides)  # fmt: skip
        target, dw_shape = _ffi.TARGET, plan.filter_shape_ohwi
    if not plan.supported:  # shapes were validated for the whole problem; a shard cannot make them invalid
        raise ValueError(f"WinRS cannot run this shard: {plan.reason}")
    layouts = [(s + 1, *range(s + 1), s + 2, s + 3)] * 2 if layer.unit_height_major else None
    return _ffi.backward_filter_call(x, dy, stacked, dw_shape, plan.workspace_elems, plan.ffi_attributes(),
                                     target, layouts)  # fmt: skip


# True while a filter gradient is lowered for one device (_primitives' lowering rule): there is nothing to
# partition, and the FFI call goes in without custom partitioning's wrapper (jax lowers it to its body there),
# whose tracing took about 0.7 ms of each layer's lowering on a 2-core CPU: issue 8's re-trace budget is 1 ms.
_ONE_DEVICE: contextvars.ContextVar[bool] = contextvars.ContextVar("winrs_jax_one_device", default=False)


@contextlib.contextmanager
def lowering_for_one_device(one_device: bool) -> Iterator[None]:
    token = _ONE_DEVICE.set(one_device)
    try:
        yield
    finally:
        _ONE_DEVICE.reset(token)


@functools.partial(custom_partitioning, static_argnums=(2,))
def _partitioned(x: jax.Array, dy: jax.Array, layer: Layer) -> jax.Array:
    return _local_filter_grad(x, dy, layer)


def _batch_axes(layer: Layer, arg_shapes: Any) -> Any:
    spec = arg_shapes[0].sharding.spec
    return spec[layer.stack] if len(spec) > layer.stack else None


def _partition(layer: Layer, mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
    axes = _batch_axes(layer, arg_shapes)
    batch_sharded = NamedSharding(mesh, P(*([None] * layer.stack), axes))

    def lower(x: jax.Array, dy: jax.Array) -> jax.Array:
        dw = _local_filter_grad(x, dy, layer)
        return dw if axes is None else lax.psum(dw, axes)

    return mesh, lower, NamedSharding(mesh, P()), (batch_sharded, batch_sharded)


def _infer(layer: Layer, mesh: Any, arg_shapes: Any, result_shape: Any) -> NamedSharding:
    return NamedSharding(mesh, P())


def _sharding_rule(layer: Layer, mesh: Any, operand_types: Any, result_types: Any) -> tuple[str, dict]:
    """Einsum-like: the batch is reduced; the leading (stacked) axes of a shared operand have size 1."""
    if layer.depth is not None:  # X N x D x H x W x C, dY N x OD x OH x OW x K, dW FD x K x FH x FW x C
        return "n d h w c, n e p q k -> t k i j c", dict(
            reduction_factors=("n",),
            need_replication_factors=("d", "h", "w", "c", "e", "p", "q", "k", "t", "i", "j"),
        )
    s = layer.stack
    x_shared = s > 0 and all(d == 1 for d in operand_types[0].shape[:s])
    x_lead = [f"x{i}" if x_shared else f"s{i}" for i in range(s)]
    dy_lead = [f"s{i}" for i in range(s)]
    if not x_shared and all(d == 1 for d in operand_types[1].shape[:s]):
        dy_lead = [f"y{i}" for i in range(s)]
    dw_in = "e" if layer.groups > 1 else "c"  # a grouped layer's dW has one group's input channels
    rule = " ".join(
        [*x_lead, "n h w c, ", *dy_lead, "n p q k -> ", *[f"s{i}" for i in range(s)], f"k i j {dw_in}"]
    )
    # Every factor but the batch must be replicated, listed in order of first appearance.
    factors = list(dict.fromkeys(rule.replace(",", " ").replace("->", " ").split()))
    return rule, dict(
        reduction_factors=("n",), need_replication_factors=tuple(f for f in factors if f != "n")
    )


_partitioned.def_partition(
    partition=_partition,
    infer_sharding_from_operands=_infer,
    sharding_rule=_sharding_rule,
)


def _explicit_batch_axes(x: jax.Array, stack: int) -> tuple[Any, Any]:
    """(mesh, axes) when X's batch axis is partitioned over explicit mesh axes (jax.make_mesh's default), else
    (None, None)."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    if not isinstance(sharding, NamedSharding) or len(sharding.spec) <= stack or sharding.spec[stack] is None:
        return None, None
    axes = sharding.spec[stack]
    names = axes if isinstance(axes, tuple) else (axes,)
    types = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types, strict=True))
    if not all(types[name] == jax.sharding.AxisType.Explicit for name in names):
        return None, None
    return sharding.mesh, axes


def filter_grad(x: jax.Array, dy: jax.Array, layer: Layer) -> jax.Array:
    """dW (... x K x FH x FW x C, float32) of X (... x N x H x W x C) and dY (... x N x OH x OW x K), both in the
    storage type of layer.path, with layer.stack leading axes of stacked problems."""
    mesh, axes = _explicit_batch_axes(x, layer.stack)
    if mesh is None:
        return _local_filter_grad(x, dy, layer) if _ONE_DEVICE.get() else _partitioned(x, dy, layer)
    # Explicit axes say where the batch lives at trace time: the same per-device plan and all-reduce, written
    # as a shard_map (custom partitioning's all-reduce does not lower under explicit axes with jax 0.11).
    # Both operands partitioned over the batch alone: dY may come partitioned elsewhere (an output layout CNHW
    # puts lax's partitioning on its leading axis, the channels).
    spec = P(*([None] * layer.stack), axes)
    x, dy = (jax.sharding.reshard(a, spec) for a in (x, dy))

    def local(x: jax.Array, dy: jax.Array) -> jax.Array:
        return lax.psum(_local_filter_grad(x, dy, layer), axes)

    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=P())(x, dy)


def _batch_reshape(a: jax.Array, shape: tuple[int, ...], stack: int, batch: int) -> jax.Array:
    """a.reshape(shape) where a's batch axis (after `stack` leading axes) becomes axis `batch`: under explicit mesh
    axes the reshape must name the result's partitioning, the batch's."""
    mesh, axes = _explicit_batch_axes(a, stack)
    if mesh is None:
        return a.reshape(shape)
    return lax.reshape(a, shape, out_sharding=NamedSharding(mesh, P(*([None] * batch), axes)))


def _full_or_shared(a: jax.Array, stacked: tuple[int, ...]) -> jax.Array:
    """The FFI call takes stacked operands whole or shared (all leading axes 1); anything between is copied."""
    lead = a.shape[: len(stacked)]
    if lead == stacked or all(d == 1 for d in lead):
        return a
    return jax.numpy.broadcast_to(a, (*stacked, *a.shape[len(stacked) :]))


def run_plan(
    x: jax.Array, dy: jax.Array, plan: Plan, options: PlannerOptions, stack: int = 0, one_d: bool = False
) -> jax.Array:
    """dW (... x K x [FD x] FH x FW x C, float32) of a planned layer from X (... x N x [D x] H x W x C) and dY
    (... x N x [OD x] OH x OW x K) in the path's storage type, with `stack` leading axes of stacked problems.

    A 3D layer (paper section 3, Level 2) becomes FD stacked 2D problems, one per filter depth tap fd: the padded
    input's depth slices fd * dilation + stride * j (j < OD) and dY, each with batch and depth merged into N x OD
    images; dY is shared by the taps, the depth-shifted views of X are copies. A direct grouped plan runs as one
    call on the operands as they are. Another grouped layer runs its groups as stacked problems (X and dY
    regrouped group-major), a layer grouped over the batch as one layer with a block-diagonal dY; a dilated or
    strided one runs its stride-1 pieces (_dilated, _strided). `one_d`: X and dY are a 1D layer's, their unit
    height axis added by a reshape (Layer.unit_height_major, where they reach the FFI call as they are)."""
    if plan.depth[2]:
        return _depth_taps(x, dy, plan, options, stack)
    if plan.dense_groups > 1:
        # The dense layer's dW (... x K x FH x FW x C) holds group g's as its block of output channels g K/G ..
        # and input channels g C/G ..: its G diagonal blocks, output channels group-major as lax's filter.
        g = plan.dense_groups
        dw = run_plan(x, dy, dataclasses.replace(plan, dense_groups=1), options, stack, one_d)
        lead, (k, *taps, c) = dw.shape[:stack], dw.shape[stack:]
        blocks = dw.reshape(*lead, g, k // g, *taps, g, c // g)
        # ... x K/G x FH x FW x C/G x G: the blocks where the output and input groups are the same.
        diagonal = jax.numpy.diagonal(blocks, axis1=stack, axis2=stack + len(taps) + 2)
        return jax.numpy.moveaxis(diagonal, -1, stack).reshape(*lead, k, *taps, c // g)
    if plan.method == "direct":
        return filter_grad(x, dy, Layer(plan.filter_hw, plan.pads, plan.path, plan.reference, options, stack,
                                        "direct", plan.strides, plan.dilation, plan.groups, one_d))  # fmt: skip
    if plan.batch_groups > 1:
        # The ungrouped layer on all N images of X with a block-diagonal dY: image g N / B + i gets dY[i]'s K / B
        # channels of group g and zeros elsewhere, so dW's group g sums over exactly its images. B times dY's
        # bytes and the groups' work, but X's batch axis stays whole: slicing or regrouping it split a batch
        # partitioned over devices in ways the data-parallel custom partitioning cannot take.
        b = plan.batch_groups
        dy = dy.reshape(*dy.shape[:-1], b, dy.shape[-1] // b)
        mask = jax.numpy.eye(b, dtype=dy.dtype).reshape(b, *[1] * (dy.ndim - stack - 2), b, 1)
        dy = mask * jax.numpy.expand_dims(dy, stack)  # ... x B x N/B x ... x B x K/B
        shape = (*dy.shape[:stack], x.shape[stack], *dy.shape[stack + 2 : -2], dy.shape[-2] * dy.shape[-1])
        # Under explicit mesh axes the merged batch takes X's partitioning (a reshape must name it there).
        explicit = _explicit_batch_axes(x, stack)[0] is not None
        dy = lax.reshape(dy, shape, out_sharding=jax.typeof(x).sharding if explicit else None)
        return run_plan(x, dy, dataclasses.replace(plan, batch_groups=1), options, stack)
    if plan.groups > 1:
        # ... x G x N x ... x C/G and ... x G x N x ... x K/G; dW ... x G x K/G x ... x C/G. An operand shared by
        # the stacked problems (leading axes 1: vmap of the other one, a 3D layer's dY) is shared no more once
        # the groups lead its problems: it is broadcast to them.
        regroup = lambda a: jax.numpy.moveaxis(a.reshape(*a.shape[:-1], plan.groups, -1), -2, stack)  # noqa: E731
        stacked = (*np.broadcast_shapes(x.shape[:stack], dy.shape[:stack]), plan.groups)
        x, dy = (_full_or_shared(regroup(a), stacked) for a in (x, dy))
        dw = run_plan(x, dy, dataclasses.replace(plan, groups=1), options, stack + 1)
        return dw.reshape(*dw.shape[:stack], -1, *dw.shape[stack + 2 :])
    if plan.dilation != (1, 1):
        return _dilated(x, dy, plan, options, stack)
    if plan.phases:
        return _strided(x, dy, plan, options, stack)
    return filter_grad(x, dy, Layer(plan.filter_hw, plan.pads, plan.path, plan.reference, options, stack,
                                    strides=plan.strides, unit_height_major=one_d))  # fmt: skip


def depth_views(x: jax.Array, dy: jax.Array, depth: DepthGeometry, stack: int) -> tuple[jax.Array, jax.Array]:
    """A 3D layer's X (... x N x D x H x W x C) as its FD filter depth taps' depth-shifted views (... x FD x N OD x
    H x W x C, copies), and dY (... x N x OD x OH x OW x K) as ... x 1 x N OD x OH x OW x K, shared by the taps."""
    out_depth, taps, step, spacing, pads = (
        depth.out_depth,
        depth.taps,
        depth.stride,
        depth.dilation,
        depth.pads,
    )
    span = step * (out_depth - 1) + 1  # input depth slices one tap reads, from its first
    lead = [(0, 0)] * (stack + 1)
    x = jax.numpy.pad(x, [*lead, pads, (0, 0), (0, 0), (0, 0)])
    views = jax.numpy.stack(
        [x[..., fd * spacing : fd * spacing + span : step, :, :, :] for fd in range(taps)], axis=stack
    )
    views = views.reshape(*views.shape[: stack + 1], -1, *views.shape[-3:])
    return views, jax.numpy.expand_dims(dy.reshape(*dy.shape[:stack], -1, *dy.shape[-3:]), stack)


def _depth_taps(x: jax.Array, dy: jax.Array, plan: Plan, options: PlannerOptions, stack: int) -> jax.Array:
    """A 3D layer's dW (... x K x FD x FH x FW x C) as its FD filter depth taps' 2D problems, stacked: X read in
    place by depth slice where the plan allows (Plan.depth_in_place, not under vmap), else from copies."""
    depth = DepthGeometry.of(plan)
    flat = dataclasses.replace(plan, depth=(0, 0, 0), depth_pads=(0, 0), depth_stride=1, depth_dilation=1)
    if plan.depth_in_place and stack == 0:
        layer = Layer(flat.filter_hw, flat.pads, flat.path, flat.reference, options, strides=flat.strides,
                      depth=depth)  # fmt: skip
        dw = filter_grad(x, dy, layer)
        return jax.numpy.moveaxis(dw, 0, 1)  # K x FD x FH x FW x C
    views, dy = depth_views(x, dy, depth, stack)
    stacked = tuple(np.broadcast_shapes(views.shape[: stack + 1], dy.shape[: stack + 1]))
    dw = run_plan(_full_or_shared(views, stacked), _full_or_shared(dy, stacked), flat, options, stack + 1)
    return jax.numpy.moveaxis(dw, stack, stack + 1)  # ... x K x FD x FH x FW x C


def _xla_piece(x: jax.Array, dy: jax.Array, plan: Plan, stack: int) -> jax.Array:
    """XLA's filter gradient (... x K x FH x FW x C, float32) of a stride-1 unpadded piece WinRS has no kernels
    for, at the precision of the arithmetic XLA would use for the layer."""
    precision = lax.Precision.HIGHEST if plan.reference in ("fp32", "tf32x3") else lax.Precision.DEFAULT

    def one(x: jax.Array, dy: jax.Array) -> jax.Array:
        def forward(w: jax.Array) -> jax.Array:
            return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "OHWI", "NHWC"),
                                            precision=precision, preferred_element_type=jax.numpy.float32)  # fmt: skip

        zeros = jax.numpy.zeros((*plan.filter_shape_ohwi[:3], x.shape[-1]), x.dtype)
        return jax.vjp(forward, zeros)[1](dy.astype(jax.numpy.float32))[0].astype(jax.numpy.float32)

    stacked = tuple(np.broadcast_shapes(x.shape[:stack], dy.shape[:stack]))
    x = jax.numpy.broadcast_to(x, (*stacked, *x.shape[stack:]))
    if stack and all(d == 1 for d in dy.shape[:stack]):
        # dY shared by the stacked problems (a 3D layer's depth taps): one convolution with the problems side by
        # side in X's channels, instead of a vmapped one (which XLA runs as a slow grouped convolution).
        problems, c = int(np.prod(stacked)), x.shape[-1]
        wide = jax.numpy.moveaxis(x.reshape(problems, *x.shape[stack:]), 0, -2)  # N x H x W x problems x C
        dw = one(wide.reshape(*wide.shape[:-2], problems * c), dy.reshape(dy.shape[stack:]))
        dw = jax.numpy.moveaxis(dw.reshape(*dw.shape[:-1], problems, c), -2, 0)  # problems x K x FH x FW x C
        return dw.reshape(*stacked, *dw.shape[1:])
    dy = jax.numpy.broadcast_to(dy, (*stacked, *dy.shape[stack:]))
    for _ in range(stack):
        one = jax.vmap(one)
    return one(x, dy)


def _strided(x: jax.Array, dy: jax.Array, plan: Plan, options: PlannerOptions, stack: int) -> jax.Array:
    """A strided (or too wide) layer's dW from its stride-1 pieces (Plan.phases): piece (p, q) takes the filter
    taps from (p, q) in steps of the strides and the padded input X[p::s_h, q::s_w]; every piece reads dY."""
    (sh, sw), (fh, fw), (c, k) = plan.strides, plan.filter_hw, plan.channels
    top, bottom, left, right = plan.pads
    # Pad (or crop) so that every phase has the rows and columns its piece reads.
    rows, cols = plan.out_grad_hw[0] * sh + fh, plan.out_grad_hw[1] * sw + fw
    h, w = x.shape[-3:-1]
    x = x[..., : min(h, rows - top), : min(w, cols - left), :]
    lead = [(0, 0)] * (stack + 1)
    x = jax.numpy.pad(x, [*lead, (top, max(0, rows - top - x.shape[-3])), (left, max(0, cols - left - x.shape[-2])),
                          (0, 0)])  # fmt: skip
    stacked = tuple(np.broadcast_shapes(x.shape[:stack], dy.shape[:stack]))
    dw = jax.numpy.zeros((*stacked, k, fh, fw, c), jax.numpy.float32)
    for phase in plan.phases:
        (p, q), piece = phase.offset, phase.plan
        view = x[..., p::sh, q::sw, :][..., : piece.input_hw[0], : piece.input_hw[1], :]
        if piece.supported:
            layer = Layer(piece.filter_hw, piece.pads, piece.path, piece.reference, options, stack)
            part = filter_grad(view, dy, layer)
        else:
            part = _xla_piece(view, dy, piece, stack)
        taps_h, taps_w = piece.filter_hw
        dw = dw.at[..., p : p + sh * taps_h : sh, q : q + sw * taps_w : sw, :].set(part)
    return dw


def _dilated(x: jax.Array, dy: jax.Array, plan: Plan, options: PlannerOptions, stack: int) -> jax.Array:
    """A dilated layer's dW (Plan.dilation): output phase (r, c) takes dY[r::dh, c::dw] and X_padded[r::dh, c::dw]
    with the undilated filter; the dh x dw phases run stacked (padded with zeros to one shape) and their dW sum."""
    (dh, dw), piece = plan.dilation, plan.phases[0].plan
    (rows, cols), (sub_h, sub_w) = piece.out_grad_hw, piece.input_hw
    top, bottom, left, right = plan.pads
    lead = [(0, 0)] * (stack + 1)
    # Padded X and dY, extended with zeros so that every phase has the full rows and columns.
    height, width = dh * sub_h, dw * sub_w
    x = x[..., : height - top, : width - left, :]
    x = jax.numpy.pad(
        x, [*lead, (top, height - top - x.shape[-3]), (left, width - left - x.shape[-2]), (0, 0)]
    )
    dy = jax.numpy.pad(dy, [*lead, (0, dh * rows - dy.shape[-3]), (0, dw * cols - dy.shape[-2]), (0, 0)])

    # ... x N x (sub_h dh) x (sub_w dw) x C -> ... x (dh dw) x N x sub_h x sub_w x C, phase (r, c) at r dw + c
    def phases(a: jax.Array, h: int, w: int) -> jax.Array:
        a = _batch_reshape(a, (*a.shape[:-3], h, dh, w, dw, a.shape[-1]), stack, stack)
        a = jax.numpy.moveaxis(a, (-4, -2), (stack, stack + 1))  # ... x dh x dw x N x h x w x C
        return _batch_reshape(a, (*a.shape[:stack], dh * dw, *a.shape[stack + 2 :]), stack + 2, stack + 1)

    stacked = tuple(np.broadcast_shapes(x.shape[:stack], dy.shape[:stack]))
    full = lambda a: jax.numpy.broadcast_to(a, (*stacked, *a.shape[stack:]))  # noqa: E731
    layer = Layer(piece.filter_hw, piece.pads, piece.path, piece.reference, options, stack + 1)
    dw_phases = filter_grad(phases(full(x), sub_h, sub_w), phases(full(dy), rows, cols), layer)
    return dw_phases.sum(axis=stack)
