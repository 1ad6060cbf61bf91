"""Train a small CNN on scikit-learn's digits with winrs_jax.conv, and again with lax.conv_general_dilated.

Both runs start from the same parameters and see the same batches. Where a layer's filter gradient runs WinRS, it
differs from XLA's by float32 rounding, which training amplifies over the epochs: the printed losses agree
closely, not to the last digit. The plans printed first say which computes each layer's filter gradient, WinRS or
XLA: by default the faster of the two, measured once per layer (`--mode winrs` or WINRS_JAX_MODE=winrs forces
WinRS; on a CPU, XLA's filter gradient is usually the faster, so the default runs few layers or none on WinRS
there).

    python examples/train_digits.py [--epochs 8] [--mode auto|winrs|xla|model]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from sklearn.datasets import load_digits

import winrs_jax

DN = ("NHWC", "HWIO", "NHWC")
LAYERS = [(3, 1, 16), (5, 16, 32), (3, 32, 32)]  # (filter size, in channels, out channels)


def init_params(key: jax.Array) -> dict[str, jax.Array]:
    params = {}
    keys = jax.random.split(key, len(LAYERS) + 1)
    for i, ((size, cin, cout), k) in enumerate(zip(LAYERS, keys, strict=False)):
        scale = np.sqrt(2.0 / (size * size * cin))
        params[f"conv{i}"] = scale * jax.random.normal(k, (size, size, cin, cout), jnp.float32)
        params[f"bias{i}"] = jnp.zeros((cout,), jnp.float32)
    params["dense"] = jax.random.normal(keys[-1], (LAYERS[-1][2], 10), jnp.float32) / np.sqrt(LAYERS[-1][2])
    return params


def forward(conv, params: dict[str, jax.Array], images: jax.Array) -> jax.Array:
    x = images
    for i in range(len(LAYERS)):
        x = conv(x, params[f"conv{i}"], (1, 1), "SAME", dimension_numbers=DN) + params[f"bias{i}"]
        x = jax.nn.relu(x)
    return jnp.mean(x, axis=(1, 2)) @ params["dense"]


def make_step(conv, learning_rate: float):
    def loss_fn(params, images, labels):
        logits = forward(conv, params, images)
        return jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))

    @jax.jit
    def step(params, momentum, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
        params = jax.tree.map(lambda p, m: p - learning_rate * m, params, momentum)
        return params, momentum, loss

    return step


def accuracy(conv, params, images, labels) -> float:
    return float(jnp.mean(jnp.argmax(forward(conv, params, images), axis=1) == labels))


def train(conv, params, data, epochs: int, batch: int) -> tuple[dict, list[float], float]:
    (x_train, y_train), _ = data
    step = make_step(conv, learning_rate=0.05)
    momentum = jax.tree.map(jnp.zeros_like, params)
    order = np.random.default_rng(0).permutation(len(x_train) // batch * batch).reshape(-1, batch)
    losses = []
    start = time.perf_counter()
    for _ in range(epochs):
        epoch_loss = 0.0
        for idx in order:
            params, momentum, loss = step(params, momentum, x_train[idx], y_train[idx])
            epoch_loss += float(loss)
        losses.append(epoch_loss / len(order))
    return params, losses, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument(
        "--mode",
        choices=("auto", "winrs", "xla", "model"),
        help="what computes winrs_jax.conv's filter gradients (default: $WINRS_JAX_MODE or auto)",
    )
    args = parser.parse_args()
    if args.mode:
        with winrs_jax.mode(args.mode):
            run(args)
    else:
        run(args)


def run(args: argparse.Namespace) -> None:
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]  # N x 8 x 8 x 1
    labels = digits.target.astype(np.int32)
    split = int(0.8 * len(images))
    data = ((images[:split], labels[:split]), (images[split:], labels[split:]))

    print(f"jax {jax.__version__} on {jax.default_backend()}; {split} training images 8x8")
    x = jax.ShapeDtypeStruct((args.batch, 8, 8, 1), jnp.float32)
    on_winrs = 0
    for size, cin, cout in LAYERS:
        x = jax.ShapeDtypeStruct((args.batch, 8, 8, cin), jnp.float32)
        plan = winrs_jax.plan(x, jax.ShapeDtypeStruct((size, size, cin, cout), jnp.float32), (1, 1), "SAME",
                              dimension_numbers=DN)  # fmt: skip
        print(plan)
        on_winrs += plan.runs_winrs
    others = len(LAYERS) - on_winrs
    hint = "" if on_winrs else " (--mode winrs runs them on WinRS)"
    print(f"WinRS computes the filter gradient of {on_winrs} of {len(LAYERS)} layers"
          + (f", XLA of {others}" if others else "") + hint)  # fmt: skip

    params = init_params(jax.random.key(0))
    results = {}
    for name, conv in (("winrs_jax.conv", winrs_jax.conv), ("lax.conv", lax.conv_general_dilated)):
        trained, losses, seconds = train(conv, params, data, args.epochs, args.batch)
        results[name] = (trained, losses, seconds, accuracy(conv, trained, *data[1]))

    print(f"\n{'epoch':>5}  {'winrs_jax.conv loss':>20}  {'lax.conv loss':>14}")
    for epoch, (a, b) in enumerate(zip(results["winrs_jax.conv"][1], results["lax.conv"][1], strict=True)):
        print(f"{epoch + 1:>5}  {a:>20.6f}  {b:>14.6f}")
    for name, (_, _, seconds, acc) in results.items():
        print(f"{name:>15}: test accuracy {acc:.3f}, {seconds:.2f} s training")
    drift = max(
        float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-12))
        for a, b in zip(
            jax.tree.leaves(results["winrs_jax.conv"][0]),
            jax.tree.leaves(results["lax.conv"][0]),
            strict=True,
        )
    )
    print(f"largest relative parameter difference after training: {drift:.2e}")


if __name__ == "__main__":
    main()
