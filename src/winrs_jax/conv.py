"""winrs_jax.conv: a drop-in for lax.conv_general_dilated whose filter gradient runs WinRS."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from winrs_jax import _ffi, _partition, choice
from winrs_jax.geometry import ConvSpec, Padding, make_spec
from winrs_jax.planner import Plan, PlannerOptions, make_plan


def _xla_conv(lhs: jax.Array, rhs: jax.Array, spec: ConvSpec, out_sharding: Any = None) -> jax.Array:
    return lax.conv_general_dilated(lhs, rhs, **spec.lax_kwargs(), out_sharding=out_sharding)


def _to_canonical(x: jax.Array, batch_dim: int, feature_dim: int, spatial: Sequence[int]) -> jax.Array:
    """Transposes to N x H x W x C; a 1D operand gets a unit height axis."""
    x = jnp.transpose(x, (batch_dim, *spatial, feature_dim))
    return x[:, None] if len(spatial) == 1 else x


def _winrs_filter_grad(
    lhs: jax.Array, out_grad: jax.Array, plan: Plan, spec: ConvSpec, options: PlannerOptions | None
) -> jax.Array:
    dn = spec.dimension_numbers
    x = _to_canonical(lhs, dn.lhs_spec[0], dn.lhs_spec[1], dn.lhs_spec[2:])
    dy = _to_canonical(out_grad, dn.out_spec[0], dn.out_spec[1], dn.out_spec[2:])
    layer = _partition.Layer(
        plan.filter_hw, plan.pads, plan.path, plan.reference, options or PlannerOptions()
    )
    # dY is stored like X (a bfloat16 layer with preferred_element_type=float32 has a float32 dY).
    dw = _partition.filter_grad(x, dy.astype(x.dtype), layer)
    if len(dn.rhs_spec) == 3:  # drop the unit height axis of a 1D filter
        dw = dw[:, 0]
    # dW is O x spatial... x I; put each axis where the rhs layout has it.
    order = (dn.rhs_spec[0], *dn.rhs_spec[2:], dn.rhs_spec[1])
    return jnp.transpose(dw, np.argsort(order))


def _filter_grad(
    lhs: jax.Array,
    out_grad: jax.Array,
    rhs_shape: tuple[int, ...],
    rhs_dtype: Any,
    spec: ConvSpec,
    options: PlannerOptions | None = None,
) -> jax.Array:
    plan = make_plan(lhs.shape, rhs_shape, lhs.dtype, spec, options)
    winrs, _ = choice.use_winrs(plan, lhs.dtype, spec.precision, options.mode if options else None)
    if winrs:
        return _winrs_filter_grad(lhs, out_grad, plan, spec, options).astype(rhs_dtype)
    zeros = jnp.zeros(rhs_shape, rhs_dtype)
    _, rhs_vjp = jax.vjp(lambda rhs: _xla_conv(lhs, rhs, spec), zeros)
    return rhs_vjp(out_grad)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _conv(lhs: jax.Array, rhs: jax.Array, spec: ConvSpec, options: PlannerOptions | None) -> jax.Array:
    return _xla_conv(lhs, rhs, spec, spec.out_sharding)


def _conv_fwd(
    lhs: jax.Array, rhs: jax.Array, spec: ConvSpec, options: PlannerOptions | None
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _xla_conv(lhs, rhs, spec, spec.out_sharding), (lhs, rhs)


def _conv_bwd(
    spec: ConvSpec,
    options: PlannerOptions | None,
    residuals: tuple[jax.Array, jax.Array],
    out_grad: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    lhs, rhs = residuals
    _, lhs_vjp = jax.vjp(lambda x: _xla_conv(x, rhs, spec), lhs)
    (lhs_grad,) = lhs_vjp(out_grad)
    rhs_grad = _filter_grad(lhs, out_grad, rhs.shape, rhs.dtype, spec, options)
    return _like(lhs_grad, lhs), _like(rhs_grad, rhs)


def _like(cotangent: jax.Array, primal: jax.Array) -> jax.Array:
    """The cotangent with the primal's type inside shard_map: summed over the manual axes it varies over and the
    primal does not (a weight replicated over the data axis gets the sum of the per-shard gradients), as JAX
    does for lax's own convolution."""
    extra = _ffi.varying_axes(cotangent) - _ffi.varying_axes(primal)
    return lax.psum(cotangent, tuple(sorted(extra))) if extra else cotangent


_conv.defvjp(_conv_fwd, _conv_bwd)


def conv(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: Padding,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision: Any = None,
    preferred_element_type: Any = None,
    out_sharding: Any = None,
    options: PlannerOptions | None = None,
) -> jax.Array:
    """Same signature and result as jax.lax.conv_general_dilated (plus winrs_jax's own `options`).

    The forward pass and the input gradient are XLA's convolutions; the filter gradient runs WinRS when
    `winrs_jax.plan` of the same arguments says it is supported and, in the default mode "auto", measured
    faster than XLA's for the layer (winrs_jax.choice), and XLA otherwise. Reverse mode only: jax.jvp / jacfwd
    and second derivatives are not defined for this custom VJP.
    """
    lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
    spec = make_spec(
        lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, window_strides, padding, lhs_dilation, rhs_dilation,
        dimension_numbers, feature_group_count, batch_group_count, precision, preferred_element_type, out_sharding,
    )  # fmt: skip
    if spec.xla_only:  # lax takes the whole call, gradients included
        return _xla_conv(lhs, rhs, spec, out_sharding)
    return _conv(lhs, rhs, spec, options)


def conv_backward_filter(
    lhs: jax.Array,
    out_grad: jax.Array,
    rhs_shape: Sequence[int],
    window_strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision: Any = None,
    rhs_dtype: Any = None,
    options: PlannerOptions | None = None,
) -> jax.Array:
    """The filter gradient alone: d(sum(out_grad * conv(lhs, rhs, ...))) / d rhs, with rhs of shape rhs_shape.

    Arguments mean what they mean in conv / lax.conv_general_dilated; rhs_dtype defaults to lhs.dtype.
    """
    lhs, out_grad = jnp.asarray(lhs), jnp.asarray(out_grad)
    rhs_shape = tuple(int(d) for d in rhs_shape)
    rhs_dtype = lhs.dtype if rhs_dtype is None else rhs_dtype
    rank = len(rhs_shape) - 2
    spec = make_spec(
        lhs.shape, rhs_shape, lhs.dtype, rhs_dtype, window_strides or (1,) * max(rank, 0), padding, lhs_dilation,
        rhs_dilation, dimension_numbers, feature_group_count, batch_group_count, precision, out_grad.dtype,
    )  # fmt: skip
    expected = jax.eval_shape(
        lambda: _xla_conv(
            jax.ShapeDtypeStruct(lhs.shape, lhs.dtype), jax.ShapeDtypeStruct(rhs_shape, rhs_dtype), spec
        )
    )
    if out_grad.shape != expected.shape:
        raise ValueError(
            f"out_grad has shape {out_grad.shape}, but the convolution's output has shape {expected.shape}"
        )
    return _filter_grad(lhs, out_grad, rhs_shape, rhs_dtype, spec, options)


def plan(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: Padding,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision: Any = None,
    preferred_element_type: Any = None,
    out_sharding: Any = None,
    options: PlannerOptions | None = None,
) -> Plan:
    """The plan conv(lhs, rhs, ...) uses for its filter gradient; lhs and rhs may be jax.ShapeDtypeStructs.
    In mode "auto" it includes the measured choice (measuring now when the layer is new). (out_sharding is
    accepted for symmetry with conv; it does not change the plan.)"""
    spec = make_spec(
        np.shape(lhs), np.shape(rhs), lhs.dtype, rhs.dtype, window_strides, padding, lhs_dilation, rhs_dilation,
        dimension_numbers, feature_group_count, batch_group_count, precision, preferred_element_type,
    )  # fmt: skip
    plan = make_plan(np.shape(lhs), np.shape(rhs), lhs.dtype, spec, options)
    if not plan.supported:
        return plan
    mode = choice.current_mode(options.mode if options else None)
    winrs, decision = choice.use_winrs(plan, lhs.dtype, spec.precision, mode)
    text = decision.describe() if decision else ("WinRS" if winrs else "XLA") + f" (mode {mode})"
    return dataclasses.replace(plan, mode=mode, choice=text)
