"""The WinRS filter gradient as XLA partitions and vmaps it.

Under jit with the batch axis sharded over devices (weights replicated), each device computes the filter
gradient of its shard with its own plan and the results are summed with one all-reduce: activations are never
all-gathered (jax.experimental.custom_partitioning). Under vmap the stacked problems run in one FFI call.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from winrs_jax import _ffi
from winrs_jax.planner import PlannerOptions, plan_canonical


@dataclasses.dataclass(frozen=True)
class Layer:
    """What the filter gradient needs besides X (N x H x W x C) and dY (N x OH x OW x K)."""

    filter_hw: tuple[int, int]
    pads: tuple[int, int, int, int]
    path: str
    reference: str
    options: PlannerOptions


def _local_filter_grad(x: jax.Array, dy: jax.Array, layer: Layer) -> jax.Array:
    """dW (K x FH x FW x C) of one device's problem, planned for its own shapes."""
    plan = plan_canonical(x.shape[0], tuple(x.shape[1:3]), x.shape[3], dy.shape[3], layer.filter_hw, layer.pads,
                          layer.path, layer.reference, layer.options)  # fmt: skip
    if not plan.supported:  # shapes were validated for the whole problem; a shard cannot make them invalid
        raise ValueError(f"WinRS cannot run this shard: {plan.reason}")
    return _ffi.backward_filter_call(
        x, dy, plan.filter_shape_ohwi, plan.workspace_elems, plan.ffi_attributes()
    )


@functools.partial(custom_partitioning, static_argnums=(2,))
def _partitioned(x: jax.Array, dy: jax.Array, layer: Layer) -> jax.Array:
    return _local_filter_grad(x, dy, layer)


def _batch_axes(arg_shapes: Any) -> Any:
    spec = arg_shapes[0].sharding.spec
    return spec[0] if len(spec) else None


def _partition(layer: Layer, mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
    axes = _batch_axes(arg_shapes)
    shardings = (NamedSharding(mesh, P(axes)), NamedSharding(mesh, P(axes)))

    def lower(x: jax.Array, dy: jax.Array) -> jax.Array:
        dw = _local_filter_grad(x, dy, layer)
        return dw if axes is None else lax.psum(dw, axes)

    return mesh, lower, NamedSharding(mesh, P()), shardings


def _infer(layer: Layer, mesh: Any, arg_shapes: Any, result_shape: Any) -> NamedSharding:
    return NamedSharding(mesh, P())


_partitioned.def_partition(
    partition=_partition,
    infer_sharding_from_operands=_infer,
    sharding_rule="n h w c, n p q k -> k i j c",
    reduction_factors=("n",),
    need_replication_factors=("h", "w", "c", "p", "q", "k", "i", "j"),
)


def filter_grad(x: jax.Array, dy: jax.Array, layer: Layer) -> jax.Array:
    """dW (K x FH x FW x C, float32) of X (N x H x W x C) and dY (N x OH x OW x K), both in the storage type
    of layer.path."""

    @jax.custom_batching.custom_vmap
    def batchable(x: jax.Array, dy: jax.Array) -> jax.Array:
        return _partitioned(x, dy, layer)

    @batchable.def_vmap
    def stacked(axis_size: int, in_batched: Any, x: jax.Array, dy: jax.Array) -> Any:
        # custom_partitioning has no batching rule; the FFI call stacks vmapped problems itself.
        x_batched, dy_batched = in_batched
        fn = jax.vmap(_local_filter_grad, in_axes=(0 if x_batched else None, 0 if dy_batched else None, None))
        return fn(x, dy, layer), True

    return batchable(x, dy)
