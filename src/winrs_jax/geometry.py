"""Static description of a convolution call, normalised and validated at trace time.

Everything here is computed from shapes and Python arguments only, so it is hashable and can be a
parameter of winrs_jax's primitives.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

Padding = str | Sequence[tuple[int, int]]


# Where lax.conv_general_dilated refuses an argument with another type than ValueError, winrs_jax's clearer
# message comes as a ValueError that is also an instance of lax's type, so that code catching lax's still does.
class ArgumentTypeError(ValueError, TypeError):
    """A malformed convolution argument that lax refuses with a TypeError (dilations, the number of pads)."""


class PaddingNameError(ValueError, RuntimeError):
    """A padding string other than SAME, SAME_LOWER and VALID, which lax refuses with a RuntimeError."""


@dataclasses.dataclass(frozen=True)
class ConvSpec:
    """The arguments of lax.conv_general_dilated other than the operands, resolved for given shapes."""

    window_strides: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    dimension_numbers: lax.ConvDimensionNumbers
    feature_group_count: int
    batch_group_count: int
    precision: Any
    preferred_element_type: Any
    # Why winrs_jax hands the whole call to lax.conv_general_dilated (inputs lax accepts that WinRS's path does
    # not take: integer dtypes, zero-size dimensions, negative padding, padding beyond the window, a window
    # beyond the padded input); "" otherwise.
    xla_only: str = ""

    def lax_kwargs(self) -> dict[str, Any]:
        return dict(
            window_strides=self.window_strides,
            padding=self.padding,
            lhs_dilation=self.lhs_dilation,
            rhs_dilation=self.rhs_dilation,
            dimension_numbers=self.dimension_numbers,
            feature_group_count=self.feature_group_count,
            batch_group_count=self.batch_group_count,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )


def _int_tuple(name: str, value: Sequence[int] | None, rank: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * rank
    try:
        out = tuple(operator.index(v) for v in value)  # as lax: 1.5 is refused, not truncated
    except TypeError as e:
        raise TypeError(f"{name} must be a sequence of {rank} integers, got {value!r}") from e
    if len(out) != rank:
        raise ValueError(
            f"{name} must have {rank} entries (one per spatial dimension), got {len(out)}: {value!r}"
        )
    if any(v < 1 for v in out):
        # lax refuses non-positive dilations with a TypeError, strides with a ValueError.
        error = ArgumentTypeError if name.endswith("dilation") else ValueError
        raise error(f"{name} entries must be >= 1, got {value!r}")
    return out


def _hashable(value: Any) -> Any:
    """Lists become tuples (recursively) so that the spec can be a static argument; named tuples stay."""
    if isinstance(value, list) or type(value) is tuple:
        return tuple(_hashable(v) for v in value)
    return value


def _dilated(size: int, dilation: int) -> int:
    return 0 if size == 0 else (size - 1) * dilation + 1


def make_spec(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    lhs_dtype: Any,
    rhs_dtype: Any,
    window_strides: Sequence[int],
    padding: Padding,
    lhs_dilation: Sequence[int] | None,
    rhs_dilation: Sequence[int] | None,
    dimension_numbers: Any,
    feature_group_count: int,
    batch_group_count: int,
    precision: Any,
    preferred_element_type: Any,
) -> ConvSpec:
    """Validates a convolution call like lax.conv_general_dilated and resolves its padding and layout.

    Raises ValueError or TypeError naming the problem where lax would raise too; inputs lax accepts but
    WinRS's path does not take are marked `xla_only` (with the reason) and computed by lax alone. Nothing
    malformed reaches a kernel.
    """
    xla_only: list[str] = []
    lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
    if len(lhs_shape) != len(rhs_shape):  # a TypeError, as lax's
        raise TypeError(
            f"lhs and rhs must have the same rank, got lhs rank {len(lhs_shape)} {lhs_shape} and "
            f"rhs rank {len(rhs_shape)} {rhs_shape}"
        )
    if len(lhs_shape) < 3:
        raise ValueError(f"convolution operands need rank >= 3 (batch, feature, spatial...), got {lhs_shape}")
    if np.dtype(lhs_dtype) != np.dtype(rhs_dtype):
        raise TypeError(
            f"lhs and rhs must have the same dtype, got {np.dtype(lhs_dtype).name} and {np.dtype(rhs_dtype).name}"
        )
    if not jnp.issubdtype(lhs_dtype, jnp.floating):
        xla_only.append(f"dtype {np.dtype(lhs_dtype).name} is not a floating type")

    rank = len(lhs_shape) - 2
    dn = lax.conv_dimension_numbers(lhs_shape, rhs_shape, _hashable(dimension_numbers))
    strides = _int_tuple("window_strides", window_strides, rank, 1)
    lhs_dil = _int_tuple("lhs_dilation", lhs_dilation, rank, 1)
    rhs_dil = _int_tuple("rhs_dilation", rhs_dilation, rank, 1)
    if feature_group_count < 1 or batch_group_count < 1:
        raise ValueError("feature_group_count and batch_group_count must be >= 1")
    # lax's check and message, before the channel counts
    if feature_group_count > 1 and batch_group_count > 1:
        raise ValueError(
            "At most one of batch_group_count and feature_group_count may be > 1, got "
            f"batch_group_count={batch_group_count} and feature_group_count={feature_group_count}"
        )

    for name, shape in (("lhs", lhs_shape), ("rhs", rhs_shape)):
        if any(d == 0 for d in shape):
            xla_only.append(f"{name} has a zero-size dimension: shape {shape}")

    in_features = lhs_shape[dn.lhs_spec[1]]
    filter_in, filter_out = rhs_shape[dn.rhs_spec[1]], rhs_shape[dn.rhs_spec[0]]
    if in_features != filter_in * feature_group_count:
        spatial = "DHW"[3 - rank :] if rank <= 3 else f"{rank} spatial axes"
        layout = (
            f"dimension_numbers=None: lax's default, NC{spatial} input and OI{spatial} filter"
            if dimension_numbers is None
            else f"dimension_numbers={dimension_numbers!r}"
        )
        raise ValueError(
            f"input channels ({in_features}) must equal rhs input channels ({filter_in}) x feature_group_count "
            f"({feature_group_count}); lhs {lhs_shape}, rhs {rhs_shape} read with {layout}"
        )
    if filter_out % (feature_group_count * batch_group_count) != 0:
        raise ValueError(
            f"rhs output channels ({filter_out}) must be a multiple of feature_group_count x batch_group_count"
        )
    if lhs_shape[dn.lhs_spec[0]] % batch_group_count != 0:
        raise ValueError(f"batch size must be a multiple of batch_group_count ({batch_group_count})")

    in_spatial = [_dilated(lhs_shape[d], s) for d, s in zip(dn.lhs_spec[2:], lhs_dil, strict=True)]
    window = [_dilated(rhs_shape[d], s) for d, s in zip(dn.rhs_spec[2:], rhs_dil, strict=True)]
    if isinstance(padding, str):
        if any(d != 1 for d in lhs_dil):
            raise ValueError(  # lax's own refusal
                "String padding is not implemented for transposed convolution using this op. Please either "
                "exactly specify the required padding or use conv_transpose."
            )
        if padding.upper() not in ("SAME", "SAME_LOWER", "VALID"):
            raise PaddingNameError(
                f"padding must be 'SAME', 'SAME_LOWER', 'VALID' or (low, high) pairs, got {padding!r}"
            )
        pads = tuple(
            (int(lo), int(hi)) for lo, hi in lax.padtype_to_pads(in_spatial, window, strides, padding)
        )
    else:
        try:
            pads = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"padding must be 'SAME', 'SAME_LOWER', 'VALID' or a sequence of (low, high) pairs, got {padding!r}"
            ) from e
        if len(pads) != rank:
            raise ArgumentTypeError(
                f"padding must have {rank} (low, high) pairs, got {len(pads)}: {padding!r}"
            )
    for axis, ((lo, hi), w, size) in enumerate(zip(pads, window, in_spatial, strict=True)):
        if lo < 0 or hi < 0:
            xla_only.append(f"negative padding {(lo, hi)} on spatial axis {axis}")
        elif lo > w or hi > w:
            xla_only.append(f"padding {(lo, hi)} on spatial axis {axis} exceeds the window size {w}")
        if size + lo + hi < w:
            xla_only.append(
                f"window size {w} on spatial axis {axis} exceeds the padded input size {size + lo + hi}"
            )

    return ConvSpec(
        window_strides=strides,
        padding=pads,
        lhs_dilation=lhs_dil,
        rhs_dilation=rhs_dil,
        dimension_numbers=dn,
        feature_group_count=int(feature_group_count),
        batch_group_count=int(batch_group_count),
        precision=_hashable(precision),
        preferred_element_type=None if preferred_element_type is None else np.dtype(preferred_element_type),
        xla_only="; ".join(xla_only),
    )
