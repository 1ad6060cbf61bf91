"""Every arithmetic path on the CPU: the CPU executor rounds GEMM operands as the GPU paths do (TF32, split
TF32, bfloat16, float16), so these tests check the index math and the rounding of every path in CI."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import mare, reference_filter_grad, reference_general_filter_grad

import winrs_jax
from winrs_jax import _winrs
from winrs_jax.planner import ACCURACY_BUDGET, PATH_DTYPES, PATHS, REFERENCE_SMEM_PER_BLOCK, plan_canonical

VARIANTS = winrs_jax.variants()
DN = ("NHWC", "HWIO", "NHWC")


def _filter_grad(x, dy, filter_hw, pads, path, **options):
    """dW (O x FH x FW x I, float64) of inputs already in the path's dtype."""
    rhs_shape = (*filter_hw, x.shape[3], dy.shape[3])
    padding = ((pads[0], pads[1]), (pads[2], pads[3]))
    dw = winrs_jax.conv_backward_filter(
        x, dy, rhs_shape, (1, 1), padding, dimension_numbers=DN,
        options=winrs_jax.PlannerOptions(path=path, **options),
    )  # fmt: skip
    return np.asarray(dw.astype(np.float32), np.float64).transpose(3, 0, 1, 2)


def _protocol_inputs(rng, path, x_shape, dy_shape):
    """The paper's protocol (section 6.3): uniform [0, 1), dY x 1e-2 for float16."""
    scale = 1e-2 if path == "fp16" else 1.0
    x = jnp.asarray(rng.random(x_shape, dtype=np.float32), PATH_DTYPES[path])
    dy = jnp.asarray(scale * rng.random(dy_shape, dtype=np.float32), PATH_DTYPES[path])
    return x, dy


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_every_variant_on_every_path_against_float64(variant, path, rng):
    """MARE within 3x of the table's measurement (variants.h) on another shape: ragged channels, padding on
    both axes, several segments and buckets. The sums here are shorter than the table's (fewer rounding errors
    cancel: about 2.2x its MARE on the alpha-16 and TF32 kernels). The 16-bit paths return dW in their dtype,
    rounding included."""
    fw = variant.n * (2 if variant.n <= 3 else 1)
    pads = (1, 2, 1, 0)
    out_w = 2 * variant.r + 1
    x, dy = _protocol_inputs(rng, path, (3, 10, out_w + fw - 2, 21), (3, 11, out_w, 19))
    dw = _filter_grad(x, dy, (3, fw), pads, path, kernels=(variant.index, 0), segments=4)
    ref = reference_filter_grad(np.asarray(x, np.float64), np.asarray(dy, np.float64), (3, fw), pads)
    assert mare(dw, ref) <= 3 * variant.shapes[path].mare


@pytest.mark.parametrize("path", PATHS)
def test_signed_inputs_error_against_the_direct_sum(path, rng):
    """Zero-mean inputs, as real activations and gradients are: dW's sums cancel, so the rounding of the
    transformed operands weighs more than in the paper's all-positive protocol. Norm-relative error against
    float64, bounded by a multiple of the direct kernel's (Omega_2(1, 1), no transforms: close to XLA's) on the
    same data. tools/accuracy.py --signed measured up to 2.1x for alpha 4 and 7.6x for alpha 8 (split TF32),
    this shape 0.9x-2.1x and 1.9x-6.1x over the paths; the bounds are 1.5x the larger figures."""
    scale = 1e-2 if path == "fp16" else 1.0
    x = jnp.asarray(rng.standard_normal((4, 10, 26, 24), dtype=np.float32), PATH_DTYPES[path])
    dy = jnp.asarray(scale * rng.standard_normal((4, 10, 24, 24), dtype=np.float32), PATH_DTYPES[path])
    ref = reference_filter_grad(np.asarray(x, np.float64), np.asarray(dy, np.float64), (3, 3), (1, 1, 0, 0))

    def error(variant: int) -> float:
        dw = _filter_grad(x, dy, (3, 3), (1, 1, 0, 0), path, kernels=(variant, variant))
        return float(np.linalg.norm(dw - ref) / np.linalg.norm(ref))

    direct = error(0)
    assert error(2) <= 3.2 * direct  # Omega_4(3, 2)
    assert error(3) <= 11.4 * direct  # Omega_8(3, 6)


def test_reduced_precision_paths_really_round(rng):
    """TF32, bfloat16 and float16 operands lose what their type loses; split TF32 keeps FP32 accuracy. Fails if a
    path skipped its rounding (or rounded where it should not)."""
    x32, dy32 = _protocol_inputs(rng, "fp32", (4, 9, 14, 24), (4, 9, 12, 24))
    ref = reference_filter_grad(
        np.asarray(x32, np.float64), np.asarray(dy32, np.float64), (3, 3), (1, 1, 0, 0)
    )
    errors = {p: mare(_filter_grad(x32, dy32, (3, 3), (1, 1, 0, 0), p, kernels=(3, 3)), ref) for p in PATHS if
              PATH_DTYPES[p] == np.float32}  # fmt: skip
    assert errors["fp32"] < 5e-7 and errors["tf32x3"] < 2 * errors["fp32"]
    assert errors["tf32"] > 20 * errors["fp32"]  # TF32 keeps 10 mantissa bits: ~1e-5 on these sums


def test_operand_rounding_matches_ml_dtypes_and_cvt_rn():
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.standard_normal(2000) * 10.0 ** rng.integers(-9, 6, 2000),
            [0.0, -0.0, 65504.0, 65520.0, 1e-8, 3e-5],
        ]
    ).astype(np.float32)
    out = {p: np.asarray(_winrs.round_operand(PATHS.index(p), values.tolist()), np.float32) for p in PATHS}
    np.testing.assert_array_equal(out["fp32"], values)
    np.testing.assert_array_equal(out["bf16"], values.astype(ml_dtypes.bfloat16).astype(np.float32))
    with np.errstate(over="ignore"):  # 65520 and the largest normals round to inf in float16, as they should
        np.testing.assert_array_equal(out["fp16"], values.astype(np.float16).astype(np.float32))
    # TF32 (cvt.rn.tf32.f32): 10 mantissa bits, nearest with ties to even.
    bits = values.view(np.uint32)
    even = (bits >> np.uint32(13)) & np.uint32(1)
    tf32 = ((bits + np.uint32(0xFFF) + even) & np.uint32(0xFFFFE000)).view(np.float32)
    np.testing.assert_array_equal(out["tf32"], tf32)
    np.testing.assert_array_equal(out["tf32x3"], tf32)  # the high part
    # Halfway cases go to the neighbour with an even last bit: down from 1 + 2^-11 (to 1), up from
    # 1 + 3 x 2^-11 (to 1 + 2^-9); just above halfway rounds up.
    ties = np.array([1 + 2.0**-11, -(1 + 2.0**-11), 1 + 3 * 2.0**-11, 1 + 2.0**-11 + 2.0**-23], np.float32)
    rounded = _winrs.round_operand(PATHS.index("tf32"), ties.tolist())
    assert rounded == [1.0, -1.0, 1 + 2.0**-9, 1 + 2.0**-10]


def test_kahan_bucket_reduction_keeps_what_plain_summation_loses():
    """16 one-row segments, each its own bucket: bucket 0 holds 2^24, the others 1. Plain FP32 summation
    returns 2^24 (each +1 rounds away); the Kahan reduction returns 2^24 + 15 to within one unit. Atomic adds
    (the default unless deterministic=True) are such a plain sum: the price of their speed on adversarial data
    (on the suites' layers their error stayed within the budgets, docs/benchmarks.md)."""
    out_h = 16
    dy = np.ones((1, out_h, 1, 1), np.float32)
    dy[0, 0] = 2.0**24
    x = np.ones((1, out_h, 2, 1), np.float32)
    plan = winrs_jax.plan(
        x, np.zeros((1, 2, 1, 1), np.float32), (1, 1), "VALID", dimension_numbers=DN,
        options=winrs_jax.PlannerOptions(kernels=(0, 0), segments=out_h, deterministic=True),
    )  # fmt: skip
    assert plan.buckets == out_h
    args = (jnp.asarray(x), jnp.asarray(dy), (1, 2), (0, 0, 0, 0), "fp32")
    dw = _filter_grad(*args, kernels=(0, 0), segments=out_h, deterministic=True)
    assert np.abs(dw - (2.0**24 + 15)).max() <= 1.0
    plain = _filter_grad(*args, kernels=(0, 0), segments=out_h, deterministic=False)
    assert np.abs(plain - 2.0**24).max() <= 1.0


def test_accuracy_budget_follows_the_reference_arithmetic():
    """XLA's error is at least a direct sum's on the reference arithmetic (cpp/winrs/plan.cc), and on zero-mean
    data its measured median where that is larger: 4x at FP32, 2x in the reduced-precision types."""
    direct = VARIANTS[0].shapes
    assert ACCURACY_BUDGET["fp32"][0] == pytest.approx(4 * direct["fp32"].mare)
    assert ACCURACY_BUDGET["fp32"][1] >= 4 * direct["fp32"].signed_error
    for path in ("tf32", "bf16", "fp16"):
        assert ACCURACY_BUDGET[path][0] == pytest.approx(2 * direct[path].mare)
        assert ACCURACY_BUDGET[path][1] >= 2 * direct[path].signed_error
    # cuDNN's TF32 algorithms measured about 2.7x the direct TF32 sum; bfloat16's error is the output rounding.
    assert ACCURACY_BUDGET["tf32"][1] > 4 * direct["tf32"].signed_error
    assert ACCURACY_BUDGET["bf16"][1] == pytest.approx(2 * direct["bf16"].signed_error, rel=0.02)


def test_zero_mean_budget_excludes_16_bit_alpha_8_kernels():
    """On the paper's [0, 1) inputs the bfloat16 and float16 alpha-8 kernels look as accurate as the direct
    kernel; on zero-mean inputs their 16-bit transformed operands cost 6x its error, and the budget refuses
    them. Without the zero-mean column the planner would admit them."""
    for path in ("bf16", "fp16"):
        mare_budget, signed_budget = ACCURACY_BUDGET[path]
        alpha_8 = [v for v in VARIANTS if v.alpha_class == 8]
        assert all(v.shapes[path].mare <= mare_budget for v in alpha_8)
        assert all(v.shapes[path].signed_error > signed_budget for v in alpha_8)
    plan = plan_canonical(8, (16, 18), 64, 64, (3, 3), (1, 1, 1, 1), "bf16", "bf16")
    assert [k.alpha_class for k in plan.kernels] == [2], plan


@pytest.mark.parametrize("dtype, path", [(jnp.bfloat16, "bf16"), (np.float16, "fp16"), (np.float32, "fp32")])
def test_plan_names_the_path_and_its_accuracy(dtype, path):
    x = np.zeros((2, 16, 16, 8), dtype)
    w = np.zeros((5, 5, 8, 8), dtype)
    plan = winrs_jax.plan(x, w, (1, 1), "SAME", dimension_numbers=DN)
    # float32 here is FP32 (conftest pins HIGHEST): FP32 on CUDA cores or split TF32, whichever the cost
    # model predicts faster (split TF32 only on a GPU).
    assert plan.reference == path and (plan.path == path or (path, plan.path) == ("fp32", "tf32x3"))
    assert f"arithmetic {plan.path}:" in str(plan)
    # No alpha-16 kernel keeps the accuracy of these references (variants.h): 5x5 runs Omega_8(5, 4).
    assert all(k.alpha_class <= 8 for k in plan.kernels)


def test_forced_path_must_suit_the_dtype():
    x = np.zeros((2, 8, 8, 4), np.float32)
    with pytest.raises(ValueError, match="cannot run float32"):
        winrs_jax.plan(x, np.zeros((3, 3, 4, 4), np.float32), (1, 1), "SAME", dimension_numbers=DN,
                       options=winrs_jax.PlannerOptions(path="bf16"))  # fmt: skip
    with pytest.raises(ValueError, match="must be one of"):
        winrs_jax.plan(x, np.zeros((3, 3, 4, 4), np.float32), (1, 1), "SAME", dimension_numbers=DN,
                       options=winrs_jax.PlannerOptions(path="int8"))  # fmt: skip


@pytest.mark.parametrize("deterministic", [True, False])
def test_window_plans_cut_the_batch_into_image_parts(deterministic, rng):
    """The filter-window tile's plans (16-bit 3 x 3 layers of at most 64 channels) cut the batch into image parts,
    each segment one range of images over all the rows (segments.h): the CPU executor, and on the GPU every
    kernel that may run the plan, must add each image exactly once. Skipping a part, or every segment walking the
    whole batch, would be off by 20% or by 5x here; the error allowed is bfloat16's rounding of dW."""
    pads = (1, 1, 1, 1)
    x, dy = _protocol_inputs(rng, "bf16", (5, 9, 16, 40), (5, 9, 16, 24))
    plan = plan_canonical(5, (9, 16), 40, 24, (3, 3), pads, "bf16", "bf16",
                          winrs_jax.PlannerOptions(deterministic=deterministic, sm_count=132))  # fmt: skip
    assert plan.work_tile == (3, 64, 64, 3) and plan.image_parts > 1 and plan.segment_rows == 1
    dw = _filter_grad(x, dy, (3, 3), pads, "bf16", deterministic=deterministic, sm_count=132)
    ref = reference_filter_grad(np.asarray(x, np.float64), np.asarray(dy, np.float64), (3, 3), pads)
    assert mare(dw, ref) <= 4e-3
    assert np.abs(dw - ref).max() <= 8e-3 * np.abs(ref).max()


SM86_SMEM_PER_BLOCK = 99 * 1024  # opt-in shared memory per block on sm_86 and sm_89 (RTX 30/40, A10, L4)


@pytest.mark.parametrize(
    "path, channels, filter_hw, strides",
    [
        ("bf16", (128, 128), (3, 3), (1, 1)),  # the one-tap 128 x 128 block (102 KiB) on an H100
        ("fp16", (96, 160), (3, 6), (1, 1)),  # the filter-row tile's 128 x 128 block (104 KiB)
        ("bf16", (96, 128), (3, 3), (2, 2)),  # strided, its 128 x 128 block at column stride 2 (155 KiB)
        ("tf32x3", (24, 40), (3, 9), (1, 1)),  # alpha 16 (112 KiB) in split TF32 at float32 DEFAULT
    ],
    ids=["one-tap", "filter-row", "strided", "alpha-16"],
)
def test_plans_for_a_gpu_of_99_kib_a_block_fit_it(path, channels, filter_hw, strides, rng):
    """A GPU gives a thread block at most its opt-in shared memory (99 KiB on sm_86 and sm_89): the planner,
    told so (PlannerOptions.smem_per_block, by default the visible GPU's), takes the 64 x 64 blocks and no
    alpha-16 kernels on the tensor-core paths, whose launch would fail there; on an H100 it keeps them. dW
    matches float64 either way (the CPU executor runs the plan's tiles)."""
    in_c, out_c = channels
    h, w = 9, 14
    pads = ((filter_hw[0] - 1) // 2, filter_hw[0] // 2, (filter_hw[1] - 1) // 2, filter_hw[1] // 2)
    out_hw = ((h + pads[0] + pads[1] - filter_hw[0]) // strides[0] + 1,
              (w + pads[2] + pads[3] - filter_hw[1]) // strides[1] + 1)  # fmt: skip
    reference = "tf32" if path == "tf32x3" else path
    h100, sm86 = (
        plan_canonical(2, (h, w), in_c, out_c, filter_hw, pads, path, reference,
                       winrs_jax.PlannerOptions(smem_per_block=smem), strides=strides)
        for smem in (None, SM86_SMEM_PER_BLOCK)
    )  # fmt: skip
    assert h100.supported and sm86.supported and sm86.smem_per_block == SM86_SMEM_PER_BLOCK
    assert h100.smem_per_block == REFERENCE_SMEM_PER_BLOCK
    if path == "tf32x3":

        def alpha_16(plan):
            return 16 in (VARIANTS[plan.variant0].alpha_class, VARIANTS[plan.variant1].alpha_class)

        assert alpha_16(h100) and not alpha_16(sm86)
    else:
        assert h100.work_tile[1:3] == (128, 128) and sm86.work_tile[1:3] == (64, 64)
    x = jnp.asarray(rng.standard_normal((2, h, w, in_c)), PATH_DTYPES[path])
    dy = jnp.asarray(rng.standard_normal((2, *out_hw, out_c)), PATH_DTYPES[path])
    dw = winrs_jax.conv_backward_filter(
        x, dy, (*filter_hw, in_c, out_c), strides, ((pads[0], pads[1]), (pads[2], pads[3])), dimension_numbers=DN,
        options=winrs_jax.PlannerOptions(path=path, smem_per_block=SM86_SMEM_PER_BLOCK, mode="winrs"),
    )  # fmt: skip
    ref = reference_general_filter_grad(np.asarray(x, np.float64), np.asarray(dy, np.float64), filter_hw, strides,
                                        ((pads[0], pads[1]), (pads[2], pads[3])))  # fmt: skip
    got = np.asarray(dw.astype(np.float32), np.float64).transpose(3, 0, 1, 2)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < ACCURACY_BUDGET[reference][1]
