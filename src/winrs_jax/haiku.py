"""Haiku's convolutions (ConvND, Conv1D, Conv2D, Conv3D) whose filter gradients run WinRS (needs dm-haiku;
importing winrs_jax does not)."""

from __future__ import annotations

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from winrs_jax.conv import conv


def _call(module: hk.ConvND, inputs: jax.Array, precision: lax.Precision | None) -> jax.Array:
    """haiku.ConvND.__call__ with winrs_jax.conv: the same parameters ("w", "b"), shapes and results."""
    inputs = jnp.asarray(inputs)
    rank = module.num_spatial_dims + 1
    if inputs.ndim not in (rank, rank + 1):
        raise ValueError(
            f"{type(module).__name__} needs an input of rank {rank} or {rank + 1}, got shape {inputs.shape}"
        )
    unbatched = inputs.ndim == rank
    if unbatched:
        inputs = inputs[None]
    in_channels = inputs.shape[module.channel_index]
    if in_channels % module.feature_group_count != 0:
        raise ValueError(f"input channels {in_channels} are not a multiple of {module.feature_group_count}")
    w_shape = (*module.kernel_shape, in_channels // module.feature_group_count, module.output_channels)
    if module.mask is not None and module.mask.shape != w_shape:
        raise ValueError(f"mask shape {module.mask.shape} differs from the weights' {w_shape}")
    w_init = module.w_init or hk.initializers.TruncatedNormal(stddev=1.0 / np.sqrt(np.prod(w_shape[:-1])))
    w = hk.get_parameter("w", w_shape, inputs.dtype, init=w_init)
    if module.mask is not None:
        w = w * module.mask
    out = conv(
        inputs, w, module.stride, module.padding, lhs_dilation=module.lhs_dilation,
        rhs_dilation=module.kernel_dilation, dimension_numbers=module.dimension_numbers,
        feature_group_count=module.feature_group_count, precision=precision,
    )  # fmt: skip
    if module.with_bias:
        channels_last = module.channel_index == -1
        shape = (module.output_channels,) + (() if channels_last else (1,) * module.num_spatial_dims)
        out = out + jnp.broadcast_to(
            hk.get_parameter("b", shape, inputs.dtype, init=module.b_init), out.shape
        )
    return out[0] if unbatched else out


class ConvND(hk.ConvND):
    """haiku.ConvND with the same constructor, parameters and results; jax.grad's filter gradient runs WinRS."""

    def __call__(self, inputs: jax.Array, *, precision: lax.Precision | None = None) -> jax.Array:
        return _call(self, inputs, precision)


class Conv1D(hk.Conv1D):
    """haiku.Conv1D with the same constructor, parameters and results; jax.grad's filter gradient runs WinRS."""

    def __call__(self, inputs: jax.Array, *, precision: lax.Precision | None = None) -> jax.Array:
        return _call(self, inputs, precision)


class Conv2D(hk.Conv2D):
    """haiku.Conv2D with the same constructor, parameters and results; jax.grad's filter gradient runs WinRS."""

    def __call__(self, inputs: jax.Array, *, precision: lax.Precision | None = None) -> jax.Array:
        return _call(self, inputs, precision)


class Conv3D(hk.Conv3D):
    """haiku.Conv3D with the same constructor, parameters and results; jax.grad's filter gradient runs WinRS."""

    def __call__(self, inputs: jax.Array, *, precision: lax.Precision | None = None) -> jax.Array:
        return _call(self, inputs, precision)
