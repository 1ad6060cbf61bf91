"""A haiku.Conv2D whose filter gradient runs WinRS (needs dm-haiku; importing winrs_jax does not)."""

from __future__ import annotations

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from winrs_jax.conv import conv


class Conv2D(hk.Conv2D):
    """haiku.Conv2D with the same constructor, parameters ("w", "b") and results; the convolution is
    winrs_jax.conv, so jax.grad computes the filter gradient with WinRS."""

    def __call__(self, inputs: jax.Array, *, precision: lax.Precision | None = None) -> jax.Array:
        inputs = jnp.asarray(inputs)
        unbatched_rank = self.num_spatial_dims + 1
        if inputs.ndim not in (unbatched_rank, unbatched_rank + 1):
            raise ValueError(f"Conv2D needs an input of rank 3 or 4, got shape {inputs.shape}")
        unbatched = inputs.ndim == unbatched_rank
        if unbatched:
            inputs = inputs[None]
        in_channels = inputs.shape[self.channel_index]
        if in_channels % self.feature_group_count != 0:
            raise ValueError(f"input channels {in_channels} are not a multiple of {self.feature_group_count}")
        w_shape = (*self.kernel_shape, in_channels // self.feature_group_count, self.output_channels)
        if self.mask is not None and self.mask.shape != w_shape:
            raise ValueError(f"mask shape {self.mask.shape} differs from the weights' {w_shape}")
        w_init = self.w_init or hk.initializers.TruncatedNormal(stddev=1.0 / np.sqrt(np.prod(w_shape[:-1])))
        w = hk.get_parameter("w", w_shape, inputs.dtype, init=w_init)
        if self.mask is not None:
            w = w * self.mask
        out = conv(
            inputs, w, self.stride, self.padding, lhs_dilation=self.lhs_dilation, rhs_dilation=self.kernel_dilation,
            dimension_numbers=self.dimension_numbers, feature_group_count=self.feature_group_count,
            precision=precision,
        )  # fmt: skip
        if self.with_bias:
            shape = (self.output_channels,) if self.channel_index == -1 else (self.output_channels, 1, 1)
            out = out + jnp.broadcast_to(
                hk.get_parameter("b", shape, inputs.dtype, init=self.b_init), out.shape
            )
        return out[0] if unbatched else out
