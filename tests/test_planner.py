"""Planner properties (paper section 4): kernel pair, segment count and shape, workspace."""

import functools
import itertools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import reference_filter_grad

import winrs_jax
from winrs_jax import _winrs, planner
from winrs_jax.planner import ACCURACY_BUDGET, PlannerOptions, plan_canonical

VARIANTS = winrs_jax.variants()


def _plan(n, h, w, c, k, fh, fw, pads=None, dtype=np.float32, **options):
    pads = pads or ((fh // 2, fh // 2), (fw // 2, fw // 2))
    x = jax.ShapeDtypeStruct((n, h, w, c), dtype)
    rhs = jax.ShapeDtypeStruct((fh, fw, c, k), dtype)
    return winrs_jax.plan(
        x, rhs, (1, 1), pads, dimension_numbers=("NHWC", "HWIO", "NHWC"),
        options=winrs_jax.PlannerOptions(**options),
    )  # fmt: skip


SHAPES = [
    # N, H=W, C=K, FH, FW
    (32, 56, 256, 3, 3),
    (32, 14, 1024, 3, 3),
    (32, 224, 64, 3, 3),
    (32, 128, 128, 2, 2),
    (32, 64, 256, 4, 4),
    (32, 32, 256, 5, 5),
    (32, 64, 256, 6, 6),
    (32, 16, 512, 7, 7),
    (32, 32, 256, 8, 8),
    (32, 128, 64, 9, 9),
    (1, 7, 3, 3, 3),
    (2, 13, 5, 5, 10),
    (3, 29, 7, 2, 18),
    (1, 5, 1, 1, 2),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("segments", [None, 3, 16])
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_plan_properties(shape, segments, deterministic, dtype):
    """Segments tile dY exactly (images x rows x columns: bfloat16's 64-channel layers of at least 3 x 3 take the
    filter-window tile's image parts), each in its own place of the chains, within the workspace bound."""
    n, hw, c, fh, fw = shape
    plan = _plan(n, hw, hw, c, c, fh, fw, dtype=dtype, segments=segments, deterministic=deterministic)
    assert plan.atomic != deterministic
    assert plan.supported, plan.reason
    v0, v1 = VARIANTS[plan.variant0], VARIANTS[plan.variant1]
    out_h, out_w = plan.out_grad_hw
    # Both kernels' output tiles divide F_W; their unit widths tile O_W without padding.
    assert fw % v0.n == 0 and fw % v1.n == 0
    assert plan.width0 % v0.r == 0 and (out_w - plan.width0) % v1.r == 0 and plan.width0 > 0
    segs = _winrs.segments(out_h, out_w, plan.segment_rows, *plan.segment_shape, plan.width0, plan.buckets,
                           n, plan.image_parts)  # fmt: skip
    assert len(segs) == plan.segments
    # Segments tile dY exactly: disjoint and covering.
    cover = np.zeros((n, out_h, out_w), int)
    places = {0: set(), 1: set()}
    for h0, h1, w0, w1, kernel, bucket, link, i0, i1 in segs:
        places[kernel].add((bucket, link))
        assert h1 > h0 and w1 > w0 and i1 > i0
        cover[i0:i1, h0:h1, w0:w1] += 1
        r = (v0 if kernel == 0 else v1).r
        assert (w1 - w0) % r == 0
        assert (kernel == 0) == (w1 <= plan.width0)
    assert (cover == 1).all()
    # Each kernel's segments take distinct places (bucket, link) of the chains; kernel 0's fill every bucket.
    primary = sum(1 for s in segs if s[4] == 0)
    assert len(places[0]) == primary and len(places[1]) == plan.segments - primary
    assert {b for b, _ in places[0]} == set(range(plan.buckets))
    assert plan.chain == max(link for _, link in places[0]) + 1 == -(-primary // plan.buckets)
    assert plan.segment_shape[1] % v0.r == 0
    # Z within its bounds: at least 1; Algorithm 2 never exceeds H_max x W_max segments plus the residual column.
    pad_h = max(fh // 2, 1)
    h_max = max(1, out_h // pad_h)
    w_max = plan.width0 // v0.r
    assert 1 <= plan.segments <= h_max * (w_max + 1) * plan.image_parts
    dw = c * fh * fw * c
    if not deterministic:  # atomic adds: one chain into dW, no workspace
        assert plan.buckets == 1 and plan.workspace_elems == 0
        return
    if segments is None:  # the workspace bound caps the buckets (plan.cc), not the segments
        data = n * hw * hw * c + n * out_h * out_w * c + dw
        assert plan.buckets - 1 <= max(1, 0.15 * data / dw)
    else:  # forced segments keep a bucket each
        assert plan.buckets == primary and plan.chain == 1
    # Buckets 1..B-1, then one semaphore per bucket and GPU work tile of each chained kernel.
    assert plan.workspace_elems >= (plan.buckets - 1) * dw
    assert (plan.workspace_elems == (plan.buckets - 1) * dw) == (
        plan.chain == 1 and len(places[1]) <= plan.buckets
    )
    assert plan.workspace_bytes == 4 * plan.workspace_elems


@pytest.mark.parametrize("path, element_bytes", [("fp32", 4), ("bf16", 2), ("fp16", 2)])
def test_workspace_bound_counts_bytes(path, element_bytes):
    """The buckets' float32 bytes stay within 15% of the bytes of X, dY and dW in the input dtype (plan.cc), so a
    16-bit layer may take half the buckets of the same layer in float32. Counted in elements, the bf16 plan of
    this layer (the real suite's ResNet 3x3 128:56:64) took 168 buckets: 24% of its data bytes."""
    n, hw, c = 128, 56, 64
    plan = plan_canonical(
        n, (hw, hw), c, c, (3, 3), (1, 1, 1, 1), path, path, PlannerOptions(deterministic=True)
    )
    data_bytes = element_bytes * (2 * n * hw * hw * c + 9 * c * c)
    assert plan.buckets > 2
    assert plan.workspace_bytes <= 0.15 * data_bytes


def test_starved_layers_chain_their_segments():
    """bf16 3x3 128:14:256: the workspace bound allows 2 buckets, whose 2 segments would give 96 blocks of
    kernel 0 (48 filter-row tiles each) for 132 SMs. The segments share the 2 buckets in chains instead (0.27-0.34
    ms measured with 4 and 2 buckets against 0.53 ms, before the filter-row tile). Where one bucket per segment
    fills the GPU, the plan keeps one each (3x3 128:56:256)."""
    in_order = PlannerOptions(deterministic=True)
    starved = plan_canonical(128, (14, 14), 256, 256, (3, 3), (1, 1, 1, 1), "bf16", "bf16", in_order)
    assert starved.buckets == 2 and starved.segments > 2 * starved.buckets
    assert starved.chain == -(-starved.segments // 2)
    full = plan_canonical(128, (56, 56), 256, 256, (3, 3), (1, 1, 1, 1), "bf16", "bf16", in_order)
    assert full.chain == 1 and full.segments == full.buckets


def test_window_tile_semaphores_count_one_row_tiles():
    """Where the filter-window tile's staging does not apply (stacked problems, other GPUs) the launch runs the
    filter-row tile, a block per filter row: the chained plan's semaphores count those blocks (3 per segment and
    bucket here), not the window's one, or the fallback's semaphores would run past the workspace."""
    plan = plan_canonical(
        128, (56, 56), 64, 64, (3, 3), (1, 1, 1, 1), "bf16", "bf16",
        PlannerOptions(deterministic=True, sm_count=132),
    )  # fmt: skip
    assert plan.work_tile == (3, 64, 64, 3) and plan.chain > 1
    assert plan.workspace_elems == (plan.buckets - 1) * 3 * 3 * 64 * 64 + plan.buckets * 3


@pytest.mark.parametrize("path", ["bf16", "fp16"])
def test_window_tile_takes_a_wave_of_atomic_segments(path):
    """The filter-window tile runs one block per SM and segment: atomic adds may take a wave of segments past their
    traffic share (float16 3x3 16:128:64 got 64 segments for 132 SMs, 0.095 ms; with 128, 0.068; H100)."""
    plan = plan_canonical(
        16, (128, 128), 64, 64, (3, 3), (1, 1, 1, 1), path, path, PlannerOptions(sm_count=132)
    )
    assert plan.atomic and plan.work_tile == (3, 64, 64, 3)
    assert plan.segments >= 128


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize(
    "batch, size, in_c, out_c, filter_hw",
    [(128, 56, 64, 64, 3), (64, 224, 64, 64, 3), (16, 128, 64, 64, 3), (32, 112, 64, 128, 3), (32, 128, 64, 64, 9),
     (3, 6, 64, 64, 3)],
)  # fmt: skip
def test_window_tile_segments_are_whole_rows_of_image_parts(
    deterministic, batch, size, in_c, out_c, filter_hw
):
    """The filter-window tile (16-bit layers of at least 3 x 3 with at most 64 channels on one side: 3 filter rows x
    3 columns per block) walks its segment's images row after row, so that each X row comes from L2 about once for
    the three dY rows that meet it: its segments take all the rows, in columns of a width that a piece divides
    (Algorithm 2's ceil-div widths gave 19 + 19 + 18 on 128:56:64, no piece wider than 19), and the batch is cut
    into image parts for the GPU's blocks. With 128 images of 56 x 56, a part per image fills 128 of 132 SMs where
    the fifteenth stop's row bands gave 112 blocks."""
    pads = (filter_hw // 2,) * 4
    plan = plan_canonical(
        batch, (size, size), in_c, out_c, (filter_hw, filter_hw), pads, "bf16", "bf16",
        PlannerOptions(deterministic=deterministic, sm_count=132),
    )  # fmt: skip
    assert plan.work_tile == (3, 64, 64, 3)
    assert plan.segment_rows == 1 and plan.segment_shape[0] == size and size % plan.segment_shape[1] == 0
    assert 1 <= plan.image_parts <= batch
    assert plan.segments == plan.image_parts * (size // plan.segment_shape[1])
    assert "a thread block computes 3 filter rows x 3 filter columns" in str(plan)
    assert f"{plan.image_parts} x 1 x" in str(plan) or plan.image_parts == 1
    if (batch, size) == (128, 56) and not deterministic:
        assert plan.segments == 128


@pytest.mark.parametrize("batch, size, in_c, out_c", [(128, 17, 64, 96), (64, 33, 64, 64)])
def test_filter_row_tiles_cut_rows_first(batch, size, in_c, out_c):
    """Where no piece width fills the window's K-blocks (17 and 33 columns: no divisor of at most 62 fills 70% of
    them) the launch runs the filter-row tile, which walks each segment row over its width plus two
    halo positions: the segments are whole rows, or wide pieces of them where the rows run out (Algorithm 2's
    one-column segments made its 3x3 layers 3x slower on an H100)."""
    plan = plan_canonical(batch, (size, size), in_c, out_c, (3, 3), (1, 1, 1, 1), "bf16", "bf16",
                          PlannerOptions(sm_count=132))  # fmt: skip
    assert [k.index for k in plan.kernels] == [0] and plan.work_tile == (3, 64, 64, 3)
    assert plan.image_parts == 1
    seg_h, seg_w = plan.segment_shape
    columns = -(-size // seg_w)
    assert seg_w >= size // 4 and (columns == 1 or seg_h == 1), plan.segment_shape


@pytest.mark.parametrize(
    "batch, size, channels, filter_w",
    [(32, 112, 128, 3), (16, 96, 128, 3), (32, 56, 256, 3), (32, 64, 256, 6), (128, 28, 128, 3), (32, 112, 128, 5)],
)  # fmt: skip
def test_wide_unstrided_layers_run_the_one_tap_block(batch, size, channels, filter_w):
    """Where both channel counts pass 64, unstrided layers run the 128 x 128 block of one filter column on every
    path: a filter-row tile on 128 x 128 channels (three taps from one staging) took 1.10-1.68x its time on the
    eight layers measured where it ran until the thirty-first stop, the first two here among them (variants.h,
    kWideBlock). Its segments are then cut columns first (Algorithm 2), not whole rows as the filter-row tiles'."""
    pads = (1, 1, filter_w // 2, filter_w // 2)
    for path, kernels in (("bf16", None), ("tf32", (0, 0))):
        plan = plan_canonical(batch, (size, size), channels, channels, (3, filter_w), pads, path, path,
                              PlannerOptions(sm_count=132, kernels=kernels))  # fmt: skip
        assert [k.index for k in plan.kernels] == [0]
        assert plan.work_tile == (1, 128, 128, 1) and "a thread block computes 1 filter column" in str(plan)
        assert plan.segment_shape[1] < plan.out_grad_hw[1] // 2, plan.segment_shape
        # In 16 bits the text says what Hopper's launch may run instead (cuda/wgmma_persistent.cuh).
        assert ("tiles of 3 filter columns" in str(plan)) == (path == "bf16"), str(plan)


@pytest.mark.parametrize(
    "batch, size, in_c, out_c, filter_w, options, taken",
    [(32, 56, 256, 256, 3, {}, (True, True)), (32, 14, 1024, 1024, 3, {}, (True, True)),
     (128, 28, 96, 128, 5, {}, (True, False)),  # split TF32: 96 of two tiles' 128 input channels, a third the rate
     (32, 64, 256, 256, 4, {}, (True, True)),
     (32, 56, 64, 64, 3, {}, (False, False)),  # the 64-channel block, not the tiles' (tf32_tap_tiles_fit)
     (32, 56, 64, 256, 3, {}, (False, False)),  # the filter-row tile (one side of 64 channels)
     (16, 64, 128, 128, 3, {}, (False, False)),  # not whole boxes of 32 images
     (128, 7, 512, 512, 3, {}, (False, False)),  # rows too short for 3-tap runs (tap_runs.h, tap_runs_fit)
     (32, 56, 256, 256, 3, {"deterministic": True}, (False, False)),  # the tiles add their segments atomically
     (32, 56, 256, 256, 3, {"kernels": (4, 4)}, (False, False))],  # forced kernels stay forced
)  # fmt: skip
def test_tf32_tiles_take_the_direct_kernel_where_they_fit(batch, size, in_c, out_c, filter_w, options, taken):
    """Where Hopper's TF32 tiles (split TF32 at HIGHEST) fit (cpp/winrs/tap_runs.h, tf32_tap_tiles_fit) and their
    rate makes them faster than the planner's Winograd kernels, a TF32 or split-TF32 plan forces the direct
    kernel, which they then run, with their predicted time; elsewhere, without them (a GPU other than Hopper's)
    and on the FP32 path, the planner's kernels stay."""
    pads = (1, 1, filter_w // 2, filter_w // 2)
    shape = (batch, (size, size), in_c, out_c, (3, filter_w), pads)
    for (path, reference), path_taken in zip((("tf32", "tf32"), ("tf32x3", "fp32")), taken, strict=True):
        without = plan_canonical(*shape, path, reference, PlannerOptions(sm_count=132, tf32_tiles=False, **options))
        plan = plan_canonical(*shape, path, reference, PlannerOptions(sm_count=132, tf32_tiles=True, **options))
        words = "split-TF32 tiles" if path == "tf32x3" else "TF32 tiles"
        assert plan.tf32_tiles == path_taken and (words in str(plan)) == path_taken, (path, str(plan))
        assert not without.tf32_tiles and "TF32 tiles" not in str(without)
        if path_taken:
            assert [k.index for k in without.kernels] != [0], "the planner's own choice is Winograd here"
            assert [k.index for k in plan.kernels] == [0] and plan.forced_kernels == (0, 0)
            seconds = planner.tf32_tiles_seconds(batch, plan.out_grad_hw, in_c, out_c, (3, filter_w), path)
            assert plan.predicted_seconds == seconds
            assert plan.predicted_seconds < without.predicted_seconds
        else:
            assert plan == without
    other = plan_canonical(*shape, "fp32", "fp32", PlannerOptions(sm_count=132, tf32_tiles=True, **options))
    assert not other.tf32_tiles


@pytest.mark.parametrize("switch", ["1", ""])
def test_split_tf32_tiles_take_row_tile_layers_under_their_switch(switch, monkeypatch):
    """WINRS_JAX_TF32X3_ROW_TILE_LAYERS=1 (an experiment's switch, cpp/winrs/tap_runs.h,
    tf32x3_takes_row_tile_layer) lets the split-TF32 tiles, whose X side is 64 channels, take layers of at most
    64 input channels against more than 64 output channels, which the direct kernel runs as its filter-row
    tile; the TF32 tiles (128 x 128) never, and without the switch neither."""
    monkeypatch.setenv("WINRS_JAX_TF32X3_ROW_TILE_LAYERS", switch)
    planner._plan_canonical.cache_clear()  # the switch is read when a plan is made
    shape = (32, (112, 112), 64, 128, (3, 3), (1, 1, 1, 1))
    split = plan_canonical(*shape, "tf32x3", "fp32", PlannerOptions(sm_count=132, tf32_tiles=True))
    tf32 = plan_canonical(*shape, "tf32", "tf32", PlannerOptions(sm_count=132, tf32_tiles=True))
    planner._plan_canonical.cache_clear()
    assert split.tf32_tiles == (switch == "1"), str(split)
    assert not tf32.tf32_tiles
    if split.tf32_tiles:
        assert [k.index for k in split.kernels] == [0] and "split-TF32 tiles" in str(split)
        assert split.predicted_seconds == planner.tf32_tiles_seconds(32, (112, 112), 64, 128, (3, 3), "tf32x3")


def test_depth_in_place_plans_keep_off_the_tf32_tiles(monkeypatch):
    """A 3D layer's plan that reads X in place by depth slice never claims Hopper's TF32 tiles, whose maps take X
    as the batch of dY's images (the launch refuses them there too): here the split tiles would take the 2D
    problem's filter-row tile layer under their switch."""
    monkeypatch.setenv("WINRS_JAX_TF32X3_ROW_TILE_LAYERS", "1")
    planner._plan_canonical.cache_clear()
    options = PlannerOptions(sm_count=132, tf32_tiles=True)
    flat = plan_canonical(32, (56, 56), 64, 128, (3, 3), (1, 1, 1, 1), "tf32x3", "fp32", options)
    shared = planner.plan_depth_in_place(32, (56, 56), 64, 128, (3, 3), (1, 1, 1, 1), "tf32x3", "fp32", options,
                                         taps=1, packing=1)  # fmt: skip
    planner._plan_canonical.cache_clear()
    assert flat.tf32_tiles, "the 2D problem alone takes them"
    assert not shared.tf32_tiles, str(shared)  # (here the Winograd kernels then, on the depth copies)


def test_split_tf32_tiles_rate_counts_their_64_input_channels():
    """The split-TF32 tiles are 128 output x 64 input channels (cpp/cuda/wgmma_tf32_taps.cuh): their rate counts
    64 input channels as a whole tile's (such layers take them only under an experiment's switch, above), 96 as
    three quarters of two; at a third of the TF32 tiles' products' rate they take longer than the TF32 tiles on
    the same layer."""
    args = (32, (56, 56), 64, 256, (3, 3))
    full = planner.tf32_tiles_seconds(*args, "tf32x3")
    flops = 2.0 * 32 * 56 * 56 * 64 * 256 * 9
    assert full == pytest.approx(flops / (planner.TF32X3_TAP_TILES_TFLOPS * 1e12))
    assert planner.tf32_tiles_seconds(32, (56, 56), 96, 256, (3, 3), "tf32x3") == pytest.approx(full * 1.5 / 0.75)
    assert planner.tf32_tiles_seconds(*args, "tf32") < full


def test_tf32_tiles_plan_runs_through_the_handler(rng):
    """A plan that the TF32 tiles take forces the direct kernel in its attributes, so that the handler plans the
    same again: on the CPU it gives the direct kernel's bits, not the planner's Winograd kernels' (the tiles' own
    check against the direct kernel is tests/test_gpu.py, test_tap_tiles_match_the_cpu)."""
    x = rng.standard_normal((32, 6, 20, 128)).astype(np.float32)
    dy = rng.standard_normal((32, 6, 20, 128)).astype(np.float32)
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 128, 128), window_strides=(1, 1),
                           padding=((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"))  # fmt: skip

    def run(**options):
        plan = _plan(32, 6, 20, 128, 128, 3, 3, path="tf32", mode="winrs", sm_count=132, **options)
        options = PlannerOptions(path="tf32", mode="winrs", sm_count=132, **options)
        return plan, np.asarray(jax.jit(functools.partial(fn, options=options))(x, dy), np.float64)

    (tiles, dw), (direct, dw_direct), (winograd, dw_winograd) = (
        run(tf32_tiles=True), run(tf32_tiles=False, kernels=(0, 0)), run(tf32_tiles=False))
    assert tiles.tf32_tiles and not direct.tf32_tiles and [k.index for k in winograd.kernels] != [0], str(winograd)
    np.testing.assert_array_equal(dw, dw_direct)
    assert not np.array_equal(dw, dw_winograd)
    ref = reference_filter_grad(x.astype(np.float64), dy.astype(np.float64), (3, 3), (1, 1, 1, 1))
    ref = ref.transpose(1, 2, 3, 0)  # OHWI -> HWIO
    assert np.linalg.norm(dw - ref) / np.linalg.norm(ref) < 2e-3  # TF32 operands (2^-11 each), float32 sums


def test_stacked_problems_keep_the_planners_kernels():
    """Problems stacked in one launch (feature groups, a 3D layer's depth taps, a dilated layer's phases, vmap)
    never run the TF32 tiles (cuda/wgmma_persistent.cuh, persistent_launchable): their plans keep the planner's
    kernels where the same unstacked layer takes the tiles."""
    options = PlannerOptions(tf32_tiles=True, path="tf32", mode="winrs", sm_count=132)
    f32 = jnp.float32

    def plan(lhs, rhs, pads, dn, **kwargs):
        return winrs_jax.plan(jax.ShapeDtypeStruct(lhs, f32), jax.ShapeDtypeStruct(rhs, f32), (1,) * len(pads),
                              pads, dimension_numbers=dn, options=options, **kwargs)  # fmt: skip

    dn2, dn3 = ("NHWC", "HWIO", "NHWC"), ("NDHWC", "DHWIO", "NDHWC")
    alone = plan((32, 20, 20, 256), (3, 3, 256, 256), ((1, 1), (1, 1)), dn2)
    grouped = plan((32, 20, 20, 512), (3, 3, 256, 512), ((1, 1), (1, 1)), dn2, feature_group_count=2)
    depth = plan((32, 3, 20, 20, 256), (3, 3, 3, 256, 256), ((1, 1), (1, 1), (1, 1)), dn3)
    one_tap_depth = plan((32, 1, 20, 20, 256), (1, 3, 3, 256, 256), ((0, 0), (1, 1), (1, 1)), dn3)
    dilated = plan((32, 24, 24, 256), (3, 3, 256, 256), ((2, 2), (2, 2)), dn2, rhs_dilation=(2, 2))
    assert alone.tf32_tiles and one_tap_depth.tf32_tiles, (str(alone), str(one_tap_depth))
    assert grouped.groups == 2 and not grouped.tf32_tiles, str(grouped)
    assert not depth.tf32_tiles and not dilated.tf32_tiles, (str(depth), str(dilated))
    # vmap: each device's call plans its stacked problems without the tiles (_partition), the FFI attributes then
    # name the planner's kernels, where the unstacked call's name the direct kernel.
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 256, 256), window_strides=(1, 1),
                           padding=((1, 1), (1, 1)), dimension_numbers=dn2, options=options)  # fmt: skip
    x = jax.ShapeDtypeStruct((32, 20, 20, 256), f32)
    one = jax.jit(fn).lower(x, x).as_text()
    stacked = jax.ShapeDtypeStruct((2, 32, 20, 20, 256), f32)
    two = jax.jit(jax.vmap(fn)).lower(stacked, stacked).as_text()
    assert "variant0 = 0 : i64" in one and "variant0 = -1 : i64" in two, two[-3000:]


@pytest.mark.parametrize(
    "filter_hw, pads, path, tiled",
    [((5, 5), (2, 2, 2, 2), "bf16", True), ((7, 7), (3, 3, 3, 3), "bf16", True), ((3, 5), (1, 1, 2, 2), "fp16", True),
     ((1, 4), (0, 0, 1, 2), "bf16", False), ((5, 5), (2, 2, 2, 2), "tf32", False)],
)  # fmt: skip
def test_filter_row_tiles_take_16_bit_widths_from_five(filter_hw, pads, path, tiled):
    """In 16 bits, filter widths from 5 that are not multiples of the filter-row tile's 3 columns run it too, the
    last tile's columns past the filter computed and dropped (1.10-1.64x faster than one column per block on an
    H100): segments cut rows first, where the one-column block keeps Algorithm 2's one-column segments. Width 4
    and TF32, not measured, keep the one-column block."""
    options = PlannerOptions(sm_count=132, kernels=(0, 0))  # the direct kernel (TF32 plans Winograd here)
    plan = plan_canonical(128, (28, 28), 64, 64, filter_hw, pads, path, path, options)
    one_tap = plan_canonical(128, (28, 28), 64, 64, (2, 2), (1, 0, 1, 0), path, path, options)
    assert one_tap.segment_shape[1] == 1
    assert (plan.segment_shape[1] > 1) == tiled, (one_tap, plan)


@pytest.mark.parametrize("path", ["fp32", "tf32", "bf16"])
def test_winograd_segments_keep_algorithm_2(path):
    """Only the filter-row tile cuts rows first: Omega_4(3, 2) with 64 segments asked for keeps Algorithm 2's
    shape, 51 segments two columns wide (3 more for the direct kernel's residual column)."""
    options = PlannerOptions(segments=64, buckets=1, kernels=(2, 0))
    plan = plan_canonical(4, (64, 35), 40, 24, (3, 3), (1, 1, 1, 1), path, path, options)
    assert plan.segments == 54 and plan.chain == 51 and plan.segment_shape == (17, 2)


@pytest.mark.parametrize("path, reference", [("bf16", "bf16"), ("fp16", "fp16"), ("tf32", "tf32"), ("tf32x3", "tf32"),
                                             ("fp32", "fp32"), ("tf32x3", "fp32")])  # fmt: skip
def test_segments_add_atomically_unless_determinism_is_asked(path, reference, monkeypatch):
    """By default the segments add into dW atomically on every path; XLA_FLAGS asking XLA for deterministic ops,
    deterministic=True or buckets give the fixed-order compensated bucket sum. Atomic plans need no workspace; Z
    stops where the adds would take a tenth of the layer's modelled time (plan.cc, kAtomicShare: 5.5e11 adds per
    second measured on an H100)."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    layer = (128, (28, 28), 128, 128, (3, 3), (1, 1, 1, 1), path, reference)
    plan = plan_canonical(*layer)
    assert plan.atomic and plan.workspace_elems == 0 and plan.buckets == 1
    cap = 0.1 * plan.predicted_seconds * 5.5e11 / (9 * 128 * 128)
    assert plan.segments <= cap
    assert path != "bf16" or cap < plan.baseline_segments  # in bf16 the cap binds
    in_order = plan_canonical(*layer, PlannerOptions(deterministic=True))
    assert not in_order.atomic and in_order.workspace_elems > 0
    assert not plan_canonical(*layer, PlannerOptions(buckets=4)).atomic
    for flag in ("--xla_gpu_deterministic_ops=true", "--xla_gpu_exclude_nondeterministic_ops"):
        monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to=/tmp/x {flag}")
        assert not plan_canonical(*layer).atomic
    assert plan_canonical(*layer, PlannerOptions(deterministic=False)).atomic
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    assert plan_canonical(*layer).atomic


def test_float32_highest_keeps_each_segments_sum_short():
    """The kernels sum a segment's output positions in FP32; at float32 HIGHEST each segment takes at most about
    4096 of them (plan.cc, kMaxSumPositions; Algorithm 2 shapes the count). On an H100, 9x9 32:64:128 on FP32
    kernels had a MARE of 7.5e-7 (the budget is 7.6e-7) with 3 segments, 1.7e-7 with 11 and 8.3e-8 with 33, in
    the same time."""
    highest = plan_canonical(32, (64, 64), 128, 128, (9, 9), (4, 4, 4, 4), "fp32", "fp32")
    assert highest.segments >= 32 * 64 * 64 // 4096
    default = plan_canonical(32, (64, 64), 128, 128, (9, 9), (4, 4, 4, 4), "fp32", "tf32")
    assert default.segments < 32  # no such floor where XLA itself rounds the operands to TF32


@pytest.mark.parametrize("options, message", [
    (dict(deterministic=False, buckets=2), "give one of them"),
    (dict(deterministic=1), "True, False or None"),
    # checked when the options are made, not when a gradient is first traced (or never, where a forced kernel
    # out of range quietly left the layer to XLA)
    (dict(mode="fast"), "mode must be one of"),
    (dict(path="fp64"), "path must be one of"),
    (dict(kernels=(99, 99)), "two indices into winrs_jax.variants"),
    (dict(kernels="Omega_4(3, 2)"), "two indices into winrs_jax.variants"),
    (dict(kernels=(1,)), "two indices"),
    (dict(kernels=(True, 0)), "two indices"),
])  # fmt: skip
def test_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        PlannerOptions(**options)


def test_long_1d_layer_gets_its_segments():
    """Algorithm 2 looks for a segment column width dividing W_max; 16000 columns have none near 16000 / Z^, and
    the paper's search then leaves one segment (12 blocks on 132 SMs: 22 ms on an H100 against XLA's 4). The
    columns take ceil(W_max / Z^) units instead, the last one fewer."""
    plan = plan_canonical(32, (1, 16000), 256, 256, (1, 3), (0, 0, 1, 1), "bf16", "bf16",
                          PlannerOptions(deterministic=True))  # fmt: skip
    assert plan.segment_rows == 1 and plan.segments >= min(plan.baseline_segments, plan.buckets) - 1
    assert plan.segments > 32


def test_figure_5_pair():
    """F_W = 3, O_W = 16: Omega_8(3, 6) for the multiples of 6, Omega_4(3, 2) for the rest."""
    plan = _plan(4, 16, 16, 64, 64, 3, 3)
    assert [k.name for k in plan.kernels] == ["Omega_8(3, 6)", "Omega_4(3, 2)"]
    assert plan.width0 == 12


def test_single_kernel_when_width_divides():
    plan = _plan(4, 18, 18, 64, 64, 3, 3)
    assert [k.name for k in plan.kernels] == ["Omega_8(3, 6)"]
    assert plan.width0 == 18


def test_large_channels_need_one_segment_per_column():
    """Section 6.1: with 1024 channels one segment column already fills the GPU (Algorithm 1, line 3)."""
    plan = _plan(32, 14, 14, 1024, 1024, 3, 3)
    assert plan.baseline_segments == 1


def test_small_channels_get_many_segments():
    plan = _plan(32, 224, 224, 64, 64, 3, 3)
    assert plan.segments >= 8


def test_sm_count_changes_the_plan():
    # bfloat16: at float32 HIGHEST (the CPU's float32) the sums' length sets a floor on Z for any SM count
    few = _plan(32, 56, 56, 256, 256, 3, 3, dtype=jnp.bfloat16, sm_count=8)
    many = _plan(32, 56, 56, 256, 256, 3, 3, dtype=jnp.bfloat16, sm_count=132)
    assert few.segments < many.segments


def test_the_printout_says_which_gpu_the_segments_are_counted_for():
    """Without a GPU the plan is made for an H100's SM count and the CPU runs its segments: the printout says so,
    and `runs_winrs` says what computes the gradient without parsing `choice`."""
    h100 = _plan(32, 56, 56, 256, 256, 3, 3, dtype=jnp.bfloat16, mode="winrs")
    few = _plan(32, 56, 56, 256, 256, 3, 3, dtype=jnp.bfloat16, sm_count=8, mode="xla")
    if jax.default_backend() == "cpu":
        assert "for 132 SMs, an H100's: no GPU here, the CPU runs the same segments" in str(h100)
        assert "for 8 SMs: no GPU here" in str(few)
    else:
        assert "no GPU here" not in str(h100)
    assert h100.runs_winrs and h100.choice.startswith("WinRS")
    assert not few.runs_winrs and few.choice.startswith("XLA")


def test_forced_kernels():
    plan = _plan(2, 20, 20, 8, 8, 3, 3, kernels=(2, 0))
    assert [k.name for k in plan.kernels] == ["Omega_4(3, 2)"]
    bad = _plan(2, 20, 20, 8, 8, 3, 3, kernels=(1, 0))  # n = 2 does not divide F_W = 3
    assert not bad.supported and "forced kernels" in bad.reason


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(fw=1), "filter width 1 has no divisor in 2..9"),
        (
            dict(window_strides=(3, 3)),
            "stride-1 pieces of 1x1 taps, and WinRS has no kernels",
        ),
        (
            dict(rhs_dilation=(2, 2), window_strides=(2, 2)),
            "rhs dilation (2, 2) (dilated filter) with strides",
        ),
        (dict(lhs_dilation=(2, 1), padding=((1, 1), (1, 1))), "lhs dilation"),  # (lax refuses SAME there)
        (dict(dtype=np.float64), "float32, bfloat16 and float16 kernels"),
    ],
)
def test_unsupported_layers_say_why(kwargs, reason):
    fw = kwargs.pop("fw", 3)
    dtype = kwargs.pop("dtype", np.float32)
    groups = kwargs.get("feature_group_count", 1)
    x = jax.ShapeDtypeStruct((2, 16, 16, 8), dtype)
    rhs = jax.ShapeDtypeStruct((3, fw, 8 // groups, 8), dtype)
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    args.update(kwargs)
    with jax.enable_x64(dtype == np.float64):  # else a float64 layer is a float32 one, as conv makes it
        plan = winrs_jax.plan(x, rhs, **args)
    assert not plan.supported
    assert reason in plan.reason
    assert "not used" in str(plan) and reason in str(plan)


def test_printed_plan():
    text = str(_plan(32, 56, 56, 256, 256, 3, 3))
    for piece in ("WinRS plan", "Omega_8(3, 6)", "Omega_4(3, 2)", "Z=", "workspace", "out_grad 56x56x256"):
        assert piece in text
    print(text)


def test_three_d_layer_is_planned_as_stacked_depth_taps():
    """Level 2 of the paper's dimension reduction: a 3x3x3 layer is 3 stacked 2D problems over N x OD images."""
    x = jax.ShapeDtypeStruct((2, 8, 9, 10, 4), np.float32)
    rhs = jax.ShapeDtypeStruct((3, 3, 3, 4, 6), np.float32)
    plan = winrs_jax.plan(
        x, rhs, (1, 1, 1), ((1, 0), (1, 1), (0, 2)), dimension_numbers=("NDHWC", "DHWIO", "NDHWC")
    )
    assert plan.supported, plan.reason
    assert plan.depth == (8, 7, 3) and plan.depth_pads == (1, 0) and plan.batch == 2 * 7
    assert plan.input_hw == (9, 10) and plan.filter_hw == (3, 3) and plan.pads == (1, 1, 0, 2)
    assert plan.canonical_shapes() == ((2, 8, 9, 10, 4), (2, 7, 9, 10, 6), (6, 3, 3, 3, 4))
    assert "3 filter depth taps" in str(plan)


def test_strided_dilated_three_d_layer_plans_its_taps_as_2d_pieces():
    """A strided 3D layer: the depth stride picks each tap's depth slices; height and width are DWM pieces."""
    x = jax.ShapeDtypeStruct((2, 9, 16, 16, 8), np.float32)
    rhs = jax.ShapeDtypeStruct((3, 3, 3, 8, 16), np.float32)
    dn = ("NDHWC", "DHWIO", "NDHWC")
    plan = winrs_jax.plan(x, rhs, (2, 2, 2), ((1, 1), (1, 1), (1, 1)), dimension_numbers=dn)
    assert plan.supported, plan.reason
    assert (
        plan.depth == (9, 5, 3) and plan.depth_stride == 2 and plan.batch == 2 * 5 and plan.strides == (2, 2)
    )
    assert len(plan.phases) == 4 and plan.canonical_shapes()[1] == (2, 5, 8, 8, 16)
    assert plan.workspace_bytes == 3 * max(phase.plan.workspace_bytes for phase in plan.phases)
    text = str(plan)
    assert "depth stride 2" in text and "fd + 2 * j (j < 5)" in text and "4 stride-1 pieces" in text, text
    dilated = winrs_jax.plan(x, rhs, (1, 1, 1), "SAME", rhs_dilation=(2, 1, 1), dimension_numbers=dn)
    assert dilated.supported and dilated.depth == (9, 9, 3) and dilated.depth_dilation == 2, dilated.reason
    assert "fd * 2 + j (j < 9)" in str(dilated)


def test_four_d_convolution_falls_back():
    x = jax.ShapeDtypeStruct((1, 2, 4, 4, 4, 4), np.float32)  # default layout: N x C x spatial
    rhs = jax.ShapeDtypeStruct((2, 2, 2, 2, 2, 2), np.float32)
    plan = winrs_jax.plan(x, rhs, (1,) * 4, "SAME")
    assert not plan.supported and "4D" in plan.reason


@pytest.mark.parametrize(
    "path, reference, alpha_classes, largest_picked",
    [("fp32", "fp32", {2, 4, 8}, 8), ("fp32", "tf32", {2, 4, 8, 16}, 16), ("tf32x3", "fp32", {2, 4, 8}, 8),
     ("tf32", "tf32", {2, 4, 8}, 8), ("bf16", "bf16", {2}, 2), ("fp16", "fp16", {2, 4}, 2)],
)  # fmt: skip
def test_planner_picks_only_variants_the_accuracy_budget_admits(
    path, reference, alpha_classes, largest_picked
):
    """Over many filter and output widths the planner picks admitted variants only, among them the largest
    admitted alpha class that is fastest somewhere. With the measured accuracies, alpha-16 kernels run only on
    an FP32-accurate path where TF32 accuracy was asked for, and 16-bit operands allow no Winograd kernel above
    alpha 4; float16's one admitted alpha-4 kernel, Omega_4(2, 3), delivers 1.5 x 97.8 effective TFLOP/s
    against the copy-staged direct kernel's 238.9, so no Winograd kernel runs in 16 bits."""
    mare_budget, signed_budget = ACCURACY_BUDGET[reference]
    admitted = {
        v.index
        for v in VARIANTS
        if v.shapes[path].mare <= mare_budget and v.shapes[path].signed_error <= signed_budget
    }
    assert {VARIANTS[i].alpha_class for i in admitted} == alpha_classes
    picked = set()
    for fw, ow in itertools.product(range(2, 19), range(1, 40)):
        plan = plan_canonical(1, (3, ow + fw - 1), 4, 4, (1, fw), (0, 0, 0, 0), path, reference)
        if plan.supported:
            picked.update(k.index for k in plan.kernels)
    assert picked <= admitted
    assert max(VARIANTS[i].alpha_class for i in picked) == largest_picked


def test_tensors_of_2_31_elements_fall_back():
    x = jax.ShapeDtypeStruct((64, 512, 512, 256), np.float32)  # 2^32 elements
    rhs = jax.ShapeDtypeStruct((3, 3, 256, 8), np.float32)
    plan = winrs_jax.plan(x, rhs, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert not plan.supported and "2^31" in plan.reason


@pytest.mark.parametrize(
    "capability, smem",
    [("9.0", 227 * 1024), ("8.0", 163 * 1024), ("8.6", 99 * 1024), ("8.9", 99 * 1024), (None, 227 * 1024)],
)
def test_the_visible_gpu_sets_the_shared_memory_per_block(capability, smem, monkeypatch):
    """By default a plan keeps to the visible GPU's shared memory per block, read off its compute capability (an
    H100's without a GPU, or where the device does not say)."""
    from winrs_jax import planner

    gpu = types.SimpleNamespace(
        core_count=84, **({} if capability is None else {"compute_capability": capability})
    )

    def devices(backend=None):
        if backend in ("cuda", "gpu"):
            return [gpu]
        raise RuntimeError(f"no {backend} backend")

    monkeypatch.setattr(planner.jax, "devices", devices)
    assert planner.default_smem_per_block() == smem and planner.default_sm_count() == 84


def test_the_printout_of_a_plan_of_one_bucket():
    """A deterministic plan whose segments all add into dW (one bucket) says so in words: not "1 buckets ... the
    first is dW", and its second segment is the residual column's (the text counts kernel 0's per bucket)."""
    lhs, rhs = (
        jax.ShapeDtypeStruct((2, 12, 13, 5), jnp.float32),
        jax.ShapeDtypeStruct((3, 3, 5, 6), jnp.float32),
    )
    plan = winrs_jax.plan(lhs, rhs, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                          options=PlannerOptions(mode="model", deterministic=True, segments=1))  # fmt: skip
    assert plan.buckets == 1 and plan.segments == 2 and plan.chain == 1, plan
    assert "workspace  0 bytes: dW alone; one segment of kernel 0 per bucket; the residual column" in str(
        plan
    )
