"""Registration of the WinRS FFI targets and the one call into them."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from winrs_jax import _winrs

# Targets' attributes change only with a new name; the names before stay registered for programs exported with
# them: "winrs_backward_filter_v2" and "winrs_backward_filter_3d_v2" (the same attributes without
# smem_per_block: planned for an H100), "winrs_backward_filter" and "winrs_backward_filter_3d" (nor the strides;
# the 3D target's first form, without filter_depth, lived 44 minutes within one session on 2026-11-25, df2cacd to
# c442305, and is not kept).
TARGET = "winrs_backward_filter_v3"
GROUPED_TARGET = "winrs_grouped_filter_grad"  # the direct kernels of grouped layers (cpp/winrs/grouped.h)
DEPTH_TARGET = "winrs_backward_filter_3d_v3"  # a 3D layer whose X the kernels read by depth slice


def _register() -> bool:
    for name, capsule in _winrs.cpu_targets().items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    cuda = _winrs.cuda_targets()
    for name, capsule in cuda.items():
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
    return bool(cuda)


CUDA_BUILT: bool = _register()


def export_disabled_checks() -> list[jax.export.DisabledSafetyCheck]:
    """Pass as jax.export.export(..., disabled_checks=...) to serialise functions that use winrs_jax.

    jax.export only admits custom calls with a compatibility guarantee from jax itself; winrs_jax keeps its own:
    the target name and its attributes change only with a new target name. The exported artifact runs where
    winrs_jax is installed (importing it registers the target)."""
    return [jax.export.DisabledSafetyCheck.custom_call(t) for t in (TARGET, GROUPED_TARGET, DEPTH_TARGET)]


def varying_axes(x: jax.Array) -> frozenset[str]:
    """The manual (shard_map) mesh axes x varies over."""
    aval = x if isinstance(x, jax.core.ShapedArray) else jax.typeof(x)
    manual = getattr(aval, "manual_axis_type", None)  # jax 0.10
    return frozenset(getattr(manual, "varying", None) or getattr(aval, "vma", None) or ())


def replicated(aval: Any) -> Any:
    """aval's sharding with no dimension partitioned (dW sums over the batch: it is never split by it)."""
    sharding = getattr(aval, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        return {}
    return {"sharding": sharding.update(spec=PartitionSpec())}


def backward_filter_call(
    x_nhwc: jax.Array,
    dy_nhwc: jax.Array,
    stacked: tuple[int, ...],
    filter_ohwi_shape: tuple[int, int, int, int],
    workspace_elems: int,
    attributes: dict[str, int],
    target: str = TARGET,
    input_layouts: list[tuple[int, ...]] | None = None,
) -> jax.Array:
    """dW (stacked + O_C x F_H x F_W x I_C, float32) of planned backward-filter convolutions (WinRS, or the
    direct grouped kernels with target GROUPED_TARGET): X and dY with len(stacked) leading axes of stacked
    problems, each axis equal to `stacked` or, for an operand shared by all problems, all of size 1.
    `input_layouts`: X's and dY's major-to-minor axis orders (default row-major; they differ only in where a unit
    axis sits, so the handler reads the same bytes)."""
    # Inside shard_map the results vary over the manual axes the operands vary over (check_vma): keep the type
    # of the operand that varies over the most axes, with the result's shape and dtype; under a mesh with
    # explicit axes no result dimension is partitioned (the operands' batch sharding says nothing about dW).
    base = jax.typeof(max((x_nhwc, dy_nhwc), key=lambda a: len(varying_axes(a))))
    out_types = (
        base.update(shape=(*stacked, *filter_ohwi_shape), dtype=jnp.float32, **replicated(base)),
        base.update(shape=(*stacked, workspace_elems), dtype=jnp.float32, **replicated(base)),
    )
    call = jax.ffi.ffi_call(target, out_types, input_layouts=input_layouts)
    filter_grad, _workspace = call(x_nhwc, dy_nhwc, **attributes)
    return filter_grad
