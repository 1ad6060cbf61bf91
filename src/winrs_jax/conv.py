"""winrs_jax.conv: a drop-in for lax.conv_general_dilated whose filter gradient runs WinRS."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from winrs_jax import _primitives, choice
from winrs_jax.geometry import ConvSpec, Padding, make_spec
from winrs_jax.planner import Plan, PlannerOptions, make_plan


def _shape_dtype(a: Any) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype conv's jnp.asarray gives `a`, without moving its data: a NumPy float64 array or a
    list of Python floats is float32 unless jax_enable_x64 is on."""
    if not (hasattr(a, "shape") and hasattr(a, "dtype")):  # a list or a scalar
        a = np.asarray(a)
    return tuple(a.shape), jax.dtypes.canonicalize_dtype(a.dtype)


def _checked(options: Any) -> PlannerOptions | None:
    """options, if it is a PlannerOptions or None; a TypeError that says so otherwise (a dict failed later, with
    an AttributeError about one of its fields)."""
    if options is not None and not isinstance(options, PlannerOptions):
        raise TypeError(
            f"options must be a winrs_jax.PlannerOptions or None, got {type(options).__name__} "
            "(for example winrs_jax.PlannerOptions(mode='winrs'))"
        )
    return options


def _xla_conv(lhs: jax.Array, rhs: jax.Array, spec: ConvSpec, out_sharding: Any = None) -> jax.Array:
    return lax.conv_general_dilated(lhs, rhs, **spec.lax_kwargs(), out_sharding=out_sharding)


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
    faster than XLA's for the layer (winrs_jax.choice), and XLA otherwise. A JAX primitive with lax's
    differentiation and batching rules (winrs_jax._primitives): grad of any order, jvp/jacfwd, vmap and
    shard_map work as with lax.
    """
    lhs, rhs, options = jnp.asarray(lhs), jnp.asarray(rhs), _checked(options)
    spec = make_spec(
        lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, window_strides, padding, lhs_dilation, rhs_dilation,
        dimension_numbers, feature_group_count, batch_group_count, precision, preferred_element_type,
    )  # fmt: skip
    # A bad $WINRS_JAX_MODE fails here, at the forward pass's trace, not first at the gradient's.
    choice.current_mode(options.mode if options else None)
    if spec.xla_only:  # lax takes the whole call, gradients included
        return _xla_conv(lhs, rhs, spec, out_sharding)
    # out_sharding goes into the primitive, whose abstract evaluation is lax's (explicit mesh axes may need it
    # there), and the result is resharded to it where a batching rule binds the primitive without it (vmap).
    out = _primitives.bind_conv(
        lhs, rhs, spec, options, out_sharding=_primitives.canonical_out_sharding(out_sharding)
    )
    return out if out_sharding is None else jax.sharding.reshard(out, out_sharding)


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
    options: PlannerOptions | None = None,
) -> jax.Array:
    """The filter gradient alone: d(sum(out_grad * conv(lhs, rhs, ...))) / d rhs, with rhs of shape rhs_shape and
    lhs's dtype (lax's convolution takes one dtype for both), returned in that dtype.

    Arguments mean what they mean in conv / lax.conv_general_dilated.
    """
    lhs, out_grad, options = jnp.asarray(lhs), jnp.asarray(out_grad), _checked(options)
    rhs_shape = tuple(int(d) for d in rhs_shape)
    rhs_dtype = lhs.dtype
    rank = len(rhs_shape) - 2
    try:  # out_grad's dtype is the convolution's output dtype: lax's preferred_element_type
        spec = make_spec(
            lhs.shape, rhs_shape, lhs.dtype, rhs_dtype, window_strides or (1,) * max(rank, 0), padding,
            lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count, batch_group_count, precision,
            out_grad.dtype,
        )  # fmt: skip
        expected = jax.eval_shape(
            lambda: _xla_conv(
                jax.ShapeDtypeStruct(lhs.shape, lhs.dtype), jax.ShapeDtypeStruct(rhs_shape, rhs_dtype), spec
            )
        )
    except TypeError as e:
        if "preferred_element_type" not in str(e):
            raise
        raise TypeError(
            f"out_grad's dtype {out_grad.dtype} does not fit lhs's {lhs.dtype}: out_grad is the convolution's "
            f"output, of lhs's dtype or a wider one of its kind ({e})"
        ) from e
    if out_grad.shape != expected.shape:
        raise ValueError(
            f"out_grad has shape {out_grad.shape}, but the convolution's output has shape {expected.shape}"
        )
    if spec.xla_only:
        _, rhs_vjp = jax.vjp(lambda rhs: _xla_conv(lhs, rhs, spec), jnp.zeros(rhs_shape, rhs_dtype))
        return rhs_vjp(out_grad)[0]
    rhs = jax.ShapeDtypeStruct(rhs_shape, rhs_dtype)
    return _primitives.bind_filter_grad(lhs, out_grad.astype(expected.dtype), rhs, spec, options)


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
    """The plan conv(lhs, rhs, ...) uses for its filter gradient; lhs and rhs may be jax.ShapeDtypeStructs, or
    anything conv takes (arrays, NumPy arrays, nested lists). In mode "auto" it includes the measured choice
    (measuring now when the layer is new). (out_sharding is accepted for symmetry with conv; it does not change
    the plan.)"""
    (lhs_shape, lhs_dtype), (rhs_shape, rhs_dtype) = _shape_dtype(lhs), _shape_dtype(rhs)
    options = _checked(options)
    spec = make_spec(
        lhs_shape, rhs_shape, lhs_dtype, rhs_dtype, window_strides, padding, lhs_dilation, rhs_dilation,
        dimension_numbers, feature_group_count, batch_group_count, precision, preferred_element_type,
    )  # fmt: skip
    plan = make_plan(lhs_shape, rhs_shape, lhs_dtype, spec, options)
    if not plan.supported:
        return plan
    mode = choice.current_mode(options.mode if options else None)
    winrs, decision, chosen = choice.choose(plan, lhs_shape, rhs_shape, lhs_dtype, spec, options, mode)
    if chosen is not options:  # an alternative path measured faster
        plan = make_plan(lhs_shape, rhs_shape, lhs_dtype, spec, chosen)
    text = decision.describe() if decision else ("WinRS" if winrs else "XLA") + f" (mode {mode})"
    return dataclasses.replace(plan, mode=mode, choice=text, runs_winrs=winrs)
