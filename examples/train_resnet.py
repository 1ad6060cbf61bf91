"""A ResNet trained with Flax and optax on scikit-learn's digits (upsampled), once with winrs_jax.conv and once
with XLA's convolution, from the same initial parameters and batches: a small ResNet (default), ResNet-50
(bottleneck blocks [3, 4, 6, 3], 7x7 stride-2 stem, strided 3x3 downsampling, 1x1 projections) or a
ConvNeXt-style network (4x4 stride-4 stem, blocks of a 7x7 depthwise convolution and a 4x MLP of 1x1
convolutions, 2x2 stride-2 downsampling). Every convolution goes through the convolution under test.

Prints the loss curves and the training-step time of each, and writes a PNG plot. The step times are measured
after training, alternating between the two networks in rounds of back-to-back steps on data already on the
device (per-step synchronisation and host-to-device copies of each batch moved the ratio by up to 20% between
runs of the same build), and reported as the median over rounds with its spread.

    python examples/train_resnet.py [--model small|resnet50|convnext] [--epochs 4] [--dtype float32|bfloat16]
                                    [--width 64] [--size 32] [--batch 64] [--lr 3e-3] [--plot resnet.png]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from sklearn.datasets import load_digits

import winrs_jax


class Block(nn.Module):
    features: int
    conv: Callable[..., jax.Array]
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = lambda k: nn.Conv(self.features, (k, k), conv_general_dilated=self.conv, dtype=self.dtype)  # noqa: E731
        y = nn.relu(nn.GroupNorm(num_groups=8, dtype=self.dtype)(conv(3)(x)))
        y = nn.GroupNorm(num_groups=8, dtype=self.dtype)(conv(3)(y))
        if x.shape[-1] != self.features:
            x = conv(1)(x)
        return nn.relu(x + y)


class ResNet(nn.Module):
    width: int
    conv: Callable[..., jax.Array]
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Conv(self.width, (5, 5), conv_general_dilated=self.conv, dtype=self.dtype)(
            x.astype(self.dtype)
        )
        for features in (self.width, self.width, 2 * self.width):
            x = Block(features, self.conv, self.dtype)(x)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(10, dtype=jnp.float32)(x.astype(jnp.float32))


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (strided where the stage downsamples), 1x1 expand by 4."""

    features: int
    stride: int
    conv: Callable[..., jax.Array]
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        def conv(features: int, k: int, stride: int = 1) -> nn.Conv:
            return nn.Conv(
                features, (k, k), (stride, stride), conv_general_dilated=self.conv, dtype=self.dtype
            )

        norm = lambda: nn.GroupNorm(num_groups=8, dtype=self.dtype)  # noqa: E731
        y = nn.relu(norm()(conv(self.features, 1)(x)))
        y = nn.relu(norm()(conv(self.features, 3, self.stride)(y)))
        y = norm()(conv(4 * self.features, 1)(y))
        if x.shape[-1] != 4 * self.features or self.stride != 1:
            x = norm()(conv(4 * self.features, 1, self.stride)(x))
        return nn.relu(x + y)


class ResNet50(nn.Module):
    width: int  # 64 in the original
    conv: Callable[..., jax.Array]
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Conv(self.width, (7, 7), (2, 2), conv_general_dilated=self.conv, dtype=self.dtype)(
            x.astype(self.dtype)
        )
        x = nn.max_pool(nn.relu(nn.GroupNorm(num_groups=8, dtype=self.dtype)(x)), (3, 3), (2, 2), "SAME")
        for stage, blocks in enumerate((3, 4, 6, 3)):
            for i in range(blocks):
                stride = 2 if i == 0 and stage > 0 else 1
                x = Bottleneck(self.width * 2**stage, stride, self.conv, self.dtype)(x)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(10, dtype=jnp.float32)(x.astype(jnp.float32))


class ConvNeXtBlock(nn.Module):
    """A 7x7 depthwise convolution, LayerNorm, then a 4x MLP of 1x1 convolutions with GELU, scaled by a learned
    per-channel factor that starts at 1e-6 (ConvNeXt's layer scale: without it the 18 residual blocks diverge
    at this learning rate), and the residual."""

    conv: Callable[..., jax.Array]
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        conv = functools.partial(nn.Conv, conv_general_dilated=self.conv, dtype=self.dtype)
        y = conv(c, (7, 7), feature_group_count=c)(x)
        y = nn.LayerNorm(dtype=self.dtype)(y)
        y = conv(c, (1, 1))(nn.gelu(conv(4 * c, (1, 1))(y)))
        scale = self.param("layer_scale", nn.initializers.constant(1e-6), (c,), jnp.float32)
        return x + (scale * y).astype(x.dtype)


class ConvNeXt(nn.Module):
    width: int  # 96 in ConvNeXt-T
    conv: Callable[..., jax.Array]
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = functools.partial(nn.Conv, conv_general_dilated=self.conv, dtype=self.dtype)
        x = nn.LayerNorm(dtype=self.dtype)(conv(self.width, (4, 4), (4, 4))(x.astype(self.dtype)))
        for stage, blocks in enumerate((3, 3, 9, 3)):
            if stage > 0:
                x = conv(self.width * 2**stage, (2, 2), (2, 2))(nn.LayerNorm(dtype=self.dtype)(x))
            for _ in range(blocks):
                x = ConvNeXtBlock(self.conv, self.dtype)(x)
        x = nn.LayerNorm(dtype=self.dtype)(jnp.mean(x, axis=(1, 2)))
        return nn.Dense(10, dtype=jnp.float32)(x.astype(jnp.float32))


MODELS = {"small": ResNet, "resnet50": ResNet50, "convnext": ConvNeXt}
# Adam's learning rate per model: at 3e-3 the ConvNeXt did not learn in 3 epochs at 128x128 (loss 2.29,
# accuracy 0.10); at 5e-4 it reached accuracy 0.23 (CPU, width 16).
LEARNING_RATES = {"small": 3e-3, "resnet50": 3e-3, "convnext": 5e-4}


def load_data(size: int) -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    images = jnp.asarray(digits.images / 16.0, jnp.float32)[..., None]
    images = jax.image.resize(images, (len(images), size, size, 1), "bilinear")
    return np.asarray(images), digits.target.astype(np.int32)


Step = Callable[[Any, tuple[jax.Array, jax.Array], jax.Array], tuple]


def train(
    model: nn.Module,
    params: Any,
    images: jax.Array,
    labels: jax.Array,
    epochs: int,
    batch: int,
    learning_rate: float,
) -> tuple[Step, Any, list[float], np.ndarray]:
    """Trains from `params` on the device-resident data; returns the step function, the final (params, optimizer
    state), the losses and the batches' indices."""
    optimizer = optax.adam(learning_rate)

    @jax.jit
    def step(state: Any, data: tuple[jax.Array, jax.Array], idx: jax.Array) -> tuple:
        (params, opt_state), (x, y) = state, data

        def loss_fn(p: Any) -> jax.Array:
            return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x[idx]), y[idx]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), loss

    state = (params, optimizer.init(params))
    order = np.random.default_rng(0).permutation(len(images) // batch * batch).reshape(-1, batch)
    losses = []
    for _ in range(epochs):
        for idx in order:
            state, loss = step(state, (images, labels), jnp.asarray(idx))
            losses.append(loss)
    return step, state, [float(loss) for loss in losses], order


def step_times(
    runs: dict[str, tuple[Step, Any]], data: tuple[jax.Array, jax.Array], order: np.ndarray, rounds: int = 7
) -> dict[str, list[float]]:
    """Seconds per step of each network: `rounds` rounds, each running every network for one pass over the
    batches back to back (one synchronisation per pass), in alternating order."""
    batches = [jnp.asarray(idx) for idx in order]
    times: dict[str, list[float]] = {name: [] for name in runs}
    states = {name: state for name, (_, state) in runs.items()}
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            step = runs[name][0]
            state = states[name]
            jax.block_until_ready(state)
            start = time.perf_counter()
            for idx in batches:
                state, loss = step(state, data, idx)
            jax.block_until_ready(loss)
            times[name].append((time.perf_counter() - start) / len(batches))
            states[name] = state
    return times


def record_layers(layers: dict) -> Any:
    """A conv that notes each distinct layer it is called with (shapes, dtype, lax's arguments) and runs lax's."""

    def conv(lhs: jax.Array, rhs: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
        key = repr((lhs.shape, rhs.shape, lhs.dtype, args, sorted(kwargs.items())))
        shapes = (jax.ShapeDtypeStruct(lhs.shape, lhs.dtype), jax.ShapeDtypeStruct(rhs.shape, rhs.dtype))
        layers.setdefault(key, (*shapes, args, kwargs))
        return lax.conv_general_dilated(lhs, rhs, *args, **kwargs)

    return conv


def print_layer_choices(model: nn.Module, params: Any, sample: jax.Array, layers: dict) -> None:
    """What computes each distinct convolution's filter gradient in winrs_jax.conv's run: WinRS or XLA, and why
    (in the default mode, measured now; the training step's trace then finds the decisions cached)."""
    jax.eval_shape(model.apply, params, sample)
    print(f"{len(layers)} distinct convolution layers; their filter gradients with winrs_jax.conv:")
    for x, w, args, kwargs in layers.values():
        plan = winrs_jax.plan(x, w, *args, **kwargs)
        what = plan.choice if plan.supported else f"XLA ({plan.reason})"
        print(f"  filter {tuple(w.shape)} on input {tuple(x.shape)} {x.dtype}: {what}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=tuple(MODELS), default="small")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--size", type=int, default=32, help="image size after upsampling the 8x8 digits")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--lr", type=float, help="Adam's learning rate (default: per model)")
    parser.add_argument("--plot", default="resnet_digits.png")
    args = parser.parse_args()

    dtype = jnp.dtype(args.dtype)
    images, labels = load_data(args.size)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; {args.model}, {len(images)} images "
          f"{args.size}x{args.size}, {args.dtype}, width {args.width}, batch {args.batch}")  # fmt: skip
    network = MODELS[args.model]
    sample = jnp.asarray(images[: args.batch])
    params = network(args.width, lax.conv_general_dilated, dtype).init(jax.random.key(0), sample)
    layers: dict = {}
    print_layer_choices(network(args.width, record_layers(layers), dtype), params, sample, layers)

    images_on_device, labels_on_device = jnp.asarray(images), jnp.asarray(labels)
    results, runs = {}, {}
    for name, conv in (("winrs_jax.conv", winrs_jax.conv), ("XLA conv", lax.conv_general_dilated)):
        model = network(args.width, conv, dtype)
        lr = args.lr or LEARNING_RATES[args.model]
        step, state, losses, order = train(
            model, params, images_on_device, labels_on_device, args.epochs, args.batch, lr
        )
        runs[name] = (step, state)
        acc = float(jnp.mean(jnp.argmax(model.apply(state[0], images_on_device), axis=1) == labels_on_device))
        results[name] = losses
        print(f"{name:>15}: final loss {losses[-1]:.4f}, training accuracy {acc:.3f}")
    times = step_times(runs, (images_on_device, labels_on_device), order)
    for name, samples in times.items():
        print(f"{name:>15}: step {1e3 * statistics.median(samples):.2f} ms (median of {len(samples)} rounds, "
              f"{1e3 * min(samples):.2f} to {1e3 * max(samples):.2f})")  # fmt: skip
    ratios = [xla / ours for xla, ours in zip(times["XLA conv"], times["winrs_jax.conv"], strict=True)]
    median = statistics.median(times["XLA conv"]) / statistics.median(times["winrs_jax.conv"])
    print(f"step-time ratio XLA / winrs_jax: {median:.2f}x (of the medians; {min(ratios):.2f}x to "
          f"{max(ratios):.2f}x between rounds)")  # fmt: skip

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, losses in results.items():
        left.plot(losses, label=name, alpha=0.8)
    left.set(xlabel="step", ylabel="loss", title="training loss", yscale="log")
    left.legend()
    right.bar(list(times), [1e3 * statistics.median(t) for t in times.values()])
    right.set(
        ylabel="median step time (ms)", title=f"{args.model}, {jax.devices()[0].device_kind}, {args.dtype}"
    )
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
