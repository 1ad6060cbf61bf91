"""The CUDA handler on an NVIDIA GPU (marker `gpu`; skipped without a GPU and the CUDA build)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import mare, reference_filter_grad, reference_general_filter_grad
from jax import lax
from test_grouped import CASES as GROUPED_CASES
from test_grouped import TENSOR_CORE_CASES
from test_grouped import _reference as grouped_reference

import winrs_jax
from winrs_jax import _ffi, _winrs
from winrs_jax.planner import PATH_DTYPES, PATHS

pytestmark = pytest.mark.gpu

VARIANTS = winrs_jax.variants()
DN = ("NHWC", "HWIO", "NHWC")


def _filter_grad(x, dy, filter_hw, pads, device, **options):
    rhs_shape = (*filter_hw, x.shape[3], dy.shape[3])
    padding = ((pads[0], pads[1]), (pads[2], pads[3]))
    fn = jax.jit(
        functools.partial(
            winrs_jax.conv_backward_filter, rhs_shape=rhs_shape, window_strides=(1, 1), padding=padding,
            dimension_numbers=DN, options=winrs_jax.PlannerOptions(**options),
        )
    )  # fmt: skip
    x, dy = jax.device_put(x, device), jax.device_put(dy, device)
    return np.asarray(fn(x, dy).astype(np.float32), np.float64).transpose(3, 0, 1, 2)


def _gpu():
    return jax.devices("cuda")[0]


def _inputs(rng, path, x_shape, dy_shape):
    scale = 1e-2 if path == "fp16" else 1.0  # the paper's FP16 protocol
    x = jnp.asarray(rng.random(x_shape, dtype=np.float32), PATH_DTYPES[path])
    dy = jnp.asarray(scale * rng.random(dy_shape, dtype=np.float32), PATH_DTYPES[path])
    return x, dy


def _reference(x, dy, filter_hw, pads):
    return reference_filter_grad(np.asarray(x, np.float64), np.asarray(dy, np.float64), filter_hw, pads)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_every_variant_on_every_path(variant, path, rng):
    """The paper's protocol, each kernel alone: MARE within 3x of the table (variants.h, measured on the CPU
    executor's emulation of the same rounding) and no inf or nan. (tools/kernel_check.cu compares every
    variant and path with the CPU executor element by element, under compute-sanitizer.)"""
    fw = variant.n * (2 if variant.n <= 3 else 1)
    pads = (1, 1, 0, 0)
    out_w = 3 * variant.r
    # 67 and 45 channels take the scalar loads; 36 and 100 the vector loads with partial channel blocks; 130 and
    # 70 span several blocks of the tensor-core shapes.
    for (in_c, out_c), segments in (((67, 45), 5), ((36, 100), 3), ((130, 70), 1)):
        x, dy = _inputs(rng, path, (8, 12, out_w + fw - 1, in_c), (8, 12, out_w, out_c))
        options = dict(kernels=(variant.index, variant.index), segments=segments, path=path)
        dw = _filter_grad(x, dy, (3, fw), pads, _gpu(), **options)
        assert np.isfinite(dw).all()
        assert mare(dw, _reference(x, dy, (3, fw), pads)) <= 3 * variant.shapes[path].mare


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "shape",
    [(2, 9, 11, 5, 6, 3, 3, (1, 1, 1, 1)), (1, 13, 17, 3, 7, 5, 4, (2, 0, 3, 1)), (3, 7, 23, 9, 4, 2, 18, (0, 1, 0, 2)),
     (2, 31, 29, 130, 66, 7, 7, (3, 3, 3, 3)), (4, 14, 14, 257, 129, 9, 9, (4, 4, 4, 4))],
    ids=["3x3", "5x4-asym", "2x18", "7x7-ragged", "9x9-ragged"],
)  # fmt: skip
def test_gpu_matches_cpu_plan_execution(shape, path, rng):
    """The planner's own plan executed by both handlers; the float64 reference bounds both alike."""
    n, h, w, c, k, fh, fw, pads = shape
    x, dy = _inputs(
        rng, path, (n, h, w, c), (n, h + pads[0] + pads[1] - fh + 1, w + pads[2] + pads[3] - fw + 1, k)
    )
    ref = _reference(x, dy, (fh, fw), pads)
    gpu = _filter_grad(x, dy, (fh, fw), pads, _gpu(), segments=6, path=path)
    cpu = _filter_grad(x, dy, (fh, fw), pads, jax.devices("cpu")[0], segments=6, path=path)
    assert np.isfinite(gpu).all()
    assert mare(gpu, ref) <= 1.5 * mare(cpu, ref) + 1e-7


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("buckets", [1, 5])
def test_chained_segments_add_in_order(buckets, path, rng):
    """51 segments of Omega_4(3, 2) and 3 residual ones of the direct kernel sharing 1 or 5 buckets: without the
    semaphores that order the links, up to 51 blocks add into the same dW tile at once and lose updates. In
    order, the result matches the CPU executor's (which runs the links one after the other) and repeats bit for
    bit."""
    pads = (1, 1, 1, 1)
    x, dy = _inputs(rng, path, (4, 64, 35, 40), (4, 64, 35, 24))
    options = dict(segments=64, buckets=buckets, path=path, kernels=(2, 0))  # Omega_4(3, 2), then direct
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct((3, 3, 40, 24), x.dtype), (1, 1), ((1, 1), (1, 1)),
                          dimension_numbers=DN, options=winrs_jax.PlannerOptions(**options))  # fmt: skip
    assert plan.buckets == buckets and plan.chain == -(-51 // buckets) and len(plan.kernels) == 2, plan
    ref = _reference(x, dy, (3, 3), pads)
    gpu = _filter_grad(x, dy, (3, 3), pads, _gpu(), **options)
    cpu = _filter_grad(x, dy, (3, 3), pads, jax.devices("cpu")[0], **options)
    assert mare(gpu, ref) <= 1.5 * mare(cpu, ref) + 1e-7
    np.testing.assert_array_equal(gpu, _filter_grad(x, dy, (3, 3), pads, _gpu(), **options))
    # Stacked problems (vmap) each have their own semaphores, reset before every call.
    fn = jax.jit(jax.vmap(functools.partial(
        winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 40, 24), window_strides=(1, 1), padding=((1, 1), (1, 1)),
        dimension_numbers=DN, options=winrs_jax.PlannerOptions(**options))))  # fmt: skip
    stacked = np.asarray(fn(jnp.stack([x, 2 * x]), jnp.stack([dy, dy])).astype(np.float32), np.float64)
    np.testing.assert_array_equal(stacked[0].transpose(3, 0, 1, 2), gpu)
    np.testing.assert_array_equal(stacked[1].transpose(3, 0, 1, 2), 2 * gpu)  # doubling X is exact throughout


@pytest.mark.parametrize("path", PATHS)
def test_atomic_adds_match_the_cpu(path, rng):
    """The same 54 segments adding into dW by atomic adds (deterministic=False): as accurate as the CPU executor's
    in-order sum; stacked problems (vmap) add into their own dW, each zeroed first."""
    pads = (1, 1, 1, 1)
    x, dy = _inputs(rng, path, (4, 64, 35, 40), (4, 64, 35, 24))
    options = dict(segments=64, deterministic=False, path=path, kernels=(2, 0))
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct((3, 3, 40, 24), x.dtype), (1, 1), ((1, 1), (1, 1)),
                          dimension_numbers=DN, options=winrs_jax.PlannerOptions(**options))  # fmt: skip
    assert plan.atomic and plan.workspace_bytes == 0 and len(plan.kernels) == 2, plan
    ref = _reference(x, dy, (3, 3), pads)
    gpu = _filter_grad(x, dy, (3, 3), pads, _gpu(), **options)
    cpu = _filter_grad(x, dy, (3, 3), pads, jax.devices("cpu")[0], **options)
    assert mare(gpu, ref) <= 1.5 * mare(cpu, ref) + 1e-7
    # dW comes back in the input dtype: sums in another order may round to a neighbouring 16-bit value
    tol = 1e-5 if x.dtype == np.float32 else float(jnp.finfo(x.dtype).eps)
    np.testing.assert_allclose(gpu, cpu, rtol=tol, atol=tol * np.abs(cpu).max())
    fn = jax.jit(jax.vmap(functools.partial(
        winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 40, 24), window_strides=(1, 1), padding=((1, 1), (1, 1)),
        dimension_numbers=DN, options=winrs_jax.PlannerOptions(**options))))  # fmt: skip
    for _ in range(2):  # the second call's buffers held the first call's sums
        stacked = np.asarray(fn(jnp.stack([x, 2 * x]), jnp.stack([dy, dy])).astype(np.float32), np.float64)
        np.testing.assert_allclose(
            stacked[0].transpose(3, 0, 1, 2), cpu, rtol=tol, atol=tol * np.abs(cpu).max()
        )
        np.testing.assert_allclose(stacked[1].transpose(3, 0, 1, 2), 2 * cpu, rtol=tol,
                                   atol=2 * tol * np.abs(cpu).max())  # fmt: skip


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
def test_long_accumulation_stays_as_accurate_as_xla(dtype, rng):
    """An accumulation length N x O_H x O_W = 2^18, where the paper saw cuDNN's 16-bit algorithms degrade:
    WinRS's segments and FP32 Kahan reduction keep its MARE within 2x of XLA's in the same dtype."""
    scale = 1e-2 if dtype == np.float16 else 1.0
    x = jnp.asarray(rng.random((16, 128, 128, 16), dtype=np.float32), dtype)
    dy = jnp.asarray(scale * rng.random((16, 128, 128, 16), dtype=np.float32), dtype)
    ref = _reference(x, dy, (3, 3), (1, 1, 1, 1))
    ours = _filter_grad(x, dy, (3, 3), (1, 1, 1, 1), _gpu())
    w = jnp.zeros((3, 3, 16, 16), dtype)
    xla = jax.jit(lambda x, dy: jax.vjp(lambda w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN),
                                        w)[1](dy)[0])(x, dy)  # fmt: skip
    xla = np.asarray(xla.astype(np.float32), np.float64).transpose(3, 0, 1, 2)
    assert mare(ours, ref) <= 2 * mare(xla, ref)


@pytest.mark.parametrize(
    "precision, reference", [(None, "tf32"), (lax.Precision.HIGH, "tf32"), (lax.Precision.HIGHEST, "fp32")]
)
def test_float32_precision_means_what_it_means_for_xla(precision, reference, rng):
    """XLA runs float32 convolutions on TF32 tensor cores at DEFAULT and HIGH precision and in FP32 only at
    HIGHEST (measured on an H100, jax 0.11.2): its error says which, and WinRS's plan takes the same reference
    and stays within its budget."""
    x = jnp.asarray(rng.random((8, 32, 32, 64), dtype=np.float32))
    dy = jnp.asarray(rng.random((8, 32, 32, 64), dtype=np.float32))
    args = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=DN, precision=precision)
    w = jnp.zeros((3, 3, 64, 64), jnp.float32)
    xla = jax.jit(lambda x, dy: jax.vjp(lambda w: lax.conv_general_dilated(x, w, **args), w)[1](dy)[0])(x, dy)
    ref = _reference(x, dy, (3, 3), (1, 1, 1, 1))
    xla_error = mare(np.asarray(xla, np.float64).transpose(3, 0, 1, 2), ref)
    assert (xla_error > 5e-6) == (reference == "tf32"), xla_error
    plan = winrs_jax.plan(x, w, **args)
    assert plan.reference == reference
    ours = jax.jit(lambda x, dy: winrs_jax.conv_backward_filter(x, dy, w.shape, **args))(x, dy)
    assert mare(np.asarray(ours, np.float64).transpose(3, 0, 1, 2), ref) <= max(2 * xla_error, 4e-7)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16])
@pytest.mark.parametrize(
    "lhs_shape, rhs_shape, padding, dn, batch_groups, strides",
    [
        ((3, 17, 13, 5), (3, 3, 5, 7), ((2, 0), (1, 2)), DN, 1, (1, 1)),
        ((2, 6, 19, 23), (10, 6, 5, 5), "SAME", ("NCHW", "OIHW", "NCHW"), 1, (1, 1)),
        ((2, 33, 6), (7, 6, 3), ((3, 3),), ("NWC", "WIO", "NWC"), 1, (1,)),
        ((4, 9, 11, 6), (3, 3, 6, 8), "SAME", DN, 2, (1, 1)),  # grouped over the batch: a block-diagonal dY
        ((2, 7, 9, 10, 4), (3, 3, 3, 4, 6), "SAME", ("NDHWC", "DHWIO", "NDHWC"), 1, (2, 2, 2)),  # strided 3D
    ],
)
def test_conv_gradients_match_xla_on_gpu(
    lhs_shape, rhs_shape, padding, dn, batch_groups, strides, dtype, rng
):
    lhs = jnp.asarray(rng.standard_normal(lhs_shape), dtype)
    rhs = jnp.asarray(rng.standard_normal(rhs_shape), dtype)
    precision = lax.Precision.HIGHEST if dtype == np.float32 else None

    def loss(conv, lhs, rhs):
        y = conv(lhs, rhs, strides, padding, dimension_numbers=dn, precision=precision,
                 batch_group_count=batch_groups)  # fmt: skip
        return jnp.sum(jnp.sin(y.astype(jnp.float32)))

    ours = jax.jit(jax.grad(functools.partial(loss, winrs_jax.conv), argnums=(0, 1)))(lhs, rhs)
    theirs = jax.jit(jax.grad(functools.partial(loss, lax.conv_general_dilated), argnums=(0, 1)))(lhs, rhs)
    tolerance = 2e-4 if dtype == np.float32 else 8 * float(jnp.finfo(dtype).eps)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype == dtype
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=0, atol=tolerance * np.abs(b).max())
    text = jax.jit(jax.grad(functools.partial(loss, winrs_jax.conv), argnums=1)).lower(lhs, rhs).as_text()
    assert "winrs_backward_filter" in text


# Layers of the direct kernel's Hopper forms on the 16-bit paths: x shape, dY channels, filter. The filter-row
# tile (by wgmma on sm_90a) needs a channel count of at most 64 and a width of at least 3 (here partial channel
# blocks, several blocks and widths past a multiple of 3); TMA staging, batches of 32 or a multiple of 64 and
# both channel counts above 64 (partial channel panels); batch 16 takes cp.async staging. The last three: the
# 128 x 128 block of one filter column where the filter-row tile on 128 x 128 channels ran until the thirty-first
# stop (variants.h, kWideBlock): partial channel panels, long rows, 2D and 1D.
HOPPER_LAYERS = [
    ((4, 10, 22, 64), 40, (3, 3)),
    ((2, 9, 30, 24), 200, (3, 6)),
    ((4, 10, 22, 64), 40, (5, 5)),
    ((2, 9, 30, 24), 72, (3, 7)),
    ((64, 5, 9, 136), 72, (3, 3)),
    ((64, 4, 7, 200), 136, (3, 5)),
    ((32, 5, 8, 136), 72, (3, 3)),
    ((16, 5, 8, 136), 72, (3, 3)),
    ((2, 22, 256, 120), 72, (3, 3)),
    ((3, 30, 190, 128), 128, (3, 3)),
    ((3, 1, 1400, 136), 136, (1, 3)),
]


@pytest.mark.parametrize("path", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", range(len(HOPPER_LAYERS)))
def test_direct_kernel_forms_match_the_cpu(layer, path, rng):
    """The direct kernel against the CPU handler's same plan (the float64 reference bounds both alike)."""
    pads = (1, 1, 1, 1)
    x_shape, out_c, (fh, fw) = HOPPER_LAYERS[layer]
    n, h, w, _ = x_shape
    x, dy = _inputs(rng, path, x_shape, (n, h + 3 - fh, w + 3 - fw, out_c))
    ref = _reference(x, dy, (fh, fw), pads)
    gpu = _filter_grad(x, dy, (fh, fw), pads, _gpu(), kernels=(0, 0), segments=3, path=path)
    cpu = _filter_grad(x, dy, (fh, fw), pads, jax.devices("cpu")[0], kernels=(0, 0), segments=3, path=path)
    assert np.isfinite(gpu).all()
    assert mare(gpu, ref) <= 1.5 * mare(cpu, ref) + 1e-7
    np.testing.assert_allclose(gpu, cpu, rtol=1e-2, atol=1e-3 * np.abs(cpu).max())


@pytest.mark.parametrize("in_c", [16, 13], ids=["copy-staged", "register-staged"])
def test_tf32_rounds_ties_to_even_on_the_gpu(in_c):
    """Every TF32 operand conversion of the kernels rounds to nearest with ties to even, as the CPU executor
    does (cvt.rn.tf32.f32 on sm_90; cvt.rna, ties away from zero, would give each X value 1 + 2^-10): X at a
    tie (1 + 2^-11) everywhere, dY ones, so the direct kernel's dW is each tap's count of terms times 1.0."""
    x = jnp.full((2, 3, 8, in_c), 1 + 2.0**-11, jnp.float32)
    dy = jnp.ones((2, 3, 8, 16), jnp.float32)
    options = dict(mode="winrs", kernels=(0, 0), segments=1, path="tf32")
    gpu = _filter_grad(x, dy, (1, 3), (0, 0, 1, 1), _gpu(), **options)
    cpu = _filter_grad(x, dy, (1, 3), (0, 0, 1, 1), jax.devices("cpu")[0], **options)
    counts = np.array([7.0, 8.0, 7.0]) * 2 * 3  # columns each tap meets, times images and rows
    np.testing.assert_array_equal(cpu, np.broadcast_to(counts[None, None, :, None], cpu.shape))
    np.testing.assert_array_equal(gpu, cpu)


# The persistent block's T-tap tiles (cuda/wgmma_persistent.cuh) in 16 bits and on TF32 and split TF32
# (cuda/wgmma_tf32_taps.cuh, on unless WINRS_JAX_TF32_TAPS=0), as tap_run_grid cuts them (winrs/tap_runs.h):
# batches of 32, 64 and 128, three and two taps (5 = 3 + 2, 2), rows of an odd width with their last column
# apart, channels past a block's panels, and rows of two (a filter row's tiles without steps), on all SMs and on
# 3 blocks walking many tiles. (tools/kernel_check.cu asserts that its TF32 cases launch the TF32 tiles.)
TAP_TILE_LAYERS = [
    ((32, 6, 18, 136), 72, (3, 3)),
    ((64, 4, 23, 72), 136, (3, 3)),
    ((128, 3, 18, 136), 72, (3, 5)),
    ((32, 2, 17, 200), 136, (3, 2)),
    ((64, 2, 22, 136), 72, (3, 3)),
]


@pytest.mark.parametrize("blocks", ["", "3"], ids=lambda v: v or "all")
@pytest.mark.parametrize("path", ["tf32", "tf32x3", "bf16"])
@pytest.mark.parametrize("layer", range(len(TAP_TILE_LAYERS)))
def test_tap_tiles_match_the_cpu(layer, path, blocks, rng, monkeypatch):
    """The tiles round operands as the CPU executor does (TF32: tf32_bits; split TF32: split_tf32's two parts;
    16 bits: exact products), so only the order of float32 sums differs: positive inputs, no cancellation. Split
    TF32 is FP32-accurate: against float64 too, where a dropped low part would show. A 16-bit dW is rounded to
    16 bits at the end, where that order may move a sum across a rounding boundary: one bf16 step (2^-7 of the
    value) apart."""
    monkeypatch.setenv("WINRS_JAX_TF32_TAPS", "1")
    monkeypatch.setenv("WINRS_JAX_PERSISTENT_BLOCKS", blocks)
    pads = (1, 1, 1, 1)
    x_shape, out_c, (fh, fw) = TAP_TILE_LAYERS[layer]
    n, h, w, _ = x_shape
    x, dy = _inputs(rng, path, x_shape, (n, h + 3 - fh, w + 3 - fw, out_c))
    launches = _winrs.tf32_tile_launches()
    gpu = _filter_grad(x, dy, (fh, fw), pads, _gpu(), kernels=(0, 0), path=path)
    cpu = _filter_grad(x, dy, (fh, fw), pads, jax.devices("cpu")[0], kernels=(0, 0), path=path)
    if path != "bf16":  # the tiles ran, not the direct kernel on mma.sync (which gives the same sums)
        assert _winrs.tf32_tile_launches() > launches
    rtol = {"tf32": 1e-4, "tf32x3": 2e-5, "bf16": 2.0**-7}[path]
    np.testing.assert_allclose(gpu, cpu, rtol=rtol, atol=1e-5 * np.abs(cpu).max())
    if path == "tf32x3":  # FP32-level against float64: a dropped low part or cross term leaves 1.8e-5 or more
        assert mare(gpu, _reference(x, dy, (fh, fw), pads)) <= 1.5e-6


@pytest.mark.parametrize("path", ["tf32", "tf32x3"])
def test_tf32_plans_take_the_tiles_on_hopper(path, rng, monkeypatch):
    """On an sm_90 GPU a float32 layer at DEFAULT precision (split TF32: the path HIGHEST may run) where the TF32
    tiles fit and beat the Winograd kernels plans them by default (planner.py, default_tf32_tiles) and runs them:
    within the error of the direct kernel on mma.sync with them off, against the float64 reference (split TF32:
    FP32-level, where a dropped low part would leave TF32's error, about a thousand times more)."""
    if str(_gpu().compute_capability) != "9.0" or not _winrs.wgmma_built:
        pytest.skip("the TF32 tiles run on sm_90 with the sm_90a kernels built")
    forced = {"path": path} if path == "tf32x3" else {}
    x_shape, dy_shape = (32, 14, 16, 128), (32, 14, 16, 128)
    x, dy = _inputs(rng, path, x_shape, dy_shape)
    plan = winrs_jax.plan(jax.ShapeDtypeStruct(x_shape, jnp.float32), jax.ShapeDtypeStruct((3, 3, 128, 128),
                          jnp.float32), (1, 1), ((1, 1), (1, 1)), dimension_numbers=DN,
                          options=winrs_jax.PlannerOptions(mode="winrs", **forced))  # fmt: skip
    assert plan.tf32_tiles and plan.path == path, str(plan)
    ref = _reference(x, dy, (3, 3), (1, 1, 1, 1))
    launches = _winrs.tf32_tile_launches()
    tiles = _filter_grad(x, dy, (3, 3), (1, 1, 1, 1), _gpu(), mode="winrs", **forced)
    assert _winrs.tf32_tile_launches() > launches
    monkeypatch.setenv("WINRS_JAX_TF32_TAPS", "0")  # read by the planner and at each launch
    launches = _winrs.tf32_tile_launches()
    direct = _filter_grad(x, dy, (3, 3), (1, 1, 1, 1), _gpu(), mode="winrs", kernels=(0, 0), **forced)
    assert _winrs.tf32_tile_launches() == launches
    if path == "tf32":
        assert mare(tiles, ref) <= 1.5 * mare(direct, ref) + 1e-7, (mare(tiles, ref), mare(direct, ref))
    else:  # the tiles' bias (about 4.8e-7, docs/benchmarks.md, thirty-ninth stop), far under TF32's error
        assert mare(tiles, ref) <= 1e-6 and mare(direct, ref) <= 1e-6, (mare(tiles, ref), mare(direct, ref))


def test_split_tiles_low_products_first_are_more_accurate(rng, monkeypatch):
    """WINRS_JAX_TF32X3_LOW_FIRST=1 (an experiment's switch, read at each launch) orders each step of the
    split-TF32 tiles' products so that fewer truncating additions land on a large partial sum: against float64,
    their MARE falls well below the interleaved order's (tools/split_tf32_bias.py emulates 1.8e-7 against
    4.7e-7, the figure the interleaved tiles measured)."""
    if str(_gpu().compute_capability) != "9.0" or not _winrs.wgmma_built:
        pytest.skip("the TF32 tiles run on sm_90 with the sm_90a kernels built")
    monkeypatch.setenv("WINRS_JAX_TF32_TAPS", "1")
    x, dy = _inputs(rng, "tf32x3", (32, 14, 16, 128), (32, 14, 16, 128))
    ref = _reference(x, dy, (3, 3), (1, 1, 1, 1))
    errors = {}
    for order in ("0", "1"):
        monkeypatch.setenv("WINRS_JAX_TF32X3_LOW_FIRST", order)
        launches = _winrs.tf32_tile_launches()
        dw = _filter_grad(x, dy, (3, 3), (1, 1, 1, 1), _gpu(), mode="winrs", kernels=(0, 0), path="tf32x3")
        assert _winrs.tf32_tile_launches() > launches
        errors[order] = mare(dw, ref)
    assert errors["1"] < 0.75 * errors["0"], errors


@pytest.mark.parametrize(
    "layer", [((32, 6, 18, 64), 136, (3, 3)), ((64, 4, 23, 40), 200, (3, 6)), ((32, 6, 19, 64), 136, (3, 3))]
)
def test_split_tiles_on_row_tile_layers_match_the_cpu(layer, rng, monkeypatch):
    """WINRS_JAX_TF32X3_ROW_TILE_LAYERS=1 (an experiment's switch, cpp/winrs/tap_runs.h) gives layers of at most
    64 input channels against more than 64 output channels, which the direct kernel runs as its filter-row
    tile, to the split-TF32 tiles (their X side is 64 channels): the same sums as the CPU executor, FP32-level
    against float64; a row of odd width at a batch of 32 keeps its last column on the filter-row tile."""
    if str(_gpu().compute_capability) != "9.0" or not _winrs.wgmma_built:
        pytest.skip("the TF32 tiles run on sm_90 with the sm_90a kernels built")
    monkeypatch.setenv("WINRS_JAX_TF32_TAPS", "1")
    monkeypatch.setenv("WINRS_JAX_TF32X3_ROW_TILE_LAYERS", "1")
    x_shape, out_c, (fh, fw) = layer
    n, h, w, _ = x_shape
    pads = (1, 1, 1, 1)
    x, dy = _inputs(rng, "tf32x3", x_shape, (n, h + 3 - fh, w + 3 - fw, out_c))
    launches = _winrs.tf32_tile_launches()
    gpu = _filter_grad(x, dy, (fh, fw), pads, _gpu(), kernels=(0, 0), path="tf32x3")
    assert _winrs.tf32_tile_launches() > launches
    cpu = _filter_grad(x, dy, (fh, fw), pads, jax.devices("cpu")[0], kernels=(0, 0), path="tf32x3")
    np.testing.assert_allclose(gpu, cpu, rtol=2e-5, atol=1e-5 * np.abs(cpu).max())
    assert mare(gpu, _reference(x, dy, (fh, fw), pads)) <= 1.5e-6


def test_stacked_problems_one_persistent_launch_each(rng, monkeypatch):
    """WINRS_JAX_STACKED_PERSISTENT=1 (an experiment's switch, cuda/omega_kernel.cuh) launches stacked problems
    (vmap here; a 3D layer's depth taps on copies, feature groups) one at a time where the persistent block takes
    a problem: each problem's own X, dY and dW, as the stacked launch of the 128 x 128 block gives them."""
    if str(_gpu().compute_capability) != "9.0" or not _winrs.wgmma_built:
        pytest.skip("the persistent block runs on sm_90 with the sm_90a kernels built")
    x, dy = _inputs(rng, "bf16", (64, 4, 20, 136), (64, 4, 20, 72))
    xs, dys = jnp.stack([x, 2 * x, x]), jnp.stack([dy, dy, 2 * dy])

    def filter_grads() -> np.ndarray:  # a new program each call, which launches anew (the switch is read there)
        fn = jax.jit(jax.vmap(functools.partial(
            winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 136, 72), window_strides=(1, 1),
            padding=((1, 1), (1, 1)), dimension_numbers=DN,
            options=winrs_jax.PlannerOptions(kernels=(0, 0), path="bf16"))))  # fmt: skip
        return np.asarray(fn(xs, dys).astype(np.float32), np.float64)

    launches = _winrs.persistent_launches()
    stacked = filter_grads()
    assert _winrs.persistent_launches() == launches, "the reference is the stacked launch of the 128 x 128 block"
    monkeypatch.setenv("WINRS_JAX_STACKED_PERSISTENT", "1")
    launches = _winrs.persistent_launches()
    each = filter_grads()
    assert _winrs.persistent_launches() >= launches + 3
    # Both sum exact bf16 products in float32, in different orders; a bf16 dW is rounded at the end.
    np.testing.assert_allclose(each, stacked, rtol=2.0**-7, atol=1e-5 * np.abs(stacked).max())
    np.testing.assert_allclose(each[1], 2 * each[0], rtol=2.0**-7)
    np.testing.assert_allclose(each[2], 2 * each[0], rtol=2.0**-7)


def test_stacked_problems_beyond_one_launch(rng):
    """vmap over 70000 tiny problems: more than gridDim.y allows in one launch, so the launcher splits them."""
    x = jnp.asarray(rng.random((70000, 1, 4, 6, 2), dtype=np.float32))
    dy = jnp.asarray(rng.random((70000, 1, 4, 6, 3), dtype=np.float32))
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 2, 3), padding="SAME",
                           dimension_numbers=DN, precision=lax.Precision.HIGHEST)  # fmt: skip
    ours = np.asarray(jax.jit(jax.vmap(fn))(x, dy))
    for i in (0, 65534, 65535, 69999):
        ref = _reference(x[i], dy[i], (3, 3), (1, 1, 1, 1)).transpose(1, 2, 3, 0)
        np.testing.assert_allclose(ours[i], ref, rtol=1e-5, atol=1e-5)


def test_handler_errors_on_gpu():
    from winrs_jax import _ffi

    x = jnp.ones((2, 8, 8, 4))
    attrs = dict(pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, stride_h=1, stride_w=1, path=0, reference=0,
                 sm_count=132, segments=1, buckets=0, variant0=1, variant1=-1, atomic=0,
                 smem_per_block=227 * 1024)  # fmt: skip
    with pytest.raises(Exception, match=f"{_ffi.TARGET}: .*forced kernels cannot tile"):
        np.asarray(_ffi.backward_filter_call(x, x, (), (4, 3, 3, 4), 0, attrs))


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16])
@pytest.mark.parametrize("case", range(len(GROUPED_CASES)))
def test_direct_grouped_kernels_match_float64_and_the_cpu(case, dtype, rng, monkeypatch):
    """The CUDA kernels sum the same tasks, splits and warps in the same order as the CPU executor (depthwise
    cases of a warp's channels on maps wider than 24 columns by the streaming kernel, other 16-bit depthwise
    cases with 16-byte channel runs by the pipelined one), the splits in a fixed order (deterministic; the
    default's atomic adds: test_splits_add_atomically_on_the_gpu). Groups of 2 to 16 channels would run as the
    dense layer (test_dense_grouped_layers_on_the_gpu): turned off, as the direct kernels still take them where
    there are many groups."""
    monkeypatch.setattr(winrs_jax.planner, "DENSE_MAX_GROUP_CHANNELS", 1)
    x_shape, filter_hw, multiplier, groups, strides, pads, dilation = GROUPED_CASES[case]
    w_shape = (*filter_hw, x_shape[3] // groups, x_shape[3] * multiplier)
    scale = 1e-2 if dtype == np.float16 else 1.0
    x = jnp.asarray(rng.random(x_shape, dtype=np.float32), dtype)
    out = jax.eval_shape(lambda x: lax.conv_general_dilated(x, jnp.zeros(w_shape, dtype), strides, pads,
                                                            rhs_dilation=dilation, dimension_numbers=DN,
                                                            feature_group_count=groups), x)  # fmt: skip
    dy = jnp.asarray(scale * rng.random(out.shape, dtype=np.float32), dtype)
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, window_strides=strides, padding=pads,
                           rhs_dilation=dilation, dimension_numbers=DN, feature_group_count=groups,
                           options=winrs_jax.PlannerOptions(deterministic=True))  # fmt: skip
    gpu = np.asarray(jax.jit(fn)(jax.device_put(x, _gpu()), jax.device_put(dy, _gpu())), np.float64)
    cpu_device = jax.devices("cpu")[0]
    cpu = np.asarray(jax.jit(fn)(jax.device_put(x, cpu_device), jax.device_put(dy, cpu_device)), np.float64)
    expected = grouped_reference(x, dy, filter_hw, strides, pads, dilation, groups)
    # FP32 sums, then dW rounded once to the filter's dtype (half an ulp: 2^-8 bfloat16, 2^-11 float16).
    rounding = {np.dtype(np.float32): 0.0, np.dtype(jnp.bfloat16): 2.0**-8, np.dtype(np.float16): 2.0**-11}
    tolerance = 1e-5 + rounding[np.dtype(dtype)]
    np.testing.assert_allclose(gpu, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())
    np.testing.assert_allclose(
        gpu, cpu, rtol=1e-6 + 2 * rounding[np.dtype(dtype)], atol=1e-6 * np.abs(expected).max()
    )
    assert "winrs_grouped_filter_grad" in jax.jit(fn).lower(x, dy).as_text()


@pytest.mark.parametrize("dtype, taps", [(np.float32, 3), (jnp.bfloat16, 5)])
def test_dense_grouped_layers_on_the_gpu(dtype, taps, rng):
    """ResNeXt-style groups (32 of 4 channels) run as the dense layer of all channels on the GPU's dense kernels,
    dW its diagonal blocks: against float64, to the accuracy of the dtype's dense kernels (bf16 operands: the
    paper's MARE budget for the direct kernel, 3.3e-3). 16-bit 3x3 layers run on tensor cores instead: bf16
    here is 5x5."""
    x = jnp.asarray(rng.random((32, 14, 14, 128), dtype=np.float32), dtype)  # a dense dW within X's bytes
    dy = jnp.asarray(rng.random((32, 14, 14, 128), dtype=np.float32), dtype)
    w_shape = (taps, taps, 4, 128)
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, padding="SAME",
                           dimension_numbers=DN, feature_group_count=32, precision=lax.Precision.HIGHEST,
                           options=winrs_jax.PlannerOptions(mode="winrs"))  # fmt: skip
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, dtype), (1, 1), "SAME", dimension_numbers=DN,
                          feature_group_count=32, options=winrs_jax.PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.dense_groups == 32
    got = np.asarray(jax.jit(fn)(jax.device_put(x, _gpu()), jax.device_put(dy, _gpu())), np.float64)
    pad = taps // 2
    expected = grouped_reference(x, dy, (taps, taps), (1, 1), ((pad, pad), (pad, pad)), (1, 1), 32)
    assert mare(got, expected) < (1e-6 if dtype == np.float32 else 3.3e-3)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
@pytest.mark.parametrize("case", range(len(TENSOR_CORE_CASES)))
def test_tensor_core_groups_match_float64_and_the_cpu(case, dtype, rng):
    """The grouped layers summed on tensor cores (mma.sync, float32 accumulators: products of 16-bit inputs are
    exact, so only the order of the float32 sums differs from the CPU's FMA): against float64 and the CPU
    handler, to the output dtype's rounding."""
    x_shape, groups, pads = TENSOR_CORE_CASES[case]
    c = x_shape[3]
    w_shape = (3, 3, c // groups, c)
    scale = 1e-2 if dtype == np.float16 else 1.0
    x = jnp.asarray(rng.standard_normal(x_shape), dtype)
    out = jax.eval_shape(lambda x: lax.conv_general_dilated(x, jnp.zeros(w_shape, dtype), (1, 1), pads,
                                                            dimension_numbers=DN,
                                                            feature_group_count=groups), x)  # fmt: skip
    dy = jnp.asarray(scale * rng.standard_normal(out.shape), dtype)
    options = winrs_jax.PlannerOptions(mode="winrs")
    assert winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, dtype), (1, 1), pads, dimension_numbers=DN,
                          feature_group_count=groups, options=options).tensor_cores  # fmt: skip
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, padding=pads, dimension_numbers=DN,
                           feature_group_count=groups, options=options)  # fmt: skip
    gpu = np.asarray(jax.jit(fn)(jax.device_put(x, _gpu()), jax.device_put(dy, _gpu())), np.float64)
    cpu_device = jax.devices("cpu")[0]
    cpu = np.asarray(jax.jit(fn)(jax.device_put(x, cpu_device), jax.device_put(dy, cpu_device)), np.float64)
    expected = grouped_reference(x, dy, (3, 3), (1, 1), pads, (1, 1), groups)
    rounding = 2.0 ** -(8 if dtype == jnp.bfloat16 else 11)
    tolerance = 1e-5 + rounding
    np.testing.assert_allclose(gpu, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5 + 2 * rounding, atol=1e-5 * np.abs(expected).max())


# test_grouped.CASES of each streaming form: 3x3, 4x4, multiplier 2, 7x7 on tensor cores (the band kernel: one
# tile, an odd count of X rows, 2 images a tile, 11x13 in tap tiles), 5x5 on 2 images, stride 2, 1D (4 and 31).
STREAMED_CASES = [14, 15, 17, 20, 21, 22, 24, 26, 29, 31, 35]


@pytest.mark.parametrize("case", STREAMED_CASES)
def test_streaming_kernels_copy_by_cp_async_too(case, rng, monkeypatch):
    """WINRS_JAX_STREAM_TMA=0 runs the streaming kernels' cp.async producer (the form sm_80 to sm_89 run) on this
    GPU: the same checks against float64 and the CPU handler as the TMA producer's."""
    monkeypatch.setenv("WINRS_JAX_STREAM_TMA", "0")
    monkeypatch.setattr(winrs_jax.planner, "DENSE_MAX_GROUP_CHANNELS", 1)
    x_shape, filter_hw, multiplier, groups, strides, pads, dilation = GROUPED_CASES[case]
    w_shape = (*filter_hw, x_shape[3] // groups, x_shape[3] * multiplier)
    plan = winrs_jax.plan(jax.ShapeDtypeStruct(x_shape, jnp.bfloat16), jax.ShapeDtypeStruct(w_shape, jnp.bfloat16),
                          strides, pads, rhs_dilation=dilation, dimension_numbers=DN, feature_group_count=groups,
                          options=winrs_jax.PlannerOptions(mode="winrs"))  # fmt: skip
    assert plan.streams
    test_direct_grouped_kernels_match_float64_and_the_cpu(case, jnp.bfloat16, rng, monkeypatch)


@pytest.mark.parametrize("case", [0, 1])
def test_tensor_core_groups_copy_by_cp_async_too(case, rng, monkeypatch):
    """The grouped tensor-core layers' cp.async producer (WINRS_JAX_STREAM_TMA=0), as the test above."""
    monkeypatch.setenv("WINRS_JAX_STREAM_TMA", "0")
    test_tensor_core_groups_match_float64_and_the_cpu(case, jnp.bfloat16, rng)


@pytest.mark.parametrize(
    "x_shape, filter_hw, groups",
    # 24 tiles of 16 channels a group; 8 tiles of a 7x7 depthwise layer
    [((6, 20, 40, 64), (3, 3), 4), ((4, 30, 30, 64), (7, 7), 64)],
    ids=["groups", "depthwise-7x7"],
)
def test_tensor_core_kernels_through_one_split(x_shape, filter_hw, groups, rng):
    """The tensor-core streaming kernels with every tile in one split: each block walks its tiles' hundreds of
    stages through a ring of 5 rows, which the TMA form's thread 0 reuses once the warps release them (done
    barriers, no block barrier: warps drift apart by up to the copies in flight). Against float64."""
    c = x_shape[3]
    pads = tuple((f // 2, f // 2) for f in filter_hw)
    w_shape = (*filter_hw, c // groups, c)
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.bfloat16)
    dy = jnp.asarray(rng.standard_normal(x_shape), jnp.bfloat16)
    options = winrs_jax.PlannerOptions(mode="winrs", segments=1)
    plan = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, jnp.bfloat16), (1, 1), pads, dimension_numbers=DN,
                          feature_group_count=groups, options=options)  # fmt: skip
    assert plan.tensor_cores and plan.splits == 1
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, padding=pads, dimension_numbers=DN,
                           feature_group_count=groups, options=options)  # fmt: skip
    got = np.asarray(jax.jit(fn)(jax.device_put(x, _gpu()), jax.device_put(dy, _gpu())), np.float64)
    expected = grouped_reference(x, dy, filter_hw, (1, 1), pads, (1, 1), groups)
    tolerance = 1e-5 + 2.0**-8
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())


# A case of each kernel form (test_grouped.CASES): staging (3x3 strided, and 16-bit pipelined), streaming (3x3),
# the band kernel (7x7), stride 2 streamed, 1D streamed, and ResNeXt-style groups on tensor cores.
ATOMIC_CASES = [(1, np.float32), (0, jnp.bfloat16), (14, np.float32), (21, jnp.bfloat16), (29, jnp.bfloat16),
                (31, np.float32), ("groups", jnp.bfloat16)]  # fmt: skip


@pytest.mark.parametrize(
    "case, dtype", ATOMIC_CASES, ids=[f"{c}-{np.dtype(t).name}" for c, t in ATOMIC_CASES]
)
def test_splits_add_atomically_on_the_gpu(case, dtype, rng, monkeypatch):
    """By default the splits add into dW as they finish (atomic adds into the dW the handler zeroed; no workspace,
    no reduction pass): against float64 and the fixed-order compensated sum, three splits forced, each program
    run twice (a dW not zeroed first would keep the first run's sums)."""
    monkeypatch.setattr(winrs_jax.planner, "DENSE_MAX_GROUP_CHANNELS", 1)
    groups_case = ((2, 20, 40, 64), (3, 3), 1, 4, (1, 1), ((1, 1), (1, 1)), (1, 1))
    x_shape, filter_hw, multiplier, groups, strides, pads, dilation = (
        groups_case if case == "groups" else GROUPED_CASES[case]
    )
    w_shape = (*filter_hw, x_shape[3] // groups, x_shape[3] * multiplier)
    x = jnp.asarray(rng.random(x_shape, dtype=np.float32), dtype)
    out = jax.eval_shape(lambda x: lax.conv_general_dilated(x, jnp.zeros(w_shape, dtype), strides, pads,
                                                            rhs_dilation=dilation, dimension_numbers=DN,
                                                            feature_group_count=groups), x)  # fmt: skip
    dy = jnp.asarray(rng.random(out.shape, dtype=np.float32), dtype)
    args = dict(window_strides=strides, padding=pads, rhs_dilation=dilation, dimension_numbers=DN,
                feature_group_count=groups)  # fmt: skip
    expected = grouped_reference(x, dy, filter_hw, strides, pads, dilation, groups)
    rounding = 0.0 if dtype == np.float32 else 2.0**-8
    tolerance = 1e-5 + rounding
    results = {}
    for deterministic in (None, True):
        options = winrs_jax.PlannerOptions(mode="winrs", segments=3, deterministic=deterministic)
        plan = winrs_jax.plan(x, jax.ShapeDtypeStruct(w_shape, dtype), **args, options=options)
        assert plan.method == "direct" and plan.splits == 3 and plan.atomic == (deterministic is None)
        assert plan.tensor_cores == (case in (21, "groups")) and plan.streams == (case not in (0, 1))
        fn = jax.jit(
            functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, **args, options=options)
        )
        xd, dyd = jax.device_put(x, _gpu()), jax.device_put(dy, _gpu())
        first = np.asarray(fn(xd, dyd), np.float64)
        results[deterministic] = np.asarray(fn(xd, dyd), np.float64)
        for got in (first, results[deterministic]):
            np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())
    np.testing.assert_allclose(results[None], results[True], rtol=1e-6 + 2 * rounding)


def test_direct_grouped_long_accumulation_and_many_stacked_problems(rng):
    """A depthwise layer summing 2^18 products per tap (where the paper saw cuDNN lose accuracy), and vmap over
    70000 tiny depthwise problems: more than one launch's gridDim.z."""
    x = jnp.asarray(rng.random((64, 64, 64, 32), dtype=np.float32))
    dy = jnp.asarray(rng.random((64, 64, 64, 32), dtype=np.float32))
    fn = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 1, 32), padding="SAME",
                           dimension_numbers=DN, feature_group_count=32)  # fmt: skip
    got = np.asarray(jax.jit(fn)(x, dy), np.float64)
    expected = grouped_reference(x, dy, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 32)
    assert mare(got, expected) < 1e-6
    xs = jnp.asarray(rng.random((70000, 1, 4, 6, 2), dtype=np.float32))
    dys = jnp.asarray(rng.random((70000, 1, 4, 6, 2), dtype=np.float32))
    one = functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(3, 3, 1, 2), padding="SAME",
                            dimension_numbers=DN, feature_group_count=2)  # fmt: skip
    ours = np.asarray(jax.jit(jax.vmap(one))(xs, dys))
    for i in (0, 65534, 65535, 69999):
        ref = grouped_reference(xs[i], dys[i], (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2)
        np.testing.assert_allclose(ours[i], ref, rtol=1e-5, atol=1e-5)


# 3D layers read in place by depth slice (winrs_backward_filter_3d): x shape (N, D, H, W, C), output channels,
# filter (FD, FH, FW), depth pads, depth stride, depth dilation. The filter-window tile (64 x 64 channels, on
# Hopper), rows of 190 with a partial input-channel block (80), a 5x5x5 filter, one-sided pads, depth strides and
# dilation; the layer of 16 input channels packs its 3 taps into one problem's channels (the filter-row tile's
# stager unpacks them; the window tile does not run them). Layers with both channel counts above 64 run the
# one-tap block on copies of the depth slices (variants.h, kWideBlock; test_depth_in_place.py).
DEPTH_LAYERS = [
    ((2, 6, 10, 32, 64), 64, (3, 3, 3), (1, 1), 1, 1),
    ((1, 8, 12, 28, 32), 64, (3, 3, 3), (2, 0), 1, 1),
    ((1, 3, 30, 190, 80), 64, (3, 3, 3), (1, 1), 1, 1),
    ((1, 6, 9, 20, 32), 32, (5, 5, 5), (2, 2), 1, 1),
    ((2, 9, 8, 16, 64), 40, (3, 3, 3), (1, 1), 2, 1),
    ((1, 9, 8, 16, 64), 64, (3, 3, 3), (2, 2), 1, 2),
    ((2, 6, 10, 24, 16), 16, (3, 3, 3), (1, 1), 1, 1),
]


@pytest.mark.parametrize("window", ["1", "0"], ids=["window", "filter-row"])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
@pytest.mark.parametrize("layer", range(len(DEPTH_LAYERS)))
def test_three_d_layers_read_in_place_match_float64(layer, dtype, window, rng, monkeypatch):
    """The kernels' depth-slice addressing (the window's 5D map, the filter-row tile's stager) against the
    float64 gradient of the same 16-bit inputs, dW rounded once to the filter's dtype; WINRS_JAX_WINDOW=0 runs the
    filter-row tile where the window would."""
    monkeypatch.setenv("WINRS_JAX_WINDOW", window)
    x_shape, k, filter_dhw, depth_pads, stride, dilation = DEPTH_LAYERS[layer]
    dn = ("NDHWC", "DHWIO", "NDHWC")
    geometry = dict(window_strides=(stride, 1, 1), rhs_dilation=(dilation, 1, 1),
                    padding=(depth_pads, (filter_dhw[1] // 2,) * 2, (filter_dhw[2] // 2,) * 2))  # fmt: skip
    w_shape = (*filter_dhw, x_shape[4], k)
    x = jnp.asarray(rng.standard_normal(x_shape), dtype)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(x, jnp.zeros(w_shape, dtype), **geometry,
                                                          dimension_numbers=dn))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), dtype)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, **geometry,
                                   dimension_numbers=dn))  # fmt: skip
    x, dy = jax.device_put(x, _gpu()), jax.device_put(dy, _gpu())
    assert _ffi.DEPTH_TARGET in fn.lower(x, dy).as_text()
    dw = np.asarray(fn(x, dy).astype(np.float32), np.float64)
    expected = reference_general_filter_grad(x, dy, filter_dhw, geometry["window_strides"], geometry["padding"],
                                             geometry["rhs_dilation"])  # fmt: skip
    expected = np.moveaxis(expected, 0, -1)
    np.testing.assert_allclose(
        dw, expected, rtol=float(jnp.finfo(dtype).eps) / 2, atol=1e-5 * np.abs(expected).max()
    )


# Strided layers whose X the filter-row tile reads in place (test_strides_in_place.CASES, at sizes that fill the
# GPU): X staged by column phase by mma.sync, any row stride (a column stride of 1: on wgmma), 3D layers by depth
# slice too; 64 x 64 channel blocks, and 128 x 128 where both sides have more than 64 channels.
STRIDED_LAYERS = [
    ((4, 30, 34, 64), 64, (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((2, 31, 29, 16), 32, (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((2, 40, 24, 32), 16, (3, 6), (2, 2), ((2, 1), (1, 2))),
    ((3, 33, 20, 64), 96, (3, 5), (3, 1), ((1, 1), (2, 2))),
    ((4, 1, 1000, 64), 64, (1, 3), (1, 2), ((0, 0), (1, 1))),
    ((4, 30, 30, 96), 160, (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((2, 29, 31, 48), 136, (3, 3), (2, 1), ((1, 1), (1, 1))),
    ((1, 8, 16, 32, 32), 64, (3, 3, 3), (2, 2, 2), ((1, 1), (1, 1), (1, 1))),
    ((2, 6, 20, 28, 64), 128, (3, 3, 3), (1, 2, 2), ((1, 1), (1, 1), (1, 1))),
    ((1, 9, 14, 18, 16), 16, (3, 3, 3), (2, 2, 2), ((1, 1), (1, 1), (1, 1))),
]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
@pytest.mark.parametrize("layer", range(len(STRIDED_LAYERS)))
def test_strided_layers_read_in_place_match_float64(layer, dtype, rng):
    """The phase staging of the filter-row tile's stager and GEMM (cuda/direct_taps.cuh) against the float64
    gradient of the same 16-bit inputs, dW rounded once to the filter's dtype."""
    from test_strides_in_place import _case

    x_shape, w_shape, dn, geometry = _case(STRIDED_LAYERS[layer])
    x = jnp.asarray(rng.standard_normal(x_shape), dtype)
    out = jax.eval_shape(lambda: lax.conv_general_dilated(x, jnp.zeros(w_shape, dtype), **geometry,
                                                          dimension_numbers=dn))  # fmt: skip
    dy = jnp.asarray(rng.standard_normal(out.shape), dtype)
    plan = winrs_jax.plan(x, jnp.zeros(w_shape, dtype), **geometry, dimension_numbers=dn)
    assert plan.supported and not plan.phases, str(plan)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w_shape, **geometry,
                                   dimension_numbers=dn))  # fmt: skip
    x, dy = jax.device_put(x, _gpu()), jax.device_put(dy, _gpu())
    dw = np.asarray(fn(x, dy).astype(np.float32), np.float64)
    spatial = len(x_shape) - 2
    expected = reference_general_filter_grad(x, dy, w_shape[:spatial], geometry["window_strides"],
                                             geometry["padding"])  # fmt: skip
    expected = np.moveaxis(expected, 0, -1)
    np.testing.assert_allclose(
        dw, expected, rtol=float(jnp.finfo(dtype).eps) / 2, atol=1e-5 * np.abs(expected).max()
    )


@pytest.mark.parametrize(
    "path, channels, filter_hw, strides, w",
    [
        ("bf16", (128, 192), (3, 3), (1, 1), 30),  # one-tap 64 x 64 blocks over both channel sides
        ("fp16", (96, 160), (3, 6), (1, 1), 30),  # the same in float16, a 6-wide filter
        ("bf16", (96, 136), (3, 3), (2, 2), 30),  # the filter-row tile's 64 x 64 blocks at column stride 2
        ("tf32x3", (24, 40), (3, 9), (1, 1), 14),  # alpha 8 where an H100's plan takes alpha 16
        ("tf32", (72, 130), (2, 2), (1, 1), 30),  # the direct kernel's TF32 64 x 64 block
    ],
    ids=["one-tap", "one-tap-f16", "strided", "alpha-8", "tf32-direct"],
)
def test_plans_for_99_kib_a_block_run_on_the_gpu(path, channels, filter_hw, strides, w, rng):
    """The plans made for sm_86 and sm_89 GPUs (99 KiB of shared memory a block: 64 x 64 blocks, no alpha 16)
    run the same kernel instances on an H100: against float64 and the CPU executor of the same plan."""
    in_c, out_c = channels
    h = 11
    pads = ((filter_hw[0] - 1) // 2, filter_hw[0] // 2, (filter_hw[1] - 1) // 2, filter_hw[1] // 2)
    padding = ((pads[0], pads[1]), (pads[2], pads[3]))
    out_hw = ((h + pads[0] + pads[1] - filter_hw[0]) // strides[0] + 1,
              (w + pads[2] + pads[3] - filter_hw[1]) // strides[1] + 1)  # fmt: skip
    x = jnp.asarray(rng.standard_normal((2, h, w, in_c)), PATH_DTYPES[path])
    dy = jnp.asarray(rng.standard_normal((2, *out_hw, out_c)), PATH_DTYPES[path])
    options = winrs_jax.PlannerOptions(path=path, smem_per_block=99 * 1024, mode="winrs")
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=(*filter_hw, in_c, out_c),
                                   window_strides=strides, padding=padding, dimension_numbers=DN,
                                   options=options))  # fmt: skip
    got = {
        device.platform: np.asarray(fn(jax.device_put(x, device), jax.device_put(dy, device)).astype(np.float32),
                                    np.float64)
        for device in (_gpu(), jax.devices("cpu")[0])
    }  # fmt: skip
    ref = np.moveaxis(reference_general_filter_grad(x, dy, filter_hw, strides, padding), 0, -1)
    errors = {k: np.linalg.norm(v - ref) / np.linalg.norm(ref) for k, v in got.items()}
    assert np.isfinite(got["gpu"]).all() and errors["gpu"] <= 1.5 * errors["cpu"] + 1e-6, errors
