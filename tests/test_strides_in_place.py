"""Strided layers whose X the 16-bit direct kernel's filter-row tile reads in place (cpp/winrs/variants.h,
strided_taps; cpp/cuda/direct_taps.cuh stages X's columns by phase): one FFI call on X and dY as they are, no
stride-1 pieces on copies of X[p::s, q::s]. Other strided layers keep DWM's pieces."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import reference_general_filter_grad
from jax import lax

import winrs_jax
from winrs_jax import _ffi
from winrs_jax.planner import PATHS, plan_canonical

NHWC = ("NHWC", "HWIO", "NHWC")
NDHWC = ("NDHWC", "DHWIO", "NDHWC")

# x shape, output channels, filter, strides, padding: ResNet's 3x3 stride 2 (even and odd maps), stride 2 in
# columns only and in rows only, row strides 3 and 4 (any row stride reads in place), one-sided and uneven
# padding, a 6- and a 5-wide filter (two column tiles, the second past the filter), a 1D layer, more than 64
# channels on both sides (the 128 x 128 block), 24 -> 72 channels on a 3x6 filter at strides (3, 2), and 3D layers
# strided in all three axes (16 and 32 channels: taps packed into the channels) or in height and width only.
CASES = [
    ((2, 10, 12, 32), 64, (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((2, 9, 11, 16), 16, (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((2, 9, 11, 16), 32, (3, 3), (1, 2), ((1, 0), (0, 1))),
    ((1, 13, 9, 64), 24, (3, 3), (2, 1), ((1, 1), (1, 1))),
    ((2, 14, 10, 16), 16, (3, 3), (3, 2), ((2, 0), (1, 1))),
    ((1, 17, 8, 32), 16, (5, 3), (4, 1), ((2, 2), (1, 1))),
    ((2, 8, 16, 32), 16, (3, 6), (2, 2), ((2, 1), (1, 2))),
    ((1, 9, 17, 16), 48, (3, 5), (2, 2), ((1, 1), (2, 2))),
    ((3, 1, 40, 64), 32, (1, 3), (1, 2), ((0, 0), (1, 1))),
    ((2, 9, 10, 128), 136, (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((1, 11, 8, 24), 72, (3, 6), (3, 2), ((1, 1), (2, 2))),
    ((1, 7, 10, 12, 16), 32, (3, 3, 3), (2, 2, 2), ((1, 1), (1, 1), (1, 1))),
    ((2, 7, 9, 10, 32), 16, (3, 3, 3), (2, 2, 2), ((1, 1), (1, 1), (1, 1))),
    ((2, 5, 8, 9, 64), 64, (3, 3, 3), (1, 2, 2), ((1, 1), (1, 1), (1, 1))),
]
IDS = ["3x3-s2", "odd-map-s2", "columns-s2", "rows-s2", "rows-s3-one-sided", "rows-s4-5x3", "3x6-s2", "3x5-s2",
       "1d-s2", "128-to-136-s2", "24-to-72-3x6-s3x2", "3d-s2-16-channels-packed", "3d-s2-32-channels-packed",
       "3d-hw-s2"]  # fmt: skip
# Depth taps per problem of a strided 3D layer read in place (Plan.depth_packing): 3 taps of 16 channels, 2 of 32.
PACKING = {16: 3, 32: 2, 64: 1}


def _case(case):
    x_shape, k, window, strides, padding = case
    dn = NDHWC if len(x_shape) == 5 else NHWC
    w_shape = (*window, x_shape[-1], k)
    if x_shape[1] == 1 and len(window) == 2 and window[0] == 1:  # the 1D layer
        x_shape, w_shape, dn = (x_shape[0], x_shape[2], x_shape[3]), w_shape[1:], ("NWC", "WIO", "NWC")
        window, strides, padding = window[1:], strides[1:], padding[1:]
    return x_shape, w_shape, dn, dict(window_strides=strides, padding=padding)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_16bit_strided_layers_read_x_in_place(case, dtype, rng):
    """One call, no strided pieces, and the float64 filter gradient of the same 16-bit inputs: exact products
    summed in FP32, dW rounded once to the filter's dtype (half its eps, relative)."""
    x_shape, w_shape, dn, geometry = _case(case)
    x = jnp.asarray(rng.standard_normal(x_shape), dtype)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(x, jnp.zeros(w_shape, dtype), **geometry,
                                                          dimension_numbers=dn))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), dtype)
    plan = winrs_jax.plan(x, jnp.zeros(w_shape, dtype), **geometry, dimension_numbers=dn)
    assert plan.supported and not plan.phases and plan.variant0 == 0, str(plan)
    assert "(read in place)" in str(plan)
    if len(x_shape) == 5:
        assert plan.depth_in_place and plan.depth_packing == PACKING[x_shape[-1]], str(plan)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, **geometry,
                                   dimension_numbers=dn))  # fmt: skip
    text = fn.lower(x, dy).as_text()
    assert text.count(f"@{_ffi.TARGET}(") + text.count(f"@{_ffi.DEPTH_TARGET}(") == 1, text
    dw = fn(x, dy)
    assert dw.dtype == dtype
    dw = np.asarray(dw, np.float64)
    spatial = len(x_shape) - 2
    expected = reference_general_filter_grad(x, dy, w_shape[:spatial], geometry["window_strides"],
                                             geometry["padding"])  # fmt: skip
    expected = np.moveaxis(expected, 0, -1)
    np.testing.assert_allclose(
        dw, expected, rtol=float(jnp.finfo(dtype).eps) / 2, atol=1e-5 * np.abs(expected).max()
    )


@pytest.mark.parametrize(
    "x_shape, k, window, strides, dtype, why",
    [
        ((2, 12, 12, 12), 32, 3, (2, 2), jnp.bfloat16, "channels in 16-byte pieces"),
        ((2, 12, 12, 32), 32, 6, (3, 3), jnp.bfloat16, "column stride 1 or 2"),
        ((2, 12, 12, 32), 32, 3, (2, 2), jnp.float32, "16-bit types"),
    ],
    ids=["12-channels", "column-stride-3", "float32"],
)
def test_other_strided_layers_keep_the_stride_1_pieces(x_shape, k, window, strides, dtype, why):
    """Where the filter-row tile does not run, the layer splits into DWM's pieces, as before, and the plan of the
    whole problem says why (the canonical plan with the strides is unsupported)."""
    x = jax.ShapeDtypeStruct(x_shape, dtype)
    w = jax.ShapeDtypeStruct((window, window, x_shape[-1], k), dtype)
    plan = winrs_jax.plan(x, w, strides, ((1, 1), (1, 1)), dimension_numbers=NHWC)
    assert plan.supported and plan.phases, str(plan)
    path = "bf16" if dtype == jnp.bfloat16 else "fp32"
    whole = plan_canonical(x_shape[0], x_shape[1:3], x_shape[3], k, (window, window), (1, 1, 1, 1), path, path,
                           strides=strides)  # fmt: skip
    assert not whole.supported and why in whole.reason


def _handler_call(strides, in_c=32, k=32, path="bf16", variant0=-1):
    x = jnp.ones((2, 9, 9, in_c), jnp.bfloat16)
    out_hw = tuple((9 + 2 - 3) // max(s, 1) + 1 for s in strides)
    dy = jnp.ones((2, *out_hw, k), jnp.bfloat16)
    plan = plan_canonical(2, (9, 9), in_c, k, (3, 3), (1, 1, 1, 1), "bf16", "bf16")
    attributes = dict(plan.ffi_attributes(), stride_h=strides[0], stride_w=strides[1], path=PATHS.index(path),
                      variant0=variant0)  # fmt: skip
    return _ffi.backward_filter_call(x, dy, (), (k, 3, 3, in_c), 0, attributes)


def test_handler_reads_strides_from_its_attributes():
    """All-ones X and dY, stride 2, padding 1 on a 9 x 9 map (5 x 5 dY): the centre tap meets X's 5 x 5 even
    positions, tap 0 of an axis X's odd ones from -1 (4 inside), tap 2 from 1 to 9 (4 inside: 9 is padding)."""
    dw = np.asarray(_handler_call((2, 2)), np.float64)
    assert dw[0, 1, 1, 0] == 2 * 25 and dw[0, 0, 0, 0] == 2 * 16 and dw[0, 0, 1, 0] == 2 * 20
    assert dw[0, 2, 2, 0] == 2 * 16 and dw[0, 2, 1, 0] == 2 * 20
    # A column stride of 1: tap 0 meets columns -1 .. 7 (8 inside), tap 1 all 9.
    rows = np.asarray(_handler_call((2, 1)), np.float64)
    assert rows[0, 1, 1, 0] == 2 * 5 * 9 and rows[0, 1, 0, 0] == 2 * 5 * 8


@pytest.mark.parametrize(
    "strides, overrides, message",
    [
        ((0, 1), {}, "strides must be from 1 to 2\\^31 - 1"),
        ((2**31, 1), {}, "strides must be from 1 to 2\\^31 - 1"),
        ((3, 3), {}, "column stride 1 or 2"),
        ((2, 2), dict(in_c=12), "channels in 16-byte pieces"),
        ((2, 2), dict(variant0=1), "direct kernel \\(variant 0\\) only"),
    ],
)
def test_handler_refuses_strides_its_kernels_cannot_read(strides, overrides, message):
    with pytest.raises(Exception, match=f"{_ffi.TARGET}: .*{message}"):
        np.asarray(_handler_call(strides, **overrides))


@pytest.mark.parametrize(
    "x_shape, k, strides",
    [
        ((2, 64, 64, 64, 32), 64, (2, 2, 2)),
        ((8, 16, 56, 56, 64), 128, (2, 2, 2)),
        ((2, 96, 96, 96, 16), 16, (2, 2, 2)),
        ((4, 16, 16, 16, 64), 64, (1, 2, 2)),
    ],
    ids=["nnunet-s2", "resnet3d-s2", "16-channels-s2", "hw-s2"],
)
def test_filter_row_tiles_of_all_problems_fill_their_waves(x_shape, k, strides):
    """The segments of a filter-row tile that reads strides or shares its launch with other depth taps are cut
    for all its problems' blocks (plan.cc, taps_segments), in whole waves of an H100's 2 x 132 resident blocks:
    Algorithm 1 counted one problem's and left the first layer 288 blocks, a second wave of 24."""
    x = jax.ShapeDtypeStruct(x_shape, jnp.bfloat16)
    w = jax.ShapeDtypeStruct((3, 3, 3, x_shape[-1], k), jnp.bfloat16)
    plan = winrs_jax.plan(x, w, strides, ((1, 1),) * 3, dimension_numbers=NDHWC,
                          options=winrs_jax.PlannerOptions(sm_count=132))  # fmt: skip
    columns, block_oc, block_ic, rows = plan.work_tile
    # 64 x 64 channels where one side has at most 64, two blocks per SM.
    assert plan.depth_in_place and plan.work_tile == (3, 64, 64, 1)
    in_c = plan.channels[0] * plan.depth_packing
    tiles = 3 * -(-k // 64) * -(-in_c // 64)
    blocks, slots = plan.segments * plan.stacked_depth_problems * tiles, 2 * 132
    assert blocks % slots == 0 or blocks % slots >= slots // 2, (blocks, str(plan))


def test_vmapped_strided_layers_read_strides_in_place(rng):
    """Stacked strided problems (vmap) run one call with the strides, each problem's dW its own layer's."""
    x_shape, w_shape, dn, geometry = _case(CASES[0])
    xs = jnp.asarray(rng.standard_normal((3, *x_shape)), jnp.bfloat16)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(xs[0], jnp.zeros(w_shape, jnp.bfloat16), **geometry,
                                                          dimension_numbers=dn))  # fmt: skip
    dys = jnp.asarray(rng.standard_normal((3, *out.shape)), jnp.bfloat16)
    fn = functools.partial(
        winrs_jax.conv_backward_filter, rhs_shape=w_shape, **geometry, dimension_numbers=dn
    )
    batched = jax.jit(jax.vmap(fn))
    text = batched.lower(xs, dys).as_text()
    assert text.count(f"@{_ffi.TARGET}(") == 1, text
    stacked = np.asarray(batched(xs, dys), np.float64)
    for i in range(3):
        np.testing.assert_array_equal(stacked[i], np.asarray(jax.jit(fn)(xs[i], dys[i]), np.float64))


@pytest.mark.parametrize(
    "target, dropped",
    [(_ffi.TARGET, ("smem_per_block",)), ("winrs_backward_filter_v2", ("smem_per_block",)),
     ("winrs_backward_filter", ("stride_h", "stride_w", "smem_per_block"))],
    ids=["current", "before-smem", "before-strides"],
)  # fmt: skip
def test_programs_exported_before_the_strides_keep_running(target, dropped, rng):
    """The targets' attributes change only with a new name (_ffi.export_disabled_checks): the targets from
    before the GPU's shared memory per block (planned for an H100) and before the strides still take their
    attributes and compute what the current one does for an H100 at stride 1; the current one refuses them."""
    x = jnp.asarray(rng.standard_normal((2, 9, 9, 32)), jnp.bfloat16)
    dy = jnp.asarray(rng.standard_normal((2, 9, 9, 16)), jnp.bfloat16)
    plan = plan_canonical(2, (9, 9), 32, 16, (3, 3), (1, 1, 1, 1), "bf16", "bf16")
    current = plan.ffi_attributes()
    expected = np.asarray(
        _ffi.backward_filter_call(x, dy, (), plan.filter_shape_ohwi, plan.workspace_elems, current)
    )
    old = {k: v for k, v in current.items() if k not in dropped}
    call = functools.partial(_ffi.backward_filter_call, x, dy, (), plan.filter_shape_ohwi, plan.workspace_elems, old,
                             target)  # fmt: skip
    if target == _ffi.TARGET:
        with pytest.raises(Exception, match="attributes"):
            np.asarray(call())
    else:
        np.testing.assert_array_equal(np.asarray(call()), expected)


def test_3d_programs_exported_before_the_strides_keep_running(rng):
    """The same for the 3D targets: "winrs_backward_filter_3d_v2" and "winrs_backward_filter_3d" read depth
    slices as before, planned for an H100 (and strides 1)."""
    x = jnp.asarray(rng.standard_normal((2, 5, 6, 8, 32)), jnp.bfloat16)
    dy = jnp.asarray(rng.standard_normal((2, 5, 6, 8, 16)), jnp.bfloat16)
    w_shape = (3, 3, 3, 32, 16)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, window_strides=(1, 1, 1),
                                   padding="SAME", dimension_numbers=NDHWC))  # fmt: skip
    assert _ffi.DEPTH_TARGET in fn.lower(x, dy).as_text()
    expected = np.transpose(np.asarray(fn(x, dy), np.float32), (0, 4, 1, 2, 3))  # FD x K x FH x FW x C
    plan = winrs_jax.plan(x, jnp.zeros(w_shape, jnp.bfloat16), (1, 1, 1), "SAME", dimension_numbers=NDHWC)
    assert plan.depth_in_place and plan.depth_packing == 1
    depth = dict(in_depth=5, out_depth=5, depth_stride=1, depth_dilation=1, depth_pad=1, filter_depth=3)
    for target, dropped in (("winrs_backward_filter_3d_v2", ("smem_per_block",)),
                            ("winrs_backward_filter_3d", ("stride_h", "stride_w", "smem_per_block"))):  # fmt: skip
        attributes = {k: v for k, v in plan.ffi_attributes().items() if k not in dropped} | depth
        dw = _ffi.backward_filter_call(x, dy, (3,), plan.filter_shape_ohwi, plan.workspace_elems, attributes,
                                       target)  # fmt: skip
        np.testing.assert_array_equal(np.asarray(dw.astype(jnp.bfloat16), np.float32), expected)


def test_row_strides_near_2_31_read_the_right_rows(rng):
    """A row stride past the map (one output row) is valid for lax: the row clipping must not wrap in 32 bits
    (it did, and dW came back zero)."""
    x = jnp.asarray(rng.standard_normal((2, 9, 9, 32)), jnp.bfloat16)
    w_shape, geometry = (3, 3, 32, 32), dict(window_strides=(2**31 - 1, 2), padding=((1, 1), (1, 1)))
    out = jax.eval_shape(lambda: lax.conv_general_dilated(x, jnp.zeros(w_shape, jnp.bfloat16), **geometry,
                                                          dimension_numbers=NHWC))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), jnp.bfloat16)
    plan = winrs_jax.plan(x, jnp.zeros(w_shape, jnp.bfloat16), **geometry, dimension_numbers=NHWC)
    assert plan.supported and not plan.phases
    dw = winrs_jax.conv_backward_filter(x, dy, w_shape, **geometry, dimension_numbers=NHWC)
    expected = np.moveaxis(reference_general_filter_grad(x, dy, (3, 3), geometry["window_strides"],
                                                         geometry["padding"]), 0, -1)  # fmt: skip
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(
        np.asarray(dw, np.float64), expected, rtol=2.0**-8, atol=1e-5 * np.abs(expected).max()
    )


def test_strided_segments_keep_the_chain_bound():
    """The filter-row tile's segment search counts the bands a row height makes (out_h 27 in 14 bands is 27 of
    one row): with deterministic sums its segments stay within the buckets' chains (at most 8 links; it made 27
    segments on 2 buckets, chains of 14)."""
    x = jax.ShapeDtypeStruct((2, 54, 19, 64), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((3, 6, 64, 64), jnp.bfloat16)
    options = winrs_jax.PlannerOptions(sm_count=132, deterministic=True)
    plan = winrs_jax.plan(x, w, (2, 1), ((1, 1), (1, 1)), dimension_numbers=NHWC, options=options)
    assert plan.supported and not plan.phases and not plan.atomic
    assert plan.chain <= 8 and plan.segments <= plan.buckets * plan.chain, str(plan)


def _random_layer(seed: int):
    """A strided 1D, 2D or 3D layer drawn to mostly reach the in-place tile: channels in multiples of 8, the last
    filter axis 3 or 5-7 wide, column stride 1 or 2 (another axis strided when it is 1), padding under the
    window, channels-last or channels-first."""
    r = np.random.default_rng(seed)
    rank = int(r.choice([1, 2, 2, 3]))
    layouts = {1: ["NWC"], 2: ["NHWC", "NCHW"], 3: ["NDHWC", "NCDHW"]}[rank]
    lhs = layouts[int(r.integers(len(layouts)))]
    rhs = {"NWC": "WIO", "NHWC": "HWIO", "NCHW": "OIHW", "NDHWC": "DHWIO", "NCDHW": "OIDHW"}[lhs]
    window = [int(r.integers(1, 4)) for _ in range(rank - 1)] + [int(r.choice([3, 5, 6, 7]))]
    strides = [int(r.integers(1, 4)) for _ in range(rank - 1)] + [int(r.integers(1, 3))]
    if all(s == 1 for s in strides):
        strides[int(r.integers(rank))] = 2
    spatial = [int(r.integers(w, w + 12)) for w in window]
    pads = tuple((int(r.integers(0, w)), int(r.integers(0, w))) for w in window)
    n, c, k = int(r.integers(1, 3)), int(r.choice([8, 16, 32, 48, 72])), int(r.choice([8, 16, 40, 64, 136]))
    sizes = dict(zip("NC", (n, c), strict=True))
    x_shape = tuple(
        sizes[a] if a in "NC" else spatial[[b for b in lhs if b not in "NC"].index(a)] for a in lhs
    )
    dims = dict(zip("OI", (k, c), strict=True))
    w_shape = tuple(dims[a] if a in "OI" else window[[b for b in rhs if b not in "OI"].index(a)] for a in rhs)
    dtype = (jnp.bfloat16, jnp.float16)[int(r.integers(2))]
    return x_shape, w_shape, (lhs, rhs, lhs), tuple(strides), pads, dtype


@pytest.mark.parametrize("seed", range(24))
def test_random_strided_layers_match_float64(seed):
    """Randomly drawn strided layers (fixed seeds; a review fuzzed 870 such on the CPU, all correct) against the
    float64 gradient, in place or through DWM's pieces, whichever the planner takes."""
    x_shape, w_shape, dn, strides, pads, dtype = _random_layer(seed)
    r = np.random.default_rng(1000 + seed)
    x = jnp.asarray(r.standard_normal(x_shape), dtype)
    w = jnp.zeros(w_shape, dtype)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(x, w, strides, pads, dimension_numbers=dn))
    dy = jnp.asarray(r.standard_normal(out.shape), dtype)
    dw = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, window_strides=strides,
                                   padding=pads, dimension_numbers=dn))(x, dy)  # fmt: skip
    lhs, rhs, _ = dn
    to_last = lambda a, spec: np.moveaxis(np.asarray(a, np.float64), spec.index("C"), -1)  # noqa: E731
    x_cl, dy_cl = to_last(x, lhs), to_last(dy, lhs)
    window = tuple(w_shape[rhs.index(a)] for a in rhs if a not in "OI")
    expected = reference_general_filter_grad(x_cl, dy_cl, window, strides, pads)  # K x spatial x C
    expected = np.transpose(
        expected, [(["O", *[a for a in rhs if a not in "OI"], "I"]).index(a) for a in rhs]
    )
    np.testing.assert_allclose(np.asarray(dw, np.float64), expected, rtol=float(jnp.finfo(dtype).eps) / 2,
                               atol=1e-5 * max(np.abs(expected).max(), 1e-30))  # fmt: skip


def test_random_strided_layers_mostly_read_in_place():
    """The draw above reaches the in-place tile on most seeds (else the test above would check only the pieces)."""
    in_place = 0
    for seed in range(24):
        x_shape, w_shape, dn, strides, pads, dtype = _random_layer(seed)
        plan = winrs_jax.plan(jax.ShapeDtypeStruct(x_shape, dtype), jax.ShapeDtypeStruct(w_shape, dtype), strides,
                              pads, dimension_numbers=dn)  # fmt: skip
        in_place += plan.supported and not plan.phases and (plan.strides != (1, 1) or plan.depth_in_place)
    assert in_place >= 12, in_place


def test_row_strides_on_the_wide_block_keep_the_pieces():
    """The 128 x 128 block reads strides in place only in the form the GPU tests run (column stride 2, a width a
    multiple of 3): row strides alone on more than 64 channels on both sides keep DWM's pieces."""
    x = jax.ShapeDtypeStruct((2, 12, 12, 128), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((3, 3, 128, 128), jnp.bfloat16)
    rows = winrs_jax.plan(x, w, (2, 1), ((1, 1), (1, 1)), dimension_numbers=NHWC)
    both = winrs_jax.plan(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=NHWC)
    assert rows.supported and rows.phases and not both.phases and both.work_tile == (3, 128, 128, 1)
