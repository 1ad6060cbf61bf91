"""Measurements that set the planner's constants on a GPU (run from outside the source tree).

python tools/tune.py variants [PATH...]  # GEMM TFLOP/s of each kernel alone on each path -> KernelShape::gemm_tflops
python tools/tune.py highest    # the same for the FP32 and split-TF32 paths, geomean over three layer shapes
python tools/tune.py segments   # time against the baseline segment count Z^ -> kWaves
python tools/tune.py buckets    # time against the bucket count B (chains of segments) and atomic adds
python tools/tune.py atomics    # time against Z with atomic adds -> kAtomicAddsPerSecond
python tools/tune.py sums       # float32 HIGHEST MARE and time against Z (in-kernel FP32 sum lengths)
python tools/tune.py waves SHAPE...  # bf16 time against Z near whole waves of resident blocks
python tools/tune.py grouped DTYPE SHAPE...  # grouped layers: XLA, WinRS's plan, the dense layer's WinRS
"""

import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import winrs_jax
from winrs_jax.bench.suite import time_ms
from winrs_jax.planner import PATH_DTYPES, PATHS

DN = ("NHWC", "HWIO", "NHWC")

Pads = tuple[tuple[int, int], tuple[int, int]]


def run(
    n: int,
    h: int,
    w: int,
    c: int,
    fh: int,
    fw: int,
    pads: Pads,
    dtype: object = jnp.float32,
    **options: object,
) -> tuple[winrs_jax.Plan, float, float]:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((n, h, w, c), dtype=np.float32), dtype)
    out_h, out_w = h + pads[0][0] + pads[0][1] - fh + 1, w + pads[1][0] + pads[1][1] - fw + 1
    dy = jnp.asarray(rng.random((n, out_h, out_w, c), dtype=np.float32), dtype)
    opts = winrs_jax.PlannerOptions(mode="winrs", **options)
    rhs = jax.ShapeDtypeStruct((fh, fw, c, c), dtype)
    plan = winrs_jax.plan(x, rhs, (1, 1), pads, dimension_numbers=DN, options=opts)
    fn = jax.jit(
        lambda x, dy: winrs_jax.conv_backward_filter(
            x, dy, rhs.shape, (1, 1), pads, dimension_numbers=DN, options=opts
        )
    )
    ms = time_ms(lambda: fn(x, dy), 5, 0)
    flops = 2.0 * n * out_h * out_w * c * fh * fw * c
    return plan, ms, flops


# Layers (batch, height, channels) of about 48 output columns on which `variants` times each kernel: the table's
# layer, and with `highest`, one with few channels and a large batch and one with many channels and a small map.
VARIANT_LAYERS = ((32, 32, 256), (128, 32, 64), (16, 16, 512))


def variants(
    paths: tuple[str, ...] = PATHS, layers: tuple[tuple[int, int, int], ...] = VARIANT_LAYERS[:1]
) -> None:
    for path in paths:
        for v in winrs_jax.variants():
            fw = 3 if v.n == 1 else v.n
            out_w = v.r * max(1, 48 // v.r)
            speeds = []
            for n, h, c in layers:
                plan, ms, flops = run(
                    n, h, out_w + fw - 1, c, 3, fw, ((0, 0), (0, 0)), PATH_DTYPES[path], kernels=(v.index, v.index),
                    path=path,
                )  # fmt: skip
                gemm_tflops = flops * v.alpha / (v.n * v.r) / ms / 1e9
                speeds.append(gemm_tflops)
                print(json.dumps(dict(path=path, variant=v.name, layer=f"{n}:{h}:{c}", ms=round(ms, 4),
                                      gemm_tflops=round(gemm_tflops, 1), effective_tflops=round(flops / ms / 1e9, 1),
                                      segments=plan.segments)), flush=True)  # fmt: skip
            if len(layers) > 1:
                geomean = float(np.exp(np.mean(np.log(speeds))))
                print(
                    json.dumps(
                        dict(path=path, variant=v.name, layer="geomean", gemm_tflops=round(geomean, 1))
                    )
                )


def highest() -> None:
    """The two FP32-accurate paths (float32 HIGHEST) on three layer shapes: the planner chooses between them by
    these coefficients."""
    variants(("fp32", "tf32x3"), VARIANT_LAYERS)


def segments() -> None:
    for n, h, c, r in (
        (32, 56, 256, 3),
        (32, 32, 256, 5),
        (32, 16, 512, 7),
        (32, 128, 64, 9),
        (32, 14, 1024, 3),
    ):
        pads = ((r // 2, r // 2), (r // 2, r // 2))
        base, _, _ = run(n, h, h, c, r, r, pads)
        for factor in (0.5, 1, 2, 4):
            z = max(1, round(base.baseline_segments * factor))
            plan, ms, flops = run(n, h, h, c, r, r, pads, segments=z)
            print(json.dumps(dict(layer=f"{r}x{r} {n}:{h}:{c}", z_hat=z, segments=plan.segments, ms=round(ms, 4),
                                  default=factor == 1)))  # fmt: skip


def buckets() -> None:
    """Each layer with the planner's deterministic plan (buckets), with fewer buckets (longer chains of segments),
    with one bucket per segment at Algorithm 1's Z^, and with atomic adds at Z^ and at the deterministic plan's
    Z."""
    for path in ("bf16", "tf32", "tf32x3"):
        for n, h, c, r in (
            (128, 56, 64, 3),
            (128, 28, 128, 3),
            (128, 14, 256, 3),
            (128, 7, 512, 3),
            (32, 56, 256, 3),
            (32, 32, 256, 5),
            (32, 16, 512, 7),
        ):
            pads = ((r // 2, r // 2), (r // 2, r // 2))
            dtype = PATH_DTYPES[path]
            base, ms, _ = run(n, h, h, c, r, r, pads, dtype, path=path, deterministic=True)
            configs = {"buckets=4": dict(buckets=4),
                       "own buckets": dict(segments=max(1, round(base.baseline_segments)), deterministic=True),
                       "atomic": dict(deterministic=False),
                       "atomic, in-order Z": dict(deterministic=False, segments=base.segments)}  # fmt: skip
            for name, extra in {"planner": None, **configs}.items():
                plan = base
                if extra is not None:
                    plan, ms, _ = run(n, h, h, c, r, r, pads, dtype, path=path, **extra)
                print(json.dumps(dict(layer=f"{r}x{r} {n}:{h}:{c}", path=path, config=name, ms=round(ms, 4),
                                      segments=plan.segments, buckets=plan.buckets, chain=plan.chain,
                                      atomic=plan.atomic, workspace_mb=round(plan.workspace_bytes / 2**20, 2))),
                      flush=True)  # fmt: skip


def atomics() -> None:
    """Time against Z with atomic adds: past a few waves the main loop's time stays, and each segment more
    costs its |dW| atomic adds (and a block's fixed work) -> kAtomicAddsPerSecond."""
    for path in ("bf16", "tf32"):
        for n, h, c in ((128, 7, 512), (128, 14, 256), (128, 28, 128), (32, 28, 256)):
            dtype = PATH_DTYPES[path]
            for z in (1, 2, 4, 8, 16, 32, 64, 128, 256):
                plan, ms, _ = run(n, h, h, c, 3, 3, ((1, 1), (1, 1)), dtype, path=path, deterministic=False,
                                  segments=z)  # fmt: skip
                print(json.dumps(dict(layer=f"3x3 {n}:{h}:{c}", path=path, z_hat=z, segments=plan.segments,
                                      ms=round(ms, 4), dw_elems=9 * c * c)), flush=True)  # fmt: skip


def sums() -> None:
    """float32 HIGHEST accuracy (MARE against PyTorch's float64 dW, the paper's [0, 1) inputs) and time against Z:
    each segment's kernel sums its output positions in FP32, so more segments mean shorter sums."""
    for text in ("32:32:256:9", "32:64:128:9", "32:16:512:5", "32:32:256:7"):
        _sums_of_layer(text)


def _sums_of_layer(text: str) -> None:
    from winrs_jax.bench import suite

    shape = suite.Shape.parse(text)
    x, dy, w, kwargs = suite._layer(shape, "f32_highest", np.random.default_rng(0))
    _, reference = suite._torch_case(shape, "f32_highest", np.asarray(x), np.asarray(dy), 0, 0)
    reference = np.moveaxis(reference, 0, -1)
    for path in ("fp32", "tf32x3"):
        for z in (None, 2, 4, 8, 16, 32):
            opts = winrs_jax.PlannerOptions(mode="winrs", path=path, segments=z)
            fn = jax.jit(
                functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w.shape, **kwargs, options=opts)
            )
            plan = winrs_jax.plan(x, w, **kwargs, options=opts)
            dw = np.asarray(fn(x, dy), np.float64)
            ms = time_ms(functools.partial(fn, x, dy), 3, 0)
            print(json.dumps(dict(layer=str(shape), path=path, z_hat=z, segments=plan.segments, ms=round(ms, 4),
                                  mare=suite._mare(dw, reference), atomic=plan.atomic)), flush=True)  # fmt: skip


def _resident_tiles(plan: winrs_jax.Plan) -> tuple[int, int]:
    """Work tiles per segment of the direct kernel on a 16-bit path, and the blocks an H100 holds at once."""
    columns, block_oc, block_ic = plan.work_tile
    (fh, fw), (c, k) = plan.filter_hw, plan.channels
    tiles = -(-k // block_oc) * -(-c // block_ic) * fh * -(-fw // columns)
    return tiles, 132 * (1 if (columns, block_oc) == (3, 128) else 2)


def _timed_at(layer: tuple, z: int | None) -> tuple[winrs_jax.Plan, float]:
    """WinRS on one layer (suite._layer's inputs and arguments) with Z segments or direct splits (None: the
    planner's)."""
    x, dy, w, kwargs = layer
    opts = winrs_jax.PlannerOptions(mode="winrs", segments=z)
    fn = jax.jit(functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w.shape, **kwargs, options=opts))
    return winrs_jax.plan(x, w, **kwargs, options=opts), time_ms(functools.partial(fn, x, dy), 5, 0)


def waves(texts: list[str]) -> None:
    """bf16 WinRS with the planner's Z and with the Z values nearest to whole waves of resident blocks (and a
    few around the planner's): whether the last, partial wave of the grid costs what its share of idle SMs
    says."""
    from winrs_jax.bench import suite

    for text in texts:
        shape = suite.Shape.parse(text)
        # The layer's inputs made once for all its timings: a large layer's take seconds.
        layer = suite._layer(shape, "bf16", np.random.default_rng(0))
        base, base_ms = _timed_at(layer, None)
        tiles, slots = _resident_tiles(base)
        z0 = base.segments
        candidates = {max(1, round(z0 * f)) for f in (0.5, 0.75, 1.25, 1.5, 2)}
        candidates |= {max(1, k * slots // tiles) for k in range(1, 2 * -(-tiles * z0 // slots) + 1)}
        seen = {z0}
        print(json.dumps(dict(layer=str(shape), planner=True, segments=z0, blocks=tiles * z0, slots=slots,
                              ms=round(base_ms, 4))), flush=True)  # fmt: skip
        for z in sorted(c for c in candidates if c <= 4 * z0 + 8):
            plan, ms = _timed_at(layer, z)
            if plan.segments in seen:
                continue
            seen.add(plan.segments)
            print(json.dumps(dict(layer=str(shape), planner=False, segments=plan.segments,
                                  blocks=tiles * plan.segments, slots=slots, ms=round(ms, 4))), flush=True)  # fmt: skip


def stream_splits(dtype_name: str, texts: list[str]) -> None:
    """Layers on the streaming kernels: their time with the planner's split count and with 1 or 2 tiles a split,
    timed in one program each and interleaved (choice.repeated_calls), beside XLA's."""
    import statistics

    from winrs_jax import choice
    from winrs_jax.bench import suite

    for text in texts:
        shape = suite.Shape.parse(text)
        x, dy, w, kwargs = suite._layer(shape, dtype_name, np.random.default_rng(0))
        labels, fns = ["xla"], [suite._filter_grads(w, kwargs)["xla"]]
        base = winrs_jax.plan(x, w, **kwargs, options=winrs_jax.PlannerOptions(mode="winrs"))
        (rows, cols), (oh, ow) = base.spatial_tile, base.out_grad_hw
        tiles = -(-shape.n // base.tile_images) * -(-oh // rows) * -(-ow // cols)
        for splits in dict.fromkeys((base.splits, tiles, -(-tiles // 2))):
            opts = winrs_jax.PlannerOptions(mode="winrs", segments=splits)
            labels.append(f"rows {rows} splits {splits}{' (planner)' if splits == base.splits else ''}")
            fns.append(
                functools.partial(winrs_jax.conv_backward_filter, rhs_shape=w.shape, **kwargs, options=opts)
            )
        calls, per_call = choice.repeated_calls(fns, x, dy, every=True)
        times: list[list[float]] = [[] for _ in fns]
        for _ in range(5):  # rounds, the candidates interleaved
            for i, call in enumerate(calls):
                times[i].append(time_ms(call, 3, 0) / per_call)
        for label, t in zip(labels, times, strict=True):
            print(json.dumps(dict(layer=str(shape), dtype=dtype_name, candidate=label,
                                  ms=round(statistics.median(t), 4))), flush=True)  # fmt: skip


def grouped(dtype_name: str, texts: list[str]) -> None:
    """Grouped layers: XLA's filter gradient, WinRS's plan (direct sums or stacked groups), and WinRS on the
    ungrouped layer of all channels (G times the work, on the dense kernels), whose dW holds the grouped one as
    its diagonal blocks."""
    import dataclasses

    from winrs_jax.bench import suite

    forced = winrs_jax.PlannerOptions(mode="winrs")
    for text in texts:
        shape = suite.Shape.parse(text)
        x, dy, w, kwargs = suite._layer(shape, dtype_name, np.random.default_rng(0))
        dense_w = jax.ShapeDtypeStruct((*w.shape[:-2], shape.cin, shape.cout), w.dtype)
        dense_kwargs = dict(kwargs, feature_group_count=1)
        grads = suite._filter_grads(w, kwargs)
        times = {name: time_ms(functools.partial(jax.jit(fn), x, dy), 5, 0) for name, fn in grads.items()}
        dense = jax.jit(
            functools.partial(
                winrs_jax.conv_backward_filter, rhs_shape=dense_w.shape, **dense_kwargs, options=forced
            )
        )
        times["dense"] = time_ms(functools.partial(dense, x, dy), 5, 0)
        plan = winrs_jax.plan(x, w, **kwargs, options=forced)
        dense_plan = winrs_jax.plan(x, dense_w, **dense_kwargs, options=forced)
        print(json.dumps(dict(layer=str(dataclasses.replace(shape, name="")), dtype=dtype_name, method=plan.method,
                              predicted_ms=round(plan.predicted_seconds * 1e3, 4),
                              dense_predicted_ms=round(dense_plan.predicted_seconds * 1e3, 4),
                              **{k: round(v, 4) for k, v in times.items()})), flush=True)  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "waves":
        waves(sys.argv[2:])
        sys.exit()
    if sys.argv[1] == "variants" and len(sys.argv) > 2:  # some paths only: tune.py variants bf16 tf32
        variants(tuple(sys.argv[2:]))
        sys.exit()
    if sys.argv[1] == "stream-splits":
        stream_splits(sys.argv[2], sys.argv[3:])
        sys.exit()
    if sys.argv[1] == "grouped":
        grouped(sys.argv[2], sys.argv[3:])
        sys.exit()
    {
        "variants": variants,
        "highest": highest,
        "segments": segments,
        "buckets": buckets,
        "atomics": atomics,
        "sums": sums,
    }[sys.argv[1]]()
