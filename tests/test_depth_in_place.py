"""3D layers whose kernels read X in place by depth slice (winrs_backward_filter_3d; paper section 3, Level 2
without the depth-shifted copies of X): the 16-bit direct kernel's filter-row and filter-window tiles."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import reference_general_filter_grad
from jax import lax

import winrs_jax
from winrs_jax import _ffi
from winrs_jax.planner import PATHS, PlannerOptions

NDHWC = ("NDHWC", "DHWIO", "NDHWC")

# x shape (N, D, H, W, C), output channels, filter (FD, FH, FW), depth pads, depth stride, depth dilation:
# padding on both sides, on one side (the taps' first or last slices meet only padding), strided and dilated
# in depth, a 5x5x5 filter (several filter-window tiles), and a depth of one output slice. Layers of 16 input
# channels pack their taps into the problems' channels (Plan.depth_packing): 3 taps in one problem, 5 in two (3
# and 2), also with the depth stride; the 8-, 32- and 64-channel ones run a problem per tap.
CASES = [
    ((2, 5, 6, 16, 16), 16, (3, 3, 3), (1, 1), 1, 1),
    ((2, 6, 5, 12, 8), 24, (3, 3, 3), (2, 0), 1, 1),
    ((1, 7, 6, 16, 16), 8, (3, 3, 3), (1, 1), 2, 1),
    ((2, 7, 5, 16, 8), 16, (3, 3, 3), (2, 2), 1, 2),
    ((1, 6, 7, 10, 16), 16, (5, 5, 5), (2, 2), 1, 1),
    ((3, 3, 6, 9, 8), 8, (3, 3, 3), (0, 0), 1, 1),
    ((2, 5, 6, 12, 32), 16, (3, 3, 3), (1, 1), 1, 1),
    ((1, 9, 5, 12, 32), 8, (3, 3, 3), (2, 2), 2, 2),
    ((1, 4, 5, 12, 64), 16, (3, 3, 3), (1, 1), 1, 1),
]
IDS = ["pads-1-1", "pads-2-0", "depth-stride-2", "depth-dilation-2", "5x5x5", "one-output-slice", "32-channels",
       "32-channels-strided-dilated", "64-channels"]  # fmt: skip
PACKING = [3, 1, 3, 1, 3, 1, 1, 1, 1]


def _geometry(case):
    x_shape, _, filter_dhw, depth_pads, stride, dilation = case
    pads = (depth_pads, (filter_dhw[1] // 2,) * 2, (filter_dhw[2] // 2,) * 2)
    return dict(window_strides=(stride, 1, 1), padding=pads, rhs_dilation=(dilation, 1, 1))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_16bit_3d_layers_read_x_by_depth_slice(case, dtype, rng):
    """One call of the depth target, no copies of X, and the float64 filter gradient of the same (16-bit)
    inputs: the products are exact in FP32 and summed in FP32 (the paper's FP32 rows: MARE about 1e-7), then
    dW is rounded once to the filter's dtype (half its eps, relative)."""
    x_shape, k, filter_dhw, *_ = case
    geometry = _geometry(case)
    x = jnp.asarray(rng.standard_normal(x_shape), dtype)
    w_shape = (*filter_dhw, x_shape[4], k)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(x, jnp.zeros(w_shape, dtype), **geometry,
                                                          dimension_numbers=NDHWC))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), dtype)
    plan = winrs_jax.plan(x, jnp.zeros(w_shape, dtype), **geometry, dimension_numbers=NDHWC)
    assert plan.depth_in_place and "copies     none" in str(plan), str(plan)
    assert plan.depth_packing == PACKING[CASES.index(case)]
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, **geometry,
                                   dimension_numbers=NDHWC))  # fmt: skip
    text = fn.lower(x, dy).as_text()
    assert text.count(f"@{_ffi.DEPTH_TARGET}") == 1 and f"@{_ffi.TARGET}(" not in text, text
    dw = fn(x, dy)  # FD x FH x FW x C x K
    assert dw.dtype == dtype
    dw = np.asarray(dw, np.float64)
    expected = reference_general_filter_grad(x, dy, filter_dhw, geometry["window_strides"], geometry["padding"],
                                             geometry["rhs_dilation"])  # fmt: skip
    expected = np.moveaxis(expected, 0, -1)
    np.testing.assert_allclose(
        dw, expected, rtol=float(jnp.finfo(dtype).eps) / 2, atol=1e-5 * np.abs(expected).max()
    )


def test_3d_gradients_through_conv_match_xla_in_channels_first_layout(rng):
    """winrs_jax.conv of a bfloat16 3D layer in NCDHW / OIDHW: the depth target on the transposed operands,
    both gradients as lax's (dW rounded to bfloat16 once, as XLA's)."""
    dn = ("NCDHW", "OIDHW", "NCDHW")
    x = jnp.asarray(rng.standard_normal((2, 16, 5, 6, 16)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((8, 16, 3, 3, 3)), jnp.bfloat16)

    def loss(conv, x, w):
        return jnp.sum(jnp.sin(conv(x, w, (1, 1, 1), "SAME", dimension_numbers=dn).astype(jnp.float32)))

    ours = jax.jit(jax.grad(functools.partial(loss, winrs_jax.conv), argnums=(0, 1)))
    assert _ffi.DEPTH_TARGET in ours.lower(x, w).as_text()
    theirs = jax.jit(jax.grad(functools.partial(loss, lax.conv_general_dilated), argnums=(0, 1)))(x, w)
    for a, b in zip(ours(x, w), theirs, strict=True):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=0, atol=8 * 2.0**-8 * np.abs(b).max())


def test_vmapped_3d_layers_keep_the_copies(rng):
    """Under vmap the stacked problems are the members' (the depth taps stack inside them): the copies of X's
    depth slices stay, with the same result (up to the order of FP32 sums: one rounding of dW to bfloat16)."""
    x = jnp.asarray(rng.standard_normal((2, 2, 4, 6, 16, 16)), jnp.bfloat16)
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 3, 16, 8), window_strides=(1, 1, 1),
                           padding="SAME", dimension_numbers=NDHWC)  # fmt: skip
    dy = jnp.asarray(rng.standard_normal((2, 2, 4, 6, 16, 8)), jnp.bfloat16)
    batched = jax.jit(jax.vmap(fn))
    text = batched.lower(x, dy).as_text()
    assert f"@{_ffi.TARGET}(" in text and _ffi.DEPTH_TARGET not in text
    one = jax.jit(fn)
    for i in range(2):
        a, b = np.asarray(batched(x, dy)[i], np.float32), np.asarray(one(x[i], dy[i]), np.float32)
        np.testing.assert_allclose(a, b, rtol=2.0**-8, atol=1e-5 * np.abs(b).max())


def _depth_call(x_shape=(2, 5, 6, 16, 16), dy_shape=(2, 5, 6, 16, 16), dw_shape=(3, 16, 3, 3, 16),
                plan_path="bf16", dtype=jnp.bfloat16, flat_x=False, **overrides):  # fmt: skip
    """A direct call of the depth target: the plan of the 2D problem, the depth attributes and `overrides`."""
    plan = winrs_jax.planner.plan_canonical(x_shape[0] * dy_shape[1], x_shape[2:4], x_shape[4], dy_shape[4],
                                            dw_shape[2:4], (1, 1, 1, 1), plan_path, plan_path,
                                            PlannerOptions())  # fmt: skip
    attributes = dict(plan.ffi_attributes(), in_depth=x_shape[1], out_depth=dy_shape[1], depth_stride=1,
                      depth_dilation=1, depth_pad=1, filter_depth=dw_shape[0])  # fmt: skip
    attributes.update(overrides)
    x, dy = jnp.ones(x_shape, dtype), jnp.ones(dy_shape, dtype)
    if flat_x:
        x = x.reshape(-1, *x_shape[2:])
    return _ffi.backward_filter_call(x, dy, dw_shape[:1], dw_shape[1:], plan.workspace_elems, attributes,
                                     _ffi.DEPTH_TARGET)  # fmt: skip


def test_depth_handler_reads_the_padding_as_zeros():
    """All-ones X and dY: tap fd's dW counts the (output slice, input slice) pairs inside the volume times the
    positions its height and width taps meet: depth taps 0 and 2 lose one slice to the padding."""
    dw = np.asarray(_depth_call())
    inner = 6 * 16  # the middle height and width tap meets every position of a 6 x 16 map
    assert dw[1, 0, 1, 1, 0] == 2 * 5 * inner and dw[0, 0, 1, 1, 0] == dw[2, 0, 1, 1, 0] == 2 * 4 * inner


def test_more_depth_taps_than_one_launch_takes_keep_the_copies():
    """A launch takes its problems from blockIdx.y (at most 65535): a filter of 65537 depth taps (a depth padded
    by 32768 on each side) is planned with the copies, whose launches split the problems."""
    x = jax.ShapeDtypeStruct((1, 1, 6, 16, 64), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((65537, 3, 3, 64, 16), jnp.bfloat16)
    plan = winrs_jax.plan(x, w, (1, 1, 1), ((32768, 32768), (1, 1), (1, 1)), dimension_numbers=NDHWC)
    assert plan.supported and plan.depth == (1, 1, 65537) and not plan.depth_in_place
    few = winrs_jax.plan(x, jax.ShapeDtypeStruct((3, 3, 3, 64, 16), jnp.bfloat16), (1, 1, 1), "SAME",
                         dimension_numbers=NDHWC)  # fmt: skip
    assert few.depth_in_place


def test_depth_handler_unpacks_packed_taps():
    """Two taps of 32 channels packed into each of two problems (the handler takes any multiple of 16 channels;
    the planner packs layers of 16): all-ones X and dY, so each dW entry counts the (output slice, input slice)
    pairs inside the volume times the positions its height and width taps meet; the fourth tap, past the
    filter's three, reads zeros."""
    dw = np.asarray(_depth_call(x_shape=(2, 5, 6, 16, 32), dw_shape=(2, 16, 3, 3, 64), filter_depth=3))
    inner = 2 * 6 * 16  # the middle height and width tap meets every position of a 6 x 16 map, 2 samples
    # problem g's channel 32 j + c: tap 2 g + j
    assert dw[0, 0, 1, 1, 0] == 4 * inner and dw[0, 0, 1, 1, 32] == 5 * inner
    assert dw[1, 0, 1, 1, 0] == 4 * inner and not np.any(dw[1, ..., 32:])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(in_depth=4), "depths do not match"),
        (dict(out_depth=0), "depth attribute out of range"),
        (dict(depth_stride=0), "depth attribute out of range"),
        (dict(depth_dilation=-1), "depth attribute out of range"),
        (dict(dy_shape=(3, 5, 6, 16, 16)), "different batch sizes"),
        (dict(flat_x=True), "rank 5"),
        (dict(plan_path="fp32", dtype=jnp.float32), "cannot read a 3D layer"),
        (dict(filter_depth=4), "filter_depth does not match"),
        (dict(filter_depth=0), "filter_depth does not match"),
        # Packed taps: 2 problems of 2 taps of 16 channels hold 3 or 4 taps; 8 channels a tap cannot pack.
        (dict(dw_shape=(2, 16, 3, 3, 32), filter_depth=2), "filter_depth does not match"),
        (dict(x_shape=(2, 5, 6, 16, 8), dw_shape=(2, 16, 3, 3, 16)), "multiple of 16"),
        # Depth slices past 32 bits (a wrapped slice would read data where the padding's zeros are).
        (dict(depth_stride=3, depth_dilation=2**31 - 1, depth_pad=-(2**31 - 1)), "depth slices of 2\\^31"),
        (dict(path=PATHS.index("fp16")), "element type of path fp16"),
    ],
)
def test_depth_handler_rejects_inconsistent_inputs(overrides, message):
    with pytest.raises(Exception, match=f"{_ffi.DEPTH_TARGET}: .*{message}"):
        np.asarray(_depth_call(**overrides))


@pytest.mark.parametrize("deterministic", [None, True])
def test_depth_taps_share_the_launch_waves(deterministic, rng):
    """The depth taps read in place run in one launch: the plan cuts the 128 images of each tap's problem for
    all three taps' blocks at once (one wave of an H100's 132 SMs: 43 segments of 3 images), not each as if alone
    (128 segments, three waves; 64 with deterministic sums); the handler plans the same from dW's leading axis
    (with deterministic sums its workspace follows the plan), and the result is the float64 one."""
    x_shape, w_shape = (8, 16, 8, 16, 64), (3, 3, 3, 64, 16)
    options = PlannerOptions(deterministic=deterministic, sm_count=132)
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.bfloat16)
    dy = jnp.asarray(rng.standard_normal((*x_shape[:-1], 16)), jnp.bfloat16)
    plan = winrs_jax.plan(x, jnp.zeros(w_shape, jnp.bfloat16), (1, 1, 1), "SAME", dimension_numbers=NDHWC,
                          options=options)  # fmt: skip
    alone = winrs_jax.planner.plan_canonical(plan.batch, plan.input_hw, *plan.channels, plan.filter_hw, plan.pads,
                                             plan.path, plan.reference, options)  # fmt: skip
    assert plan.depth_in_place and plan.depth_packing == 1 and plan.segments == 43 < alone.segments
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, window_strides=(1, 1, 1),
                                   padding="SAME", dimension_numbers=NDHWC, options=options))  # fmt: skip
    dw = np.asarray(fn(x, dy), np.float64)
    expected = np.moveaxis(reference_general_filter_grad(x, dy, (3, 3, 3), (1, 1, 1), ((1, 1),) * 3), 0, -1)
    np.testing.assert_allclose(
        dw, expected, rtol=2.0**-8, atol=1e-5 * np.abs(expected).max()
    )  # bf16: eps / 2


def test_batch_grouped_3d_layers_say_they_copy():
    """A 3D layer grouped over the batch runs its depth taps as copies, then the batch groups in each (run_plan):
    its plan neither reads X in place nor packs taps, and its printout says so."""
    x = jax.ShapeDtypeStruct((4, 5, 6, 16, 16), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((3, 3, 3, 16, 16), jnp.bfloat16)
    plan = winrs_jax.plan(x, w, (1, 1, 1), "SAME", dimension_numbers=NDHWC, batch_group_count=2)
    assert plan.batch_groups == 2 and not plan.depth_in_place and plan.depth_packing == 1
    assert "3 depth-shifted views of X" in str(plan)


def test_layers_of_more_than_64_channels_both_ways_keep_the_copies(rng):
    """Both channel counts above 64: the one-tap block runs the 2D problem, which reads no depth slices, so X's
    depth slices are copied (the filter-row tile on 128 x 128 channels that read them in place was removed:
    variants.h, kWideBlock), with the float64 gradient of the same 16-bit inputs."""
    x = jnp.asarray(rng.standard_normal((1, 3, 6, 16, 72)), jnp.bfloat16)
    w_shape = (3, 3, 3, 72, 80)
    plan = winrs_jax.plan(x, jnp.zeros(w_shape, jnp.bfloat16), (1, 1, 1), "SAME", dimension_numbers=NDHWC)
    assert plan.supported and plan.work_tile[0] == 1 and not plan.depth_in_place, str(plan)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, window_strides=(1, 1, 1),
                                   padding="SAME", dimension_numbers=NDHWC))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal((1, 3, 6, 16, 80)), jnp.bfloat16)
    text = fn.lower(x, dy).as_text()
    assert f"@{_ffi.TARGET}(" in text and _ffi.DEPTH_TARGET not in text
    expected = np.moveaxis(reference_general_filter_grad(x, dy, (3, 3, 3), (1, 1, 1), ((1, 1),) * 3), 0, -1)
    np.testing.assert_allclose(np.asarray(fn(x, dy), np.float64), expected, rtol=2.0**-8,
                               atol=1e-5 * np.abs(expected).max())  # fmt: skip
