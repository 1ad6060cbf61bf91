"""flax.nnx.Conv with winrs_jax.conv (needs flax; importing winrs_jax does not)."""

from __future__ import annotations

from typing import Any

from flax import nnx

from winrs_jax.conv import conv


class Conv(nnx.Conv):
    """flax.nnx.Conv whose filter gradient runs WinRS; same arguments, same parameters."""

    def __init__(self, *args: Any, conv_general_dilated: Any = conv, **kwargs: Any) -> None:
        super().__init__(*args, conv_general_dilated=conv_general_dilated, **kwargs)
