"""Run one layer's filter gradient a few times, for Nsight Compute.

ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 python tools/profile_layer.py 32:56:256:3 bf16
(dtype: f32_highest, f32_default, bf16 or f16; default bf16). A third argument picks what runs: "winrs" (the
default) or "xla" (lax's filter gradient); with "--range" after it, the warm-up calls run outside a profiler
range and the last call inside it (cudaProfilerStart/Stop, through PyTorch), for `ncu --profile-from-start off`:
every kernel of one filter gradient, and none of XLA's autotuning. "--kernels" instead: the last call under
PyTorch's profiler (CUPTI, which sees the kernels XLA launches too), each kernel's name and time printed; XLA's
process ended in a segmentation fault under ncu. "--rank3": a layer of height 1 as a true 1D one (NWC operands,
as a 1D model has them; the bench's 1D layers are 2D of height 1). "--hlo": print the compiled program's entry
computation. "--repeats=N": N filter gradients in one program, as auto mode and the bench time them (with ncu's
--launch-skip, N launches per call). "--kernels=A,B": force the kernel pair (indices into variants()), e.g.
"--kernels=3,2" runs Omega_8(3, 6) on a 3x3 layer where the planner picks the direct kernel.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import winrs_jax
from winrs_jax import choice
from winrs_jax.bench.suite import DN, DTYPES, Shape


def main() -> None:
    shape = Shape.parse(sys.argv[1])
    dtype, precision = DTYPES[sys.argv[2] if len(sys.argv) > 2 else "bf16"]
    impl = sys.argv[3] if len(sys.argv) > 3 else "winrs"
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((shape.n, *shape.spatial, shape.cin), dtype=np.float32), dtype)
    dy = jnp.asarray(rng.random((shape.n, *shape.out_spatial, shape.cout), dtype=np.float32), dtype)
    w = jax.ShapeDtypeStruct((*shape.filter, shape.cin // shape.groups, shape.cout), dtype)
    kwargs = dict(window_strides=shape.strides, padding=shape.padding, rhs_dilation=shape.dilations,
                  dimension_numbers=DN[shape.rank], feature_group_count=shape.groups, precision=precision)  # fmt: skip
    pair = next((a.split("=")[1] for a in sys.argv if a.startswith("--kernels=")), None)
    kernels = tuple(int(k) for k in pair.split(",")) if pair else None
    options = winrs_jax.PlannerOptions(mode="winrs", kernels=kernels)
    if "--rank3" in sys.argv and shape.h == 1 and shape.fh == 1 and shape.rank == 2:
        x, dy, w = x[:, 0], dy[:, 0], jax.ShapeDtypeStruct(w.shape[1:], dtype)
        kwargs.update(window_strides=kwargs["window_strides"][1:], rhs_dilation=kwargs["rhs_dilation"][1:],
                      dimension_numbers=("NWC", "WIO", "NWC"))  # fmt: skip
        kwargs["padding"] = kwargs["padding"] if isinstance(kwargs["padding"], str) else kwargs["padding"][1:]
    if impl == "xla":
        zeros = jnp.zeros(w.shape, dtype)

        def filter_grad(x: jax.Array, dy: jax.Array) -> jax.Array:
            return jax.vjp(lambda w: lax.conv_general_dilated(x, w, **kwargs), zeros)[1](dy)[0]
    else:

        def filter_grad(x: jax.Array, dy: jax.Array) -> jax.Array:
            return winrs_jax.conv_backward_filter(x, dy, w.shape, **kwargs, options=options)

        print(winrs_jax.plan(x, w, **kwargs, options=options))
    # --repeats=N: N filter gradients in one program, as auto mode and the bench time them (choice.repeated).
    repeats = max(1, next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--repeats=")), 1))
    xs, dys = (x,) * repeats, (dy,) * repeats
    program = jax.jit(choice.repeated(filter_grad))

    def call() -> jax.Array:
        return program(xs, dys)[-1]  # ready when the program is

    if "--hlo" in sys.argv:  # the compiled program's entry computation: copies and transposes around the call
        text = program.lower(xs, dys).compile().as_text()
        print(text[text.index("ENTRY") :])
    for _ in range(3):
        call().block_until_ready()
    if "--kernels" in sys.argv:  # the flag alone; --kernels=A,B forces the pair
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call().block_until_ready()
        for event in prof.events():
            if "CUDA" in str(event.device_type):  # the kernels, and XLA's memsets and copies
                time_us = getattr(event, "device_time", None) or getattr(event, "cuda_time", 0.0)
                print(f"{time_us:10.2f} us  {event.name[:110]}")
    if "--range" in sys.argv:
        import torch  # its profiler calls reach the CUDA context that JAX shares

        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        call().block_until_ready()
        torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
