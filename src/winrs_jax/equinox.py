"""Equinox's convolutions (Conv, Conv1d, Conv2d, Conv3d) whose filter gradients run WinRS (needs equinox;
importing winrs_jax does not)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from winrs_jax.conv import conv


def _call(module: eqx.nn.Conv, x: jax.Array) -> jax.Array:
    """equinox.nn.Conv.__call__ with winrs_jax.conv, on one example (C x spatial) or a batch (N x C x spatial)."""
    rank = module.num_spatial_dims + 1
    if x.ndim not in (rank, rank + 1):
        raise ValueError(
            f"{type(module).__name__} needs an input of rank {rank} (C, spatial...) or {rank + 1} "
            f"(N, C, spatial...), got shape {x.shape}"
        )
    unbatched = x.ndim == rank
    padding: Any = module.padding
    if module.padding_mode != "ZEROS":
        x = module._nonzero_pad(x) if unbatched else jax.vmap(module._nonzero_pad)(x)
        padding = "VALID"
    batch = x[None] if unbatched else x
    out = conv(batch, module.weight, module.stride, padding, rhs_dilation=module.dilation,
               feature_group_count=module.groups)  # fmt: skip
    if module.use_bias:
        out = out + jnp.asarray(module.bias)
    return out[0] if unbatched else out


class Conv(eqx.nn.Conv):
    """equinox.nn.Conv with the same constructor and fields. Like it, it takes one example (C x spatial); under
    jax.vmap the filter gradients of the examples run as one stacked WinRS call. It also accepts a batch."""

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        del key  # as equinox's: unused
        return _call(self, x)


class Conv1d(eqx.nn.Conv1d):
    """equinox.nn.Conv1d with the same constructor and fields (one example, or a batch); WinRS filter gradient."""

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        del key  # as equinox's: unused
        return _call(self, x)


class Conv2d(eqx.nn.Conv2d):
    """equinox.nn.Conv2d with the same constructor and fields (one example, or a batch); WinRS filter gradient."""

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        del key  # as equinox's: unused
        return _call(self, x)


class Conv3d(eqx.nn.Conv3d):
    """equinox.nn.Conv3d with the same constructor and fields (one example, or a batch); WinRS filter gradient."""

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        del key  # as equinox's: unused
        return _call(self, x)
