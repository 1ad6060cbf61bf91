"""winrs_jax's convolution as JAX primitives, so that every transformation follows from rules, as for lax's own.

- `conv_p` is lax.conv_general_dilated with one change: its transpose with respect to the filter (the filter
  gradient) is `filter_grad_p` instead of another lax convolution.
- `filter_grad_p(x, dy)` is that filter gradient: WinRS or XLA's, chosen when it is lowered (winrs_jax.choice).
  Like every convolution it is bilinear in its operands, so its own derivatives are convolutions again.

With JVP, transpose and batching rules, jvp/jacfwd, grad of any order (gradient penalties, Hessian-vector
products), vmap and shard_map work as they do for lax.conv_general_dilated. The input gradient and the
derivatives with respect to the input reuse lax's own transpose rules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import lax
from jax._src import dispatch as jax_dispatch
from jax._src.lax import convolution as lax_rules  # lax's transpose rules of its convolution primitive
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from winrs_jax import _ffi, _partition, choice
from winrs_jax.geometry import ConvSpec
from winrs_jax.planner import Plan, PlannerOptions, make_plan

_ShapeKey = tuple[tuple[int, ...], np.dtype]


def _key(value: Any) -> _ShapeKey:
    """(shape, dtype) of an array, tracer, aval, or an undefined primal of a transpose rule."""
    aval = getattr(value, "aval", value)
    return tuple(aval.shape), np.dtype(aval.dtype)


@functools.lru_cache(maxsize=4096)
def _lax_params(spec: ConvSpec, lhs: _ShapeKey, rhs: _ShapeKey, default_precision: Any) -> dict[str, Any]:
    """The parameters lax binds its convolution primitive with for this call (precision canonicalised as lax
    does, from jax_default_matmul_precision where the call gives none: `default_precision`, part of the key
    only), read from lax itself."""
    args = (jax.ShapeDtypeStruct(*lhs), jax.ShapeDtypeStruct(*rhs))
    jaxpr = jax.make_jaxpr(functools.partial(lax.conv_general_dilated, **spec.lax_kwargs()))(*args)
    (params,) = [e.params for e in jaxpr.eqns if e.primitive is lax.conv_general_dilated_p]
    return dict(params)


def _params(spec: ConvSpec, lhs: Any, rhs: Any, stack: int = 0) -> dict[str, Any]:
    """lax's parameters for one problem of operands with `stack` leading axes."""
    return _lax_params(
        spec,
        _key(_unstacked(lhs, stack)),
        _key(_unstacked(rhs, stack)),
        jax.config.jax_default_matmul_precision,
    )


def _stacked(fn: Callable[..., jax.Array], stack: int) -> Callable[..., jax.Array]:
    """fn mapped over `stack` leading axes of its operands; an operand whose leading axis has size 1 where
    another's is longer is shared (broadcast), not mapped."""
    if stack == 0:
        return fn

    def mapped(*args: jax.Array) -> jax.Array:
        sizes = [a.shape[0] for a in args]
        size = 0 if 0 in sizes else max(sizes)  # broadcasting's rule: 1 and 0 make 0
        axes = tuple(0 if a.shape[0] == size else None for a in args)
        args = tuple(a if axis == 0 else a[0] for a, axis in zip(args, axes, strict=True))
        return jax.vmap(_stacked(fn, stack - 1), in_axes=axes)(*args)

    return mapped


def _leading_shape(args: Any, dims: Any, stack: int) -> tuple[int, ...]:
    """The stacked problems' leading shape of a batching rule's operands (without vmap's axis)."""
    shapes = [
        a.shape[:stack] if d is None else np.delete(a.shape, d)[:stack]
        for a, d in zip(args, dims, strict=True)
    ]
    return tuple(np.broadcast_shapes(*(tuple(int(v) for v in shape) for shape in shapes)))


def _shared(value: Any, stack: int) -> bool:
    """Whether an operand with `stack` leading axes is shared by all stacked problems (axes of size 1)."""
    return stack > 0 and all(d == 1 for d in getattr(value, "aval", value).shape[:stack])


def _sum_if_shared(ct: jax.Array, operand: Any, stack: int) -> jax.Array:
    """The cotangent of an operand that every stacked problem reads is the sum over the problems."""
    return ct.sum(axis=tuple(range(stack)), keepdims=True) if _shared(operand, stack) else ct


def _same_varying_axes(*args: jax.Array) -> list[jax.Array]:
    """Inside shard_map, casts operands to vary over the union of the manual axes they vary over, as lax does
    for its own primitives; the transpose of that cast sums a replicated weight's cotangent over those axes."""
    axes = [_ffi.varying_axes(a) for a in args]
    union = frozenset().union(*axes)
    missing = [tuple(sorted(union - ax)) for ax in axes]
    return [lax.pcast(a, m, to="varying") if m else a for a, m in zip(args, missing, strict=True)]


def _xla_conv(
    lhs: jax.Array, rhs: jax.Array, *, spec: ConvSpec, options: Any, stack: int, out_sharding: Any = None
) -> jax.Array:
    sharding = dict(out_sharding=out_sharding) if out_sharding is not None and stack == 0 else {}
    return _stacked(functools.partial(lax.conv_general_dilated, **spec.lax_kwargs(), **sharding), stack)(
        lhs, rhs
    )


def canonical_out_sharding(out_sharding: Any) -> Any:
    """lax's reading of conv_general_dilated's out_sharding (a PartitionSpec of the context mesh becomes a
    NamedSharding), or None where this jax has no such reading."""
    canonicalize = getattr(lax_rules, "canonicalize_sharding", None)
    if out_sharding is None or canonicalize is None:
        return None
    return canonicalize(out_sharding, "conv_general_dilated")


def bind_conv(
    lhs: jax.Array, rhs: jax.Array, spec: ConvSpec, options: PlannerOptions | None, stack: int = 0,
    out_sharding: Any = None,
) -> jax.Array:  # fmt: skip
    """conv(lhs, rhs) as lax computes it, with the filter gradient of winrs_jax. `out_sharding`: the result's
    sharding under explicit mesh axes (canonical_out_sharding), where the operands' leave it ambiguous."""
    lhs, rhs = _same_varying_axes(lhs, rhs)
    return conv_p.bind(lhs, rhs, spec=spec, options=options, stack=stack, out_sharding=out_sharding)


def bind_filter_grad(
    lhs: jax.Array, out_grad: jax.Array, rhs_aval: Any, spec: ConvSpec, options: PlannerOptions | None,
    stack: int = 0,
) -> jax.Array:  # fmt: skip
    """d<out_grad, conv(lhs, rhs)>/d rhs, for rhs of rhs_aval's shape and dtype (without the stack axes)."""
    lhs, out_grad = _same_varying_axes(lhs, out_grad)
    return filter_grad_p.bind(
        lhs, out_grad, spec=spec, options=options,
        mode=choice.current_mode(options.mode if options else None), rhs_shape=tuple(rhs_aval.shape)[stack:],
        rhs_dtype=np.dtype(rhs_aval.dtype), stack=stack,
    )  # fmt: skip


def _unstacked(value: Any, stack: int) -> Any:
    """The aval of one problem of a stack: of an array, a tracer or an undefined primal of a transpose rule. Its
    sharding loses the stack's axes too (under explicit mesh axes, the stack's spec on a problem's shape would
    put each partitioned axis one dimension off)."""
    try:
        aval = jax.typeof(value)
    except TypeError:  # an aval, or a transpose rule's undefined primal
        aval = getattr(value, "aval", value)
    sharding = getattr(aval, "sharding", None)
    if stack == 0 or not isinstance(sharding, NamedSharding):
        return aval.update(shape=aval.shape[stack:])
    return aval.update(shape=aval.shape[stack:], sharding=sharding.update(spec=P(*sharding.spec[stack:])))


def _restacked(aval: Any, stacked: tuple[int, ...], operand: Any) -> Any:
    """One problem's aval with the stack's leading axes put back, partitioned as the stacked operand's are (where
    it has them) under an explicit mesh."""
    sharding = getattr(aval, "sharding", None)
    if not stacked or not isinstance(sharding, NamedSharding):
        return aval.update(shape=(*stacked, *aval.shape))
    lead: tuple[Any, ...] = ()
    if tuple(operand.shape[: len(stacked)]) == tuple(stacked):
        lead = tuple(getattr(getattr(operand, "sharding", None), "spec", ()))[: len(stacked)]
    lead += (None,) * (len(stacked) - len(lead))
    return aval.update(shape=(*stacked, *aval.shape), sharding=sharding.update(spec=P(*lead, *sharding.spec)))


# ---- conv_p: the forward convolution, on `stack` leading axes of stacked problems (vmap of both operands) ----


def _conv_abstract_eval(
    lhs: Any, rhs: Any, *, spec: ConvSpec, options: Any, stack: int, out_sharding: Any = None
) -> Any:
    return _conv_aval(lhs, rhs, spec, stack, out_sharding, jax.sharding.get_abstract_mesh())


@functools.lru_cache(maxsize=4096)
def _conv_aval(lhs: Any, rhs: Any, spec: ConvSpec, stack: int, out_sharding: Any, context_mesh: Any) -> Any:
    """The result's aval and effects. JAX asks for them four times per call in a training step's gradient (trace,
    linearize, transpose); lax's shape rule each time took 0.8 of the 2.0 ms that winrs_jax.conv added to a
    re-trace and lowering on a 2-core CPU (issue 8's budget: 1 ms). lax's rule reads the context mesh too
    (`context_mesh`, part of the key only): operands of no mesh take it."""
    params = _params(spec, lhs, rhs, stack)
    if out_sharding is not None and stack == 0:
        params = dict(params, out_sharding=out_sharding)
    out, effects = lax.conv_general_dilated_p.abstract_eval(
        _unstacked(lhs, stack), _unstacked(rhs, stack), **params
    )
    stacked = np.broadcast_shapes(lhs.shape[:stack], rhs.shape[:stack])
    return _restacked(out, stacked, lhs), effects


conv_p = Primitive("winrs_conv")
conv_p.def_impl(_xla_conv)
conv_p.def_effectful_abstract_eval(_conv_abstract_eval)
mlir.register_lowering(conv_p, mlir.lower_fun(_xla_conv, multiple_results=False))


def _conv_transpose_lhs(
    ct: jax.Array, lhs: Any, rhs: jax.Array, *, spec: ConvSpec, stack: int, **_: Any
) -> Any:
    """The input gradient: lax's."""
    lhs_aval = ad.UndefinedPrimal(_unstacked(lhs, stack))

    def single(ct: jax.Array, rhs: jax.Array) -> jax.Array:
        params = _params(spec, lhs_aval, rhs, 0)
        return lax_rules._conv_general_dilated_transpose_lhs(ct, lhs_aval, rhs, **params)

    return _sum_if_shared(_stacked(single, stack)(ct, rhs), lhs, stack)


def _conv_transpose_rhs(
    ct: jax.Array, lhs: jax.Array, rhs: Any, *, spec: ConvSpec, options: Any, stack: int, **_: Any
) -> Any:
    """The filter gradient: winrs_jax's, with the filter's sharding as lax's has (a filter partitioned over
    explicit mesh axes, its output features say, takes a cotangent partitioned alike)."""
    dw = _sum_if_shared(bind_filter_grad(lhs, ct, rhs.aval, spec, options, stack), rhs, stack)
    sharding = getattr(rhs.aval, "sharding", None)
    spec_axes = getattr(sharding, "spec", ())
    if stack == 0 and isinstance(sharding, NamedSharding) and any(a is not None for a in spec_axes):
        dw = jax.sharding.reshard(dw, spec_axes)
    return dw


ad.defbilinear(conv_p, _conv_transpose_lhs, _conv_transpose_rhs)


def _merge_axis(x: jax.Array, src: int, dst: int) -> jax.Array:
    """Folds axis src into axis dst (numbered without src), src major."""
    perm = [i for i in range(x.ndim) if i != src]
    perm.insert(dst, src)
    shape = [d for i, d in enumerate(x.shape) if i != src]
    shape[dst] *= x.shape[src]
    return lax.reshape(x, tuple(shape), tuple(perm))


def _split_axis(x: jax.Array, axis: int, major: int) -> jax.Array:
    """Splits axis into (major, rest): the inverse of _merge_axis."""
    shape = (*x.shape[:axis], major, x.shape[axis] // major, *x.shape[axis + 1 :])
    return lax.reshape(x, shape)


def _to_front(args: Any, dims: Any, stack: int) -> list[jax.Array]:
    """Operands of a batching rule with vmap's axis as a new first stacked axis. One that vmap does not map and
    that was unstacked or shared so far stays shared (a size-1 axis, no copy); the others are stacked whole."""
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    stacked = _leading_shape(args, dims, stack)

    def leading(a: jax.Array, d: Any) -> jax.Array:
        if d is None and (stack == 0 or _shared(a, stack)):
            return a[None]
        a = a[None] if d is None else jax.numpy.moveaxis(a, d, 0)
        return jax.numpy.broadcast_to(a, (size, *stacked, *a.shape[stack + 1 :]))

    return [leading(a, d) for a, d in zip(args, dims, strict=True)]


def _conv_batch(
    args: Any, dims: Any, *, spec: ConvSpec, options: Any, stack: int, out_sharding: Any = None
) -> tuple[jax.Array, int]:
    """A vmapped input folds into the batch axis and a vmapped filter into the output features, as lax does;
    both vmapped (an ensemble) become stacked problems, whose filter gradients run in one WinRS launch. (An
    out_sharding is the unbatched result's: conv reshards the batched one to it.)"""
    (lhs, rhs), (lhs_dim, rhs_dim) = args, dims
    lhs_spec, rhs_spec, out_spec = (tuple(stack + d for d in s) for s in spec.dimension_numbers)
    ungrouped = spec.feature_group_count == 1 and spec.batch_group_count == 1
    if ungrouped and rhs_dim is None and lhs.shape[lhs_dim] > 0:
        out = bind_conv(_merge_axis(lhs, lhs_dim, lhs_spec[0]), rhs, spec, options, stack)
        return _split_axis(out, out_spec[0], lhs.shape[lhs_dim]), out_spec[0]
    if ungrouped and lhs_dim is None and rhs.shape[rhs_dim] > 0:
        out = bind_conv(lhs, _merge_axis(rhs, rhs_dim, rhs_spec[0]), spec, options, stack)
        return _split_axis(out, out_spec[1], rhs.shape[rhs_dim]), out_spec[1]
    return bind_conv(*_to_front(args, dims, stack), spec, options, stack + 1), 0


batching.primitive_batchers[conv_p] = _conv_batch


# ---- filter_grad_p: the filter gradient, on `stack` leading axes of stacked problems ----


def _filter_grad_aval(x: Any, dy: Any, rhs_shape: tuple[int, ...], rhs_dtype: np.dtype, stack: int) -> Any:
    """The result's type: the stacked problems' leading axes and rhs's shape and dtype, varying over the manual
    axes the operands vary over, and not partitioned under an explicit mesh (dW sums over the batch)."""
    base = max((x, dy), key=lambda a: len(_ffi.varying_axes(a)))
    stacked = np.broadcast_shapes(x.shape[:stack], dy.shape[:stack])
    return base.update(shape=(*stacked, *rhs_shape), dtype=rhs_dtype, **_ffi.replicated(base))


def _winrs_filter_grad(
    x: jax.Array, dy: jax.Array, plan: Plan, spec: ConvSpec, options: Any, stack: int
) -> jax.Array:
    """WinRS on operands in any layout with `stack` leading axes, dW in rhs's layout."""
    dn = spec.dimension_numbers
    lead = tuple(range(stack))

    def canonical(a: jax.Array, batch: int, feature: int, spatial: tuple[int, ...]) -> jax.Array:
        """... x N x [D x] H x W x C; a 1D operand gets a unit height axis by a reshape (run_plan's one_d)."""
        a = a.transpose((*lead, *(stack + d for d in (batch, *spatial, feature))))
        return lax.reshape(a, (*a.shape[: stack + 1], 1, *a.shape[stack + 1 :])) if len(spatial) == 1 else a

    # dY is stored like X (a bfloat16 layer with preferred_element_type=float32 has a float32 dY).
    dw = _partition.run_plan(
        canonical(x, dn.lhs_spec[0], dn.lhs_spec[1], dn.lhs_spec[2:]),
        canonical(dy, dn.out_spec[0], dn.out_spec[1], dn.out_spec[2:]).astype(x.dtype),
        plan,
        options or PlannerOptions(),
        stack,
        one_d=len(dn.lhs_spec) == 3,
    )
    if len(dn.rhs_spec) == 3:  # drop the unit height axis of a 1D filter
        dw = dw.squeeze(stack + 1)
    # dW is O x spatial... x I; put each axis where the rhs layout has it.
    order = (dn.rhs_spec[0], *dn.rhs_spec[2:], dn.rhs_spec[1])
    return dw.transpose((*lead, *(stack + int(d) for d in np.argsort(order))))


def _device_shape(x: Any, spec: ConvSpec, stack: int) -> tuple[int, ...]:
    """One problem's input shape as each device runs it: with the batch partitioned over mesh axes (known at
    trace time under explicit axes), the shard's."""
    shape = list(_unstacked(x, stack).shape)
    if spec.batch_group_count > 1:  # a shard of the batch is not a batch-grouped layer of its own
        return tuple(shape)
    batch = spec.dimension_numbers.lhs_spec[0]
    sharding = getattr(jax.typeof(x), "sharding", None)
    spec_axes = getattr(sharding, "spec", ())
    if len(spec_axes) > stack + batch and spec_axes[stack + batch] is not None:
        axes = spec_axes[stack + batch]
        for name in axes if isinstance(axes, tuple) else (axes,):
            shape[batch] //= sharding.mesh.shape[name]
    return tuple(shape)


def _filter_grad_impl(
    x: jax.Array, dy: jax.Array, *, spec: ConvSpec, options: Any, mode: str, rhs_shape: tuple[int, ...],
    rhs_dtype: np.dtype, stack: int,
) -> jax.Array:  # fmt: skip
    stacked = np.broadcast_shapes(x.shape[:stack], dy.shape[:stack])
    if 0 in stacked:  # no problems (vmap over an empty axis): nothing to plan, measure or run
        return jax.numpy.zeros((*stacked, *rhs_shape), rhs_dtype)
    one_x = _unstacked(x, stack)
    plan = make_plan(one_x.shape, rhs_shape, one_x.dtype, spec, options)
    # Measured on the shape each device runs (a shard of the batch under explicit mesh axes).
    local_shape = _device_shape(x, spec, stack)
    local = make_plan(local_shape, rhs_shape, one_x.dtype, spec, options)
    measured, measured_shape = (local, local_shape) if local.supported else (plan, one_x.shape)
    winrs, _, chosen = choice.choose(measured, measured_shape, rhs_shape, one_x.dtype, spec, options, mode)
    if winrs:
        if chosen is not options:  # an alternative path measured faster
            options, plan = chosen, make_plan(one_x.shape, rhs_shape, one_x.dtype, spec, chosen)
        return _winrs_filter_grad(x, dy, plan, spec, options, stack).astype(rhs_dtype)

    def single(x: jax.Array, dy: jax.Array) -> jax.Array:
        rhs = ad.UndefinedPrimal(_filter_grad_aval(jax.typeof(x), jax.typeof(dy), rhs_shape, rhs_dtype, 0))
        return lax_rules._conv_general_dilated_transpose_rhs(dy, x, rhs, **_params(spec, x, rhs))

    return _stacked(single, stack)(x, dy)


filter_grad_p = Primitive("winrs_filter_grad")
filter_grad_p.def_impl(_filter_grad_impl)
filter_grad_p.def_abstract_eval(
    lambda x, dy, *, rhs_shape, rhs_dtype, stack, **_: _filter_grad_aval(x, dy, rhs_shape, rhs_dtype, stack)
)
_lower_filter_grad_impl = mlir.lower_fun(_filter_grad_impl, multiple_results=False)


def _lower_filter_grad(ctx: Any, x: Any, dy: Any, **params: Any) -> Any:
    """_filter_grad_impl's lowering; for one device (a jit of one device's sharding context) without the custom
    partitioning, which has nothing to partition there."""
    one_device = getattr(ctx.module_context.axis_context, "num_devices", 0) == 1
    with _partition.lowering_for_one_device(one_device):
        return _lower_filter_grad_impl(ctx, x, dy, **params)


def _xla_filter_grad_impl(x: jax.Array, dy: jax.Array, **params: Any) -> jax.Array:
    return _filter_grad_impl(x, dy, **{**params, "mode": "xla"})


# WinRS's handlers are the CPU's and CUDA's; on a TPU or ROCm (a jax.export for them, or a run there) XLA's filter
# gradient, as lax's export would hold. WinRS's rule is the default one, so that an export for the CPU and CUDA
# holds it once (jax makes a branch per platform-specific rule, even of the same function).
mlir.register_lowering(filter_grad_p, _lower_filter_grad)
for _platform in ("tpu", "rocm"):
    mlir.register_lowering(
        filter_grad_p, mlir.lower_fun(_xla_filter_grad_impl, multiple_results=False), platform=_platform
    )
# Its lowering holds the data-parallel custom partitioning, which needs the devices (as jax's cuDNN attention).
jax_dispatch.prim_requires_devices_during_lowering.add(filter_grad_p)


def _filter_grad_transpose_x(ct: jax.Array, x: Any, dy: jax.Array, **params: Any) -> jax.Array:
    """<FG(x, dy), C> = <dy, conv(x, C)>: d/dx is conv's input gradient at filter C, applied to dy."""
    spec, stack = params["spec"], params["stack"]
    x_aval = ad.UndefinedPrimal(_unstacked(x, stack))

    def single(c: jax.Array, dy: jax.Array) -> jax.Array:
        return lax_rules._conv_general_dilated_transpose_lhs(dy, x_aval, c, **_params(spec, x_aval, c))

    return _sum_if_shared(_stacked(single, stack)(ct, dy), x, stack)


def _filter_grad_transpose_dy(ct: jax.Array, x: jax.Array, dy: Any, **params: Any) -> jax.Array:
    """<FG(x, dy), C> = <dy, conv(x, C)>: d/d dy is the forward convolution at filter C (a conv_p, whose own
    filter gradient is WinRS again)."""
    spec, options, stack = params["spec"], params["options"], params["stack"]
    c = ct.astype(params["rhs_dtype"])
    out = bind_conv(x, c, spec, options, stack).astype(dy.aval.dtype)
    return _sum_if_shared(out, dy, stack)


ad.defbilinear(filter_grad_p, _filter_grad_transpose_x, _filter_grad_transpose_dy)


def _filter_grad_batch(args: Any, dims: Any, *, stack: int, **params: Any) -> tuple[jax.Array, int]:
    """vmapped problems stack on a new leading axis and run in one FFI call; see _to_front."""
    return filter_grad_p.bind(*_to_front(args, dims, stack), stack=stack + 1, **params), 0


batching.primitive_batchers[filter_grad_p] = _filter_grad_batch


def checkpoint_policy(policy: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """`policy`, a jax.checkpoint policy, applied to winrs_jax.conv as to lax.conv_general_dilated.

    jax's policies name lax's primitives: `jax.checkpoint_policies.dots_saveable` keeps the outputs of lax's
    convolutions for the backward pass but does not know winrs_jax.conv's, which a checkpointed model then
    recomputes. `jax.checkpoint(f, policy=winrs_jax.checkpoint_policy(jax.checkpoint_policies.dots_saveable))`
    keeps both. The policy sees one problem's operands (without vmap's stacked axes) and lax's parameters. None
    stays None (jax.checkpoint's default)."""
    if policy is None:
        return None

    def applied(prim: Any, *args: Any, **params: Any) -> Any:
        if prim is conv_p:
            lhs, rhs = (_unstacked(a, params["stack"]) for a in args)
            return policy(lax.conv_general_dilated_p, lhs, rhs, **_params(params["spec"], lhs, rhs))
        return policy(prim, *args, **params)

    return applied
