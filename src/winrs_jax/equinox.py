"""An equinox.nn.Conv2d whose filter gradient runs WinRS (needs equinox; importing winrs_jax does not)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from winrs_jax.conv import conv


class Conv2d(eqx.nn.Conv2d):
    """equinox.nn.Conv2d with the same constructor and fields. Like it, it takes one example (C x H x W); under
    jax.vmap the filter gradients of the examples run as one stacked WinRS call. It also accepts a batch
    (N x C x H x W) directly."""

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        del key
        if x.ndim not in (3, 4):
            raise ValueError(
                f"Conv2d needs an input of rank 3 (C, H, W) or 4 (N, C, H, W), got shape {x.shape}"
            )
        unbatched = x.ndim == 3
        padding: Any = self.padding
        if self.padding_mode != "ZEROS":
            x = jax.vmap(self._nonzero_pad)(x) if not unbatched else self._nonzero_pad(x)
            padding = "VALID"
        batch = x[None] if unbatched else x
        out = conv(
            batch,
            self.weight,
            self.stride,
            padding,
            rhs_dilation=self.dilation,
            feature_group_count=self.groups,
        )
        if self.use_bias:
            out = out + jnp.asarray(self.bias)
        return out[0] if unbatched else out
