"""Bad input fails at trace time with a message naming the problem; the handler rejects bad attributes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import winrs_jax
from winrs_jax import _ffi
from winrs_jax.planner import PATHS

NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(lhs_shape, rhs_shape, lhs_dtype=jnp.float32, rhs_dtype=jnp.float32, **kwargs):
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)
    args.update(kwargs)
    lhs, rhs = jnp.zeros(lhs_shape, lhs_dtype), jnp.zeros(rhs_shape, rhs_dtype)
    return jax.jit(lambda x, w: winrs_jax.conv(x, w, **args)).lower(lhs, rhs)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: _conv((2, 8, 8, 4), (3, 3, 5, 4)), ValueError, r"input channels \(4\) must equal rhs input"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4)), TypeError, "same rank"),  # lax's error types and checks
        (lambda: _conv((4, 8, 8, 4), (3, 3, 2, 6), feature_group_count=2, batch_group_count=2), ValueError,
         "At most one of batch_group_count and feature_group_count"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 6), dimension_numbers=None), ValueError,
         "NCHW input and OIHW filter"),
        (lambda: _conv((8, 4), (3, 4)), ValueError, "rank >= 3"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), padding=((1, 1),)), ValueError, "2 .low, high. pairs"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), padding="FULL"), ValueError, "FULL"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), window_strides=(1,)), ValueError, "window_strides must have 2"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), window_strides=(0, 1)), ValueError, "must be >= 1"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), jnp.float32, jnp.float16), TypeError, "same dtype"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), dimension_numbers=("NHWC", "HWIO")), TypeError, "dimension_numbers"),
        # lax's refusals, which a truncating int() or the dilated input's SAME padding used to let through
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), window_strides=(1.5, 2.0)), TypeError, "integers"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), padding=((1.0, 1.0), (1, 1))), ValueError, "pairs"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), lhs_dilation=(2, 2)), ValueError, "transposed convolution"),
        (lambda: _conv((2, 8, 8, 4), (3, 3, 4, 4), options={"mode": "winrs"}), TypeError, "PlannerOptions or None"),
        (lambda: winrs_jax.plan(jnp.zeros((2, 8, 8, 4)), jnp.zeros((3, 3, 4, 4)), (1, 1), "SAME",
                                dimension_numbers=NHWC, options="winrs"), TypeError, "got str"),
        (lambda: winrs_jax.conv_backward_filter(jnp.zeros((2, 8, 8, 4)), jnp.zeros((2, 8, 8, 4)), (3, 3, 4, 4),
                                                padding="SAME", dimension_numbers=NHWC, options={}),
         TypeError, "PlannerOptions"),
        (lambda: winrs_jax.conv_backward_filter(jnp.zeros((2, 8, 8, 4)), jnp.zeros((2, 8, 8, 4), jnp.bfloat16),
                                                (3, 3, 4, 4), padding="SAME", dimension_numbers=NHWC),
         TypeError, "out_grad's dtype bfloat16 does not fit lhs's float32"),
    ],
    ids=[
        "channels", "rank-mismatch", "both-group-counts", "default-layout", "rank-too-small", "padding-length",
        "padding-name", "strides-length",
        "zero-stride", "mixed-dtypes", "bad-dimension-numbers", "float-strides", "float-padding",
        "string-padding-transposed", "options-dict", "plan-options-string", "backward-filter-options-dict",
        "backward-filter-narrow-out-grad",
    ],
)  # fmt: skip
def test_bad_input_raises_at_trace_time(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    "kwargs",
    [dict(padding="SAM"), dict(padding=((1, 1),)), dict(rhs_dilation=(0, 1)), dict(lhs_dilation=(1, -1),
     padding=((1, 1), (1, 1))), dict(window_strides=(0, 1)), dict(feature_group_count=3)],
    ids=["padding-typo", "padding-length", "zero-rhs-dilation", "negative-lhs-dilation", "zero-stride",
         "groups"],
)  # fmt: skip
@pytest.mark.filterwarnings("ignore:divide by zero")  # lax's own shape rule on a zero stride
def test_bad_input_raises_what_lax_raises(kwargs):
    """Code that catches lax's exception catches winrs_jax's too (a padding typo is a RuntimeError in lax, a
    non-positive dilation or a wrong number of pads a TypeError); winrs_jax's are ValueErrors as well."""
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC) | kwargs
    lhs, rhs = jnp.zeros((2, 8, 8, 4)), jnp.zeros((3, 3, 4, 4))
    with pytest.raises(Exception) as lax_error:
        jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, **args)).lower(lhs, rhs)
    with pytest.raises(ValueError) as ours:
        jax.jit(lambda x, w: winrs_jax.conv(x, w, **args)).lower(lhs, rhs)
    assert isinstance(ours.value, type(lax_error.value)), (ours.value, lax_error.value)


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape, dtype, padding, reason",
    [
        ((2, 8, 8, 4), (3, 3, 4, 5), jnp.float32, ((-1, 1), (1, 1)), "negative padding"),
        ((2, 8, 8, 4), (3, 3, 4, 5), jnp.float32, ((4, 1), (1, 1)), "exceeds the window size"),
        ((2, 3, 8, 4), (5, 3, 4, 5), jnp.float32, ((1, 0), (1, 1)), "exceeds the padded input"),
        ((0, 8, 8, 4), (3, 3, 4, 5), jnp.float32, "SAME", "zero-size dimension"),
        ((2, 8, 8, 4), (3, 3, 4, 5), jnp.int32, "SAME", "not a floating type"),
    ],
    ids=["negative-padding", "padding-beyond-window", "window-beyond-input", "empty-batch", "int32"],
)
def test_inputs_lax_accepts_run_on_lax(lhs_shape, rhs_shape, dtype, padding, reason):
    """What lax.conv_general_dilated accepts and WinRS's path does not take runs on lax, gradients included; the
    plan says why."""
    rng = np.random.default_rng(0)
    # XLA's GPU backend has no int32 convolution (cuDNN takes int8 only): lax runs integers on the CPU.
    device = jax.devices("cpu")[0] if jnp.issubdtype(dtype, jnp.integer) else None
    lhs = jax.device_put(jnp.asarray(rng.integers(-3, 4, lhs_shape), dtype), device)
    rhs = jax.device_put(jnp.asarray(rng.integers(-3, 4, rhs_shape), dtype), device)
    args = dict(window_strides=(1, 1), padding=padding, dimension_numbers=NHWC)
    ours = winrs_jax.conv(lhs, rhs, **args)
    np.testing.assert_array_equal(ours, jax.lax.conv_general_dilated(lhs, rhs, **args))
    plan = winrs_jax.plan(lhs, rhs, **args)
    assert not plan.supported and reason in plan.reason
    if jnp.issubdtype(dtype, jnp.floating) and ours.size:
        grads = jax.grad(lambda w: jnp.sum(winrs_jax.conv(lhs, w, **args) ** 2))(rhs)
        expected = jax.grad(lambda w: jnp.sum(jax.lax.conv_general_dilated(lhs, w, **args) ** 2))(rhs)
        np.testing.assert_allclose(grads, expected, rtol=1e-5, atol=1e-5)


def _attributes(**overrides):
    attrs = dict(
        pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, stride_h=1, stride_w=1, path=0, reference=0, sm_count=132,
        segments=1, buckets=0, variant0=-1, variant1=-1, atomic=0, smem_per_block=227 * 1024,
    )  # fmt: skip
    attrs.update(overrides)
    return attrs


def _call(workspace_elems=0, dw_shape=(4, 3, 3, 4), x_shape=(2, 8, 8, 4), dy_shape=(2, 8, 8, 4), dtype=jnp.float32,
          **attrs):  # fmt: skip
    x, dy = jnp.ones(x_shape, dtype), jnp.ones(dy_shape, dtype)
    stacked = tuple(dw_shape[:-4])
    return _ffi.backward_filter_call(x, dy, stacked, dw_shape[-4:], workspace_elems, _attributes(**attrs))


def test_handler_accepts_consistent_planner_inputs():
    dw = np.asarray(_call())
    # All-ones input and gradient: dW counts the (unpadded) positions each filter tap meets.
    edge, inner = 2 * 7 * 8, 2 * 8 * 8
    assert dw[0, 1, 1, 0] == inner and dw[0, 0, 1, 0] == edge


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(variant0=13), "forced kernel variant index out of range"),
        (dict(variant0=-2), "kernel variant index out of range"),
        (dict(variant0=1), "forced kernels cannot tile"),
        (dict(path=len(PATHS)), "unknown arithmetic path"),
        (dict(path=-1), "unknown arithmetic path"),
        (dict(path=3), "element type of path bf16"),
        (dict(sm_count=0), "planner attribute out of range"),
        (dict(segments=-1), "planner attribute out of range"),
        (dict(buckets=-1), "planner attribute out of range"),
        (dict(pad_top=2), "height does not match"),
        (dict(pad_left=-1, pad_right=3), "padding must be >= 0"),
        (dict(workspace_elems=3), "workspace size"),
        (dict(segments=4), "workspace size"),
        (dict(segments=4, buckets=1), "workspace size"),  # no buckets, but the chain's semaphores
        (dict(atomic=2), "atomic must be 0 or 1"),
        (dict(smem_per_block=0), "shared memory per block must be from 1"),
        (
            dict(
                path=1,
                variant0=12,
                smem_per_block=99 * 1024,
                dw_shape=(4, 3, 9, 4),
                x_shape=(2, 8, 22, 4),
                dy_shape=(2, 8, 16, 4),
            ),
            "forced kernels need more shared memory per block",
        ),  # alpha 16: 112 KiB
        (dict(atomic=1, buckets=1), "forced buckets and atomic adds exclude each other"),
        (dict(dw_shape=(4, 3, 3, 5)), "different input channels"),
        (dict(dy_shape=(3, 8, 8, 4)), "different batch sizes"),
        (dict(dw_shape=(4, 3, 11, 4), dy_shape=(2, 8, 0, 4)), "positive"),
        (dict(dw_shape=(4, 3, 11, 4), x_shape=(2, 8, 16, 4)), "no divisor in 2..9"),
    ],
)
def test_handler_rejects_inconsistent_inputs(overrides, message):
    with pytest.raises(Exception, match=f"{_ffi.TARGET}: .*{message}"):
        np.asarray(_call(**overrides))


def test_handler_rejects_storage_of_another_path():
    """bfloat16 buffers with the float32 path's attributes (and the reverse) never reach a kernel."""
    with pytest.raises(Exception, match=f"{_ffi.TARGET}: .*element type of path fp32"):
        np.asarray(_call(dtype=jnp.bfloat16))
    with pytest.raises(Exception, match=f"{_ffi.TARGET}: .*element type of path fp16"):
        np.asarray(_call(dtype=jnp.bfloat16, path=4))


def test_a_float64_result_is_left_to_xla():
    """preferred_element_type=float64 (x64 mode) asks for more than WinRS's float32 sums give: XLA computes it
    (numpy compares None equal to float64, which had let it through)."""
    with jax.enable_x64(True):
        lhs, rhs = jnp.ones((2, 8, 8, 4), jnp.float32), jnp.ones((3, 3, 4, 5), jnp.float32)
        plan = winrs_jax.plan(
            lhs, rhs, (1, 1), "SAME", dimension_numbers=NHWC, preferred_element_type=jnp.float64
        )
    assert not plan.supported and "preferred_element_type" in plan.reason, plan
