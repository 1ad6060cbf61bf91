"""flax.linen.Conv with winrs_jax.conv (needs flax; importing winrs_jax does not)."""

from __future__ import annotations

from typing import Any

from flax import linen

from winrs_jax.conv import conv


class Conv(linen.Conv):
    """flax.linen.Conv whose filter gradient runs WinRS; same fields, same parameters."""

    conv_general_dilated: Any = conv
