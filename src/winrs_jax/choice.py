"""Which implementation computes a layer's filter gradient: WinRS or XLA's own, chosen by measurement.

The cost model cannot know XLA's (cuDNN's) time, so in the default mode "auto" the first trace of a layer times
both filter gradients as the caller runs them (its layout, strides, groups and dtypes, so that WinRS's layout
transposes and casts count; a short layer repeated in one program: repeated_calls) on random data of the layer's
shapes, on the default device, outside the trace being built (WinRS also on the other arithmetic paths of equal
accuracy that the cost model finds close: planner.path_alternatives), and remembers the fastest: in memory, and
on disk so later processes skip the measurement (the habit of cudnn.benchmark and of XLA's autotuner). Modes:

- "auto": measured choice (the default);
- "winrs": WinRS wherever the planner supports the layer (tests force this);
- "xla": XLA's filter gradient always;
- "model": the planner alone, WinRS wherever it supports the layer, with no measurement: for lowering without
  a device (jax.export, AOT) or when measuring is impossible.

Set through PlannerOptions(mode=...), the context manager winrs_jax.mode("..."), or the environment variable
WINRS_JAX_MODE. Decisions are cached under $WINRS_JAX_CACHE_DIR, else $XDG_CACHE_HOME/winrs_jax, else
~/.cache/winrs_jax: one small JSON file per layer, written atomically, so processes may share the directory; a
corrupt or foreign file is ignored with a warning and measured again.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from winrs_jax.geometry import ConvSpec
from winrs_jax.planner import (
    MODES,
    REFERENCE_SMEM_PER_BLOCK,
    Plan,
    PlannerOptions,
    deterministic_sum,
    path_alternatives,
    with_path,
)

_LOG = logging.getLogger("winrs_jax")
_MODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("winrs_jax_mode", default=None)
_FORMAT = 3  # version of the cache files' content (2: the path WinRS measured fastest on; 3: in the caller's layout)


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"winrs_jax mode must be one of {MODES}, got {mode!r}")
    return mode


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """Within the block, layers traced without PlannerOptions(mode=...) use this mode. It is read at trace time:
    a function jitted and run before the block keeps what it compiled (unlike jax's own config contexts, which
    are part of jit's cache key); jit it anew, or call jax.clear_caches()."""
    token = _MODE.set(_check_mode(name))
    try:
        yield
    finally:
        _MODE.reset(token)


def current_mode(forced: str | None = None) -> str:
    """PlannerOptions.mode, else the innermost winrs_jax.mode(...), else $WINRS_JAX_MODE (in any case), else
    "auto"."""
    if explicit := forced or _MODE.get():
        return _check_mode(explicit)
    env = os.environ.get("WINRS_JAX_MODE", "")
    if env.strip().lower() not in ("", *MODES):
        raise ValueError(f"the environment variable WINRS_JAX_MODE must be one of {MODES}, got {env!r}")
    return env.strip().lower() or "auto"


@dataclasses.dataclass(frozen=True)
class Decision:
    """The measured choice for one layer on one device."""

    winrs: bool
    winrs_ms: float
    xla_ms: float
    source: str  # "measured" (this process) or "cache" (an earlier measurement, memory or disk)
    path: str = ""  # the arithmetic path of WinRS's fastest candidate ("": the plan's own)

    def describe(self) -> str:
        chosen = "WinRS" if self.winrs else "XLA"
        on = f" on {self.path}" if self.path else ""
        return f"{chosen} ({self.source}: WinRS{on} {self.winrs_ms:.3f} ms, XLA {self.xla_ms:.3f} ms)"


@dataclasses.dataclass(frozen=True)
class Layer:
    """A convolution as its caller runs it: the operands' shapes (one device's shard, one stacked problem) and
    dtype, and lax's arguments (layout, strides, groups, precision). Auto mode times its filter gradient."""

    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    dtype: Any
    spec: ConvSpec
    options: PlannerOptions | None = None


def cache_dir() -> Path:
    """$WINRS_JAX_CACHE_DIR, else $XDG_CACHE_HOME/winrs_jax, else ~/.cache/winrs_jax (an empty variable counts as
    unset, as XDG's does: an empty WINRS_JAX_CACHE_DIR wrote the files into the working directory)."""
    if explicit := os.environ.get("WINRS_JAX_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "winrs_jax"


class DecisionCache:
    """The explicit cache of measured decisions: memory first, then one JSON file per key on disk."""

    def __init__(self) -> None:
        self._memory: dict[str, Decision] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()

    @staticmethod
    def _file(key: str) -> Path:
        return cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def get(self, key: str) -> Decision | None:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        path = self._file(key)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        try:
            data = json.loads(raw.decode("utf-8"))  # a UnicodeDecodeError is a ValueError
            if not isinstance(data, dict) or data.get("format") != _FORMAT or data.get("key") != key:
                raise ValueError("written for another key or format")
            decision = Decision(data["winrs"], data["winrs_ms"], data["xla_ms"], "cache", data["path"])
            if not _well_typed(decision):
                raise ValueError("fields of the wrong type or value")
        except (ValueError, KeyError, TypeError) as e:
            self._warn_once(
                str(path), f"winrs_jax: ignoring the unreadable cache file {path} ({e}); measuring again"
            )
            return None
        with self._lock:
            self._memory[key] = decision
        return decision

    def put(self, key: str, decision: Decision) -> None:
        with self._lock:
            self._memory[key] = dataclasses.replace(decision, source="cache")
        path = self._file(key)
        data = dict(
            format=_FORMAT,
            key=key,
            winrs=decision.winrs,
            winrs_ms=decision.winrs_ms,
            xla_ms=decision.xla_ms,
            path=decision.path,
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Atomic: write a temporary file of this process and thread, then rename it over the target. Created
            # with the user's umask (mkstemp's 0600 kept a directory shared between users unreadable to others).
            tmp = path.parent / f".tmp-{os.getpid()}-{threading.get_ident()}-{path.name}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f)
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)  # not left behind where the write or the rename failed
                raise
        except OSError as e:
            self._warn_once("write", f"winrs_jax: cannot write the decision cache in {path.parent} ({e})")


DECISIONS = DecisionCache()


def _well_typed(decision: Decision) -> bool:
    """Whether a decision read from a file is one that put wrote: a bool, times in ms (WinRS's infinite where it
    failed, XLA's finite), a path name."""
    times = (decision.winrs_ms, decision.xla_ms)
    return (
        isinstance(decision.winrs, bool)
        and all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in times)
        and math.isfinite(decision.xla_ms)
        and isinstance(decision.path, str)
    )


# WinRS is chosen only when it measured at least 5% faster than XLA's best sample (_time_all): two timings closer
# than that are noise (the same layer measured again may swap them), and a user loses more from a wrong WinRS than
# from a missed 5%.
WINRS_MARGIN = 0.95


# Each sample runs its calls back to back for about SAMPLE_S. One synchronised call on an H100's host carried
# 0.2-0.4 ms of dispatch and wait beside 0.08-0.1 ms kernels (2026-11-23). Counted from it, each candidate's
# samples took 1-8 calls, so the wait weighed on them unequally: XLA at 3 calls per sample read 0.18-0.21 ms per
# call, WinRS at 5-6 calls 0.12-0.14, where 100 calls back to back read 0.080 and 0.095 (3x3 128:7:512 bf16;
# auto chose that WinRS, which ran at 0.69x).
SAMPLE_S = 10e-3
MAX_CALLS = 200


def per_call_estimate(fn: Callable[[], jax.Array]) -> tuple[float, int]:
    """Seconds per call of fn (warm) and the calls a sample takes. One synchronised call's time overstates a short
    kernel's by the host's dispatch and wait: where it is under SAMPLE_S a burst of calls back to back, as many as
    would fill SAMPLE_S at that time, gives the estimate. A call too long for a burst is timed twice and the faster
    counts: one slow call (on an H100, 2026-11-25, a WinRS program of 1.05 ms read over 5 ms once) must not make
    a candidate a clear loser (_time_all)."""

    def one_call() -> float:
        start = time.perf_counter()
        fn().block_until_ready()
        return max(time.perf_counter() - start, 1e-6)

    per_call = one_call()
    if per_call > SAMPLE_S / 2:
        per_call = min(per_call, one_call())
    burst = min(MAX_CALLS, int(SAMPLE_S / per_call))
    if burst > 1:
        per_call = max(sample_ms(fn, burst) / 1e3, 1e-6)
    return per_call, max(1, min(MAX_CALLS, int(SAMPLE_S / per_call)))


def _time_ms(fn: Callable[[], jax.Array], budget_s: float = 0.25) -> float:
    """Median time of fn (already compiled) within about budget_s, SAMPLE_S of calls per sample."""
    _, calls = per_call_estimate(fn)
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < 3 or (len(samples) < 15 and time.perf_counter() < deadline):
        samples.append(sample_ms(fn, calls))
    return statistics.median(samples)


def _time_all(
    fns: list[Callable[[], jax.Array]], budget_s: float = 0.2, gradients_per_call: int = 1
) -> list[float]:
    """Milliseconds per call of XLA's (first) and WinRS's candidates (all compiled): XLA's fastest sample, WinRS's
    median, their samples taken in turn so that the GPU's clock ramp and other drift weigh on all alike (timing one,
    then the other, once chose a WinRS that ran at 0.62x). XLA's best, not its median: its filter gradient can run at
    two speeds in one compiled program (a float32 HIGHEST grouped layer's samples read 0.89-0.93 ms with two at 0.67,
    its bench program 0.72; against the median auto chose a WinRS of 0.82 ms, 0.87x). Over the 314 choices the bench
    recorded (docs/*.jsonl, H100, 2026-11-22 to 24) the median picked that one loser; XLA's best picks none and misses
    one win of 1.10x. WinRS must beat XLA at its best. A WinRS warm call (per_call_estimate) over three times XLA's is
    its answer: more samples of a clear loser only delay the trace. The budget: 0.2 s of samples (ten rounds of two
    candidates), where 0.4 s had taken 0.28-0.32 s of 1.0-1.2 s bf16 first choices on an H100 (2026-11-24) for samples
    of programs whose every call runs REPEAT_S of work. `gradients_per_call` (repeated_calls) divides the samples in the
    debug log, which gives ms per filter gradient."""
    estimates: list[tuple[float, int]] = []
    for fn in fns:
        fn().block_until_ready()  # the first call may load the module
        estimates.append(per_call_estimate(fn))
    result = [per_call * 1e3 for per_call, _ in estimates]
    sampled = [i for i, (per_call, _) in enumerate(estimates) if i == 0 or per_call <= 3 * estimates[0][0]]
    if len(sampled) == 1:
        _LOG.debug("auto's burst estimates, ms per filter gradient (WinRS over 3x XLA's: not sampled): %s",
                   " ".join(f"{v / gradients_per_call:.4f}" for v in result))  # fmt: skip
        return result
    # The same calls per sample for all, as many as fill SAMPLE_S for the fastest (the others, at most 3x slower,
    # take up to 3 SAMPLE_S): each sample carries one wait for the GPU, which must weigh alike on every candidate's
    # calls (EfficientNet's 5x5 depthwise layer, bf16: WinRS's samples of one call against XLA's of five carried
    # 0.3 ms more per call, and auto kept XLA where WinRS ran 1.52x faster; H100, 2026-11-25).
    fastest = min(estimates[i][0] for i in sampled)
    calls = dict.fromkeys(sampled, max(1, min(MAX_CALLS, int(SAMPLE_S / fastest))))
    samples: dict[int, list[float]] = {i: [] for i in sampled}
    start = time.perf_counter()
    deadline = start + budget_s
    while len(samples[0]) < 3 or (
        len(samples[0]) < 15
        and time.perf_counter() < deadline
        and not (time.perf_counter() - start >= SETTLE_AFTER_S and _settled(samples))
    ):
        for i in sampled:
            samples[i].append(sample_ms(fns[i], calls[i]))
    for i in sampled:
        result[i] = min(samples[i]) if i == 0 else statistics.median(samples[i])
    if _LOG.isEnabledFor(logging.DEBUG):  # the bench records them beside its own timings
        _LOG.debug(
            "auto's samples, ms per filter gradient: %s",
            "; ".join(
                f"{'XLA' if i == 0 else f'WinRS {i}'} ({calls[i]} calls of {gradients_per_call} each): "
                + " ".join(f"{v / gradients_per_call:.4f}" for v in samples[i])
                for i in sampled
            ),
        )
    return result


# Medians this far apart after SETTLE_AFTER_S of sampling settle the choice: more samples would not swap them, and
# on a layer of 10 ms per call (a 3D layer in float32) each round costs tens of milliseconds of the first trace.
# Not sooner: the first few milliseconds run while the GPU's clock ramps up (three samples of 2 ms once chose a
# WinRS that then ran at 0.50x).
SETTLED_RATIO = 1.25
SETTLE_AFTER_S = 0.1


def _settled(samples: dict[int, list[float]]) -> bool:
    """Whether the fastest WinRS candidate is SETTLED_RATIO away from XLA (key 0), and from the next WinRS one."""
    medians = sorted(statistics.median(v) for i, v in samples.items() if i != 0)
    xla = statistics.median(samples[0])
    apart = max(medians[0], xla) >= SETTLED_RATIO * min(medians[0], xla)
    return apart and (len(medians) == 1 or medians[1] >= SETTLED_RATIO * medians[0])


def sample_ms(fn: Callable[[], jax.Array], calls: int) -> float:
    """Milliseconds per call of `calls` calls back to back, waiting for the last one only."""
    start = time.perf_counter()
    for _ in range(calls - 1):
        fn()
    fn().block_until_ready()
    return (time.perf_counter() - start) / calls * 1e3


# Called one by one from Python, a program of one short kernel costs the host about as long as the kernel runs, and
# the host's jitter shows in the times: XLA's 3x3 16:64:128 bf16 filter gradient read 0.052-0.10 ms per call in
# different processes (0.055-0.069 with the same compiled program and cuDNN algorithm), where eight of them in one
# program read 0.048 ms each in every process and compile (H100, 2026-11-23, tools/xla_variance.py). In a training
# step the host runs ahead of such kernels; so each candidate is timed repeated in one program, REPEAT_S of work per
# call (at most MAX_REPEATS applications).
REPEAT_S = 1e-3
MAX_REPEATS = 16
# Every application's dW is an output of the program (a barrier-chained program that returned only the last was
# cut back to one application), so all are alive at once: at most this many bytes of them.
MAX_REPEAT_OUTPUT_BYTES = 256 << 20


def repeated(
    fn: Callable[[jax.Array, jax.Array], jax.Array],
) -> Callable[[tuple[jax.Array, ...], tuple[jax.Array, ...]], tuple[jax.Array, ...]]:
    """fn (x, dy) -> dW applied to each pair of xs and dys in one program, every result returned. Called with the
    same arrays repeated, it runs fn that many times: XLA cannot merge applications whose operands are distinct
    parameters (with one x and dy, optimization barriers between the applications did not stop XLA's CPU compiler
    from merging them into one), and the arrays are passed, not copied."""

    def run(xs: tuple[jax.Array, ...], dys: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        return tuple(fn(x, dy) for x, dy in zip(xs, dys, strict=True))

    return run


def looped(
    fn: Callable[[jax.Array, jax.Array], jax.Array], repeats: int
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """fn (x, dy) -> dW applied `repeats` times in one program by a loop, the last result returned: one instance of
    fn's operations, run `repeats` times. Where each instance in a program pays work of its own at its first run
    (cuDNN's run-time compiled kernels behind XLA's 2D depthwise filter gradients: about 1.2 s each for a bf16 7x7
    one on an H200, 2026-11-28, tools/repeat_cost.py), `repeated` pays it `repeats` times. Each iteration writes
    one element of its own x and dy (the element's value, read once before the loop, plus the previous dW's first
    element, made finite, times zero), so that XLA can hoist none of fn's work out of the loop as invariant (x's
    padding or casts included); those writes cost a small kernel per iteration. (A write that read its own buffer's
    element made XLA copy x and dy whole in every iteration, on the CPU.) Where auto uses it: _times_by_loop."""

    def touched(a: jax.Array, value: jax.Array, previous: jax.Array) -> jax.Array:
        zero = (jnp.nan_to_num(previous.reshape(-1)[:1]) * 0).astype(a.dtype).reshape(value.shape)
        return lax.dynamic_update_slice(a, value + zero, (0,) * a.ndim)

    def run(x: jax.Array, dy: jax.Array) -> jax.Array:
        x0, dy0 = (lax.dynamic_slice(a, (0,) * a.ndim, (1,) * a.ndim) for a in (x, dy))

        def body(_: jax.Array, carry: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, ...]:
            x_i, dy_i, previous = carry
            x_i, dy_i = touched(x_i, x0, previous), touched(dy_i, dy0, previous)
            return x_i, dy_i, fn(x_i, dy_i)

        out = jax.eval_shape(fn, x, dy)
        return lax.fori_loop(0, repeats, body, (x, dy, jnp.zeros(out.shape, out.dtype)))[2]

    return run


def repeated_calls(
    fns: list[Callable[[jax.Array, jax.Array], jax.Array]],
    x: jax.Array,
    dy: jax.Array,
    repeats: int | None = None,
    every: bool = False,
    loop: bool = False,
) -> tuple[list[Callable[[], jax.Array]], int]:
    """Calls of each fn (x, dy) -> dW repeated in one program (`repeated`, or `looped` with `loop`), the same count
    for all, and that count, which divides their times. The count: `repeats`, else `repeat_count` of the first.
    (Counted from the first alone, the others compile once: compiling and timing every candidate alone first made
    the H100's first choices 0.2-0.45 s longer.) `every` (benchmarks): the largest `repeat_count` of them all, so
    that the shortest call is not timed with its program's dispatch (a 0.03 ms call beside a 1 ms one read 0.064
    ms)."""
    first = None
    if repeats is None:
        counted = [repeat_count(fn, x, dy) for fn in (fns if every else fns[:1])]
        first, repeats = counted[0][0], max(count for _, count in counted)
    return repeated_programs(fns, x, dy, repeats, first, loop), repeats


def _single(
    fn: Callable[[jax.Array, jax.Array], jax.Array], x: jax.Array, dy: jax.Array
) -> Callable[[], jax.Array]:
    return functools.partial(jax.jit(fn).lower(x, dy).compile(), x, dy)


def repeat_count(
    fn: Callable[[jax.Array, jax.Array], jax.Array], x: jax.Array, dy: jax.Array
) -> tuple[Callable[[], jax.Array], int]:
    """fn's call alone (compiled, run once) and the repeats that make REPEAT_S of its work (one warm call, then a
    burst, per_call_estimate), at most MAX_REPEATS and MAX_REPEAT_OUTPUT_BYTES of results; 1 where one call
    takes REPEAT_S or more."""
    first = _single(fn, x, dy)
    out = first().block_until_ready()  # the first call may load the module; its result gives dW's bytes
    return first, _repeats_for(per_call_estimate(first)[0], out.nbytes)


def _repeats_for(per_call_s: float, out_bytes: int) -> int:
    """Applications that make REPEAT_S of work at per_call_s each, at most MAX_REPEATS and
    MAX_REPEAT_OUTPUT_BYTES of results of out_bytes each; at least one."""
    return max(
        1, min(MAX_REPEATS, math.ceil(REPEAT_S / per_call_s), MAX_REPEAT_OUTPUT_BYTES // max(1, out_bytes))
    )


def _on_gpu() -> bool:
    return jax.devices()[0].platform == "gpu"


def _times_by_loop(layer: Layer) -> bool:
    """Whether auto times the layer's candidates by a loop (`looped`) instead of in straight-line code: 2D
    depthwise layers on a GPU (1D and 3D ones were not measured). Each instance of XLA's 2D depthwise filter gradient
    in a program paid cuDNN's run-time compilation at its first run (bf16, H200, 2026-11-28: 1.2 s each on 7x7
    64:28:256, 0.5 s on 3x3 64:56:128; a program of 16 took 20.7 and 8.7 s to its first result, of one 1.5 and
    0.9 s), which made auto's first trace 8-22 s longer than lax's; by a loop, from 1.2 s shorter to 3.9 s longer
    on 7x7 64:28:256 (median +1.8 s of seven runs on H200s, lax's own 14.3-19.6 s; tools/first_trace.py). Elsewhere
    straight-line code: a loop's iteration cost 8-40 us more per filter gradient on the GPU (3x3 128:28:128 and
    16:64:128 bf16, H200: XLA 0.061 -> 0.079 and 0.048 -> 0.056 ms, WinRS 0.071 -> 0.096 and 0.076 -> 0.091; more
    for WinRS on two of the three layers measured, against its choice; measured with writes that copied x and dy
    whole in each iteration, on the GPU too perhaps, not since), which blurs close choices, and XLA's CPU backend
    ran a convolution 25x slower in a loop's body."""
    spec = layer.spec
    in_channels = layer.lhs_shape[spec.dimension_numbers.lhs_spec[1]]
    depthwise = spec.feature_group_count > 1 and spec.feature_group_count == in_channels
    return _on_gpu() and depthwise and len(layer.lhs_shape) == 4


def model_repeats(plan: Plan, rhs_shape: tuple[int, ...]) -> int | None:
    """On a GPU, the repeats that make REPEAT_S of work by the planner's predicted time of the plan (at most
    MAX_REPEATS and MAX_REPEAT_OUTPUT_BYTES of float32 results), so that no program of one application is
    compiled and run to count them: that took 0.27-0.49 s of the first choices of bf16 3x3 and 3x3x3 layers
    on an H100 (tools/choice_timing.py, 2026-11-24), before the repeated programs could start compiling. None
    elsewhere: the model's coefficients are an H100's, and a CPU runs layers orders of magnitude slower than it
    says. Where the model is wrong the repeated programs take longer or shorter than REPEAT_S, which changes how
    long the timing takes, not what it measures (times divide by the count; a clear loser is timed once)."""
    if not _on_gpu() or plan.predicted_seconds <= 0:
        return None
    return _repeats_for(plan.predicted_seconds, 4 * math.prod(rhs_shape))


def repeated_programs(
    fns: list[Callable[[jax.Array, jax.Array], jax.Array]],
    x: jax.Array,
    dy: jax.Array,
    repeats: int,
    first: Callable[[], jax.Array] | None = None,
    loop: bool = False,
) -> list[Callable[[], jax.Array]]:
    """Calls of each fn applied `repeats` times in one program (by a loop with `loop`: `looped`); `first`, where
    given, is fns[0]'s call alone."""
    if repeats == 1:
        return [first or _single(fns[0], x, dy), *(_single(fn, x, dy) for fn in fns[1:])]
    if loop:
        return [_single(looped(fn, repeats), x, dy) for fn in fns]
    xs, dys = (x,) * repeats, (dy,) * repeats
    compiled = [jax.jit(repeated(fn)).lower(xs, dys).compile() for fn in fns]
    # The last result is ready when the program is: waiting on it waits for all.
    return [lambda c=c: c(xs, dys)[-1] for c in compiled]


@functools.partial(jax.jit, static_argnums=(0, 1))
def _fillers(shapes: tuple[tuple[int, ...], ...], dtypes: tuple[Any, ...]) -> tuple[jax.Array, ...]:
    """Arrays of these shapes and dtypes, values spread over [0, 1) by a multiplicative hash of the index (seeded
    by the array's place), made on the device in one program: a large layer's random inputs made on the host took
    seconds, a random generator's compile about as long as the measurement, and a program per array one more
    compile (about 0.05 s on an H100) per first choice."""

    def fill(shape: tuple[int, ...], dtype: Any, seed: int) -> jax.Array:
        index = lax.iota(jnp.uint32, int(np.prod(shape))) + jnp.uint32(seed)
        hashed = (index * jnp.uint32(2654435761)) >> jnp.uint32(8)
        return (hashed.astype(jnp.float32) * 2.0**-24).reshape(shape).astype(dtype)

    return tuple(
        fill(shape, dtype, 12345 * i) for i, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True))
    )


def _filter_grad(conv: Callable[[jax.Array, jax.Array], jax.Array], layer: Layer) -> Callable[..., jax.Array]:
    """The filter gradient of `conv` (x, w) -> y at the layer's filter shape: the VJP with respect to w, whose
    forward convolution jit drops."""

    def filter_grad(x: jax.Array, dy: jax.Array) -> jax.Array:
        return jax.vjp(lambda w: conv(x, w), jnp.zeros(layer.rhs_shape, layer.dtype))[1](dy)[0]

    return filter_grad


def _measure(plan: Plan, layer: Layer, alternatives: tuple[Plan, ...] = ()) -> Decision:
    """Times XLA's filter gradient against WinRS's plan and its alternatives (planner.path_alternatives), each as
    the caller's jit runs it: lax.conv_general_dilated's transpose, and winrs_jax's conv forced to WinRS on the
    candidate's path (its layout transposes and dW's cast included)."""
    from winrs_jax._primitives import bind_conv  # it imports this module

    spec = layer.spec
    lax_conv = functools.partial(lax.conv_general_dilated, **spec.lax_kwargs())
    lhs = jax.ShapeDtypeStruct(layer.lhs_shape, layer.dtype)
    out = jax.eval_shape(lax_conv, lhs, jax.ShapeDtypeStruct(layer.rhs_shape, layer.dtype))
    x, dy = _fillers((tuple(layer.lhs_shape), tuple(out.shape)), (np.dtype(layer.dtype), np.dtype(out.dtype)))

    def winrs_fn(path: str | None) -> Callable[[jax.Array, jax.Array], jax.Array]:
        options = dataclasses.replace(layer.options or PlannerOptions(), mode="winrs")
        if path is not None:
            options = with_path(options, path)
        return _filter_grad(lambda x, w: bind_conv(x, w, spec, options), layer)

    candidates = (plan, *alternatives)
    xla_fn = _filter_grad(lax_conv, layer)
    # The repeat count comes from WinRS's first candidate (on a GPU from its predicted time, model_repeats), so
    # that XLA's filter gradient is compiled into one program only. Counted from a program of XLA's own, 2D
    # depthwise bf16 layers took 5-6 s to a first choice on an H100, 4.7 s of it in the first runs of three new
    # programs, two of them XLA's (tools/choice_timing.py). Where the two times differ enough for the count to
    # matter (10x), the choice is plain anyway.
    failure: Exception | None = None
    winrs_fns: list[Callable[[jax.Array, jax.Array], jax.Array]] = []
    first: Callable[[], jax.Array] | None = None
    repeats: int | None = None
    try:
        winrs_fns = [winrs_fn(None), *[winrs_fn(other.path) for other in alternatives]]
        repeats = model_repeats(plan, layer.rhs_shape)
        if repeats is None:
            first, repeats = repeat_count(winrs_fns[0], x, dy)
    except Exception as e:  # noqa: BLE001 - any failure to run WinRS here means XLA computes the layer
        failure = e
    # XLA's program compiles while WinRS's do (one after the other, the compiles took about half of a bf16 3x3
    # layer's 1.0 s first choice on an H100).
    start = time.perf_counter()  # (WinRS's repeat count, where it was timed, is auto's own share)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="winrs_jax-compile") as pool:
        loop = _times_by_loop(layer)
        xla_future = pool.submit(repeated_calls, [xla_fn], x, dy, repeats, loop=loop)
        winrs_future = (
            None if failure else pool.submit(repeated_programs, winrs_fns, x, dy, repeats or 1, first, loop)
        )
        (xla_call,), repeats = xla_future.result()  # XLA's failures are lax's,
        xla_call().block_until_ready()  # its first run's too, not taken for WinRS's in _time_all
        xla_ready = time.perf_counter()
        try:
            winrs_calls = winrs_future.result() if winrs_future else []
        except Exception as e:  # noqa: BLE001
            failure = e
    if failure is None:
        try:
            times = _time_all([xla_call, *winrs_calls], gradients_per_call=repeats)
        except Exception as e:  # noqa: BLE001
            failure = e
    if failure is not None:
        xla_ms = _time_ms(xla_call) / repeats
        warnings.warn(f"winrs_jax: WinRS failed on {_layer_text(plan)}, XLA computes it: {failure}",
                      RuntimeWarning, stacklevel=2)  # fmt: skip
        return Decision(False, float("inf"), xla_ms, "measured", "")
    xla_ms, *winrs_ms = (ms / repeats for ms in times)
    # XLA's share is what lax's own first step pays for that filter gradient too (its compile, autotuning
    # included, and first run); the rest is auto's own (tools/first_trace.py reads this line).
    _LOG.debug("auto's measurement of %s: %.3f s, XLA's program compiled and run once after %.3f s",
               _layer_text(plan), time.perf_counter() - start, xla_ready - start)  # fmt: skip
    best = min(range(len(winrs_ms)), key=winrs_ms.__getitem__)
    path = candidates[best].path if alternatives else ""
    return Decision(winrs_ms[best] < WINRS_MARGIN * xla_ms, winrs_ms[best], xla_ms, "measured", path)


def _outside_trace(fn: Callable[[], Decision]) -> Decision:
    """Runs fn in a helper thread, whose JAX trace state is its own: the trace being built is not touched."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except Exception as e:  # noqa: BLE001 - reported to the caller's thread
            box["error"] = e

    thread = threading.Thread(target=run, name="winrs_jax-measure")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def layer_key(plan: Plan, layer: Layer) -> str:
    device = jax.devices()[0]
    from winrs_jax import __version__

    spec = layer.spec
    tap_runs = _may_run_tap_runs(plan)
    return json.dumps(
        dict(
            device=device.device_kind, platform=device.platform, winrs_jax=__version__, jax=jax.__version__,
            batch=plan.batch, input=plan.input_hw, channels=plan.channels, filter=plan.filter_hw, pads=plan.pads,
            dtype=np.dtype(layer.dtype).name, precision=str(spec.precision), path=plan.path,
            reference=plan.reference, layout=[list(d) for d in spec.dimension_numbers],
            preferred=str(spec.preferred_element_type),
            sm_count=plan.sm_count, segments=plan.forced_segments, buckets=plan.forced_buckets,
            deterministic=deterministic_sum(plan.deterministic),
            kernels=plan.forced_kernels, depth=plan.depth,
            depth_pads=plan.depth_pads, depth_stride=plan.depth_stride, depth_dilation=plan.depth_dilation,
            strides=plan.strides, dilation=plan.dilation, groups=plan.groups,
            batch_groups=plan.batch_groups, method=plan.method,
            # decisions timed call by call (before repeated_calls), or with unequal calls per sample (before
            # _time_all's equal counts), are measured again
            timing="repeated, equal calls",
            # A grouped layer run as its dense layer: else its key would be that dense layer's (older keys kept).
            **({"dense_groups": plan.dense_groups} if plan.dense_groups > 1 else {}),
            # Direct grouped splits added atomically (before, always in a fixed order: older keys kept).
            **({"atomic_splits": True} if plan.method == "direct" and plan.atomic else {}),
            # A 3D layer whose X the kernels read by depth slice (before, from copies: older keys kept).
            **({"depth_in_place": True} if plan.depth_in_place else {}),
            **({"depth_packing": plan.depth_packing} if plan.depth_packing > 1 else {}),
            # Planned for a GPU's shared memory other than an H100's (before, always an H100's: older keys kept).
            **({"smem_per_block": plan.smem_per_block}
               if plan.smem_per_block not in (0, REFERENCE_SMEM_PER_BLOCK) else {}),
            # Unstrided 16-bit layers of more than 64 channels both ways: some ran the 128 x 128 filter-row tile
            # until the thirty-first stop, 1.10-1.68x slower than the one-tap block they run now (older keys kept
            # for the other layers).
            **({"work_tile": list(plan.work_tile)}
               if plan.path in ("bf16", "fp16") and min(plan.channels) > 64 and plan.strides == (1, 1)
               and plan.method == "winrs" else {}),
            # Of those, atomic plans of filters at least two wide may run the persistent block's three-tap tiles
            # from the thirty-second stop (1.17-2.6x one tap's speed where they run; older keys kept for the rest).
            # (2: the tiles' grid counts 12 steps for a tile's start and output from the thirty-fourth stop, 4
            # before; 3: filters 3k + 1 wide cut evenly from the thirty-fifth, 3 + 1 before: tap_runs.h.)
            **({"tap_runs": 3 if plan.filter_hw[1] % 3 == 1 else 2} if tap_runs else {}),
            # Of those, a batch of 32 on rows of an odd width runs them on all columns but the last where the
            # rest holds 7 steps of two positions, 8 for filters 3k + 1 wide (tap_runs.h, tap_run_even_split;
            # before, one tap): from the thirty-fourth stop, from the thirty-fifth for filters 3k + 1 wide too.
            **({"odd_rows_split": True}
               if tap_runs and plan.batch == 32 and plan.out_grad_hw[1] % 2 == 1
               and plan.out_grad_hw[1] >= (17 if plan.filter_hw[1] % 3 == 1 else 15) else {}),
            # Hopper's TF32 tiles on the direct kernel's plan (before the thirty-eighth stop, the planner's kernels).
            **({"tf32_tiles": True} if plan.tf32_tiles else {}),
            # Strides read in place by the filter-row tile (before, DWM's pieces on copies: older keys kept).
            **({"strides_in_place": True} if plan.strides != (1, 1) and not plan.phases and plan.method == "winrs"
               else {}),
        ),
        sort_keys=True,
    )  # fmt: skip


def _may_run_tap_runs(plan: Plan) -> bool:
    """Whether the layer's plan may run the persistent block's T-tap tiles (16 bits, unstrided, more than 64
    channels both ways, atomic sums, filters at least two wide: tap_runs.h)."""
    return (
        plan.path in ("bf16", "fp16") and min(plan.channels) > 64 and plan.strides == (1, 1)
        and plan.method == "winrs" and plan.atomic and plan.filter_hw[1] >= 2
    )  # fmt: skip


Alternatives = tuple[Plan, ...] | Callable[[], tuple[Plan, ...]]


def decide(plan: Plan, layer: Layer, alternatives: Alternatives = ()) -> Decision:
    """The measured decision for a supported plan of `layer` (and its alternatives on other paths, planned only
    when the layer is measured: a cached re-trace plans nothing more): from the cache, or measured now and
    remembered."""
    key = layer_key(plan, layer)
    decision = DECISIONS.get(key)
    if decision is None:
        others = alternatives() if callable(alternatives) else alternatives
        decision = _outside_trace(lambda: _measure(plan, layer, others))
        DECISIONS.put(key, decision)
        if not decision.winrs:
            _LOG.info(
                "winrs_jax: XLA computes the filter gradient of %s: %s",
                _layer_text(plan),
                decision.describe(),
            )
    return decision


def _layer_text(plan: Plan) -> str:
    return (
        f"N={plan.batch} {plan.input_hw[0]}x{plan.input_hw[1]}x{plan.channels[0]} -> {plan.channels[1]}, "
        f"filter {plan.filter_hw[0]}x{plan.filter_hw[1]}, {plan.path}"
        + (f", 3D (depth, output depth, filter depth) {plan.depth}" if plan.depth[2] else "")
        + (f", depth stride {plan.depth_stride}" if plan.depth_stride != 1 else "")
        + (f", depth dilation {plan.depth_dilation}" if plan.depth_dilation != 1 else "")
        + (f", strides {plan.strides}" if plan.strides != (1, 1) else "")
        + (f", dilation {plan.dilation}" if plan.dilation != (1, 1) else "")
        + (f", {plan.groups} groups" if plan.groups > 1 else "")
        + (f", {plan.batch_groups} batch groups" if plan.batch_groups > 1 else "")
    )


def choose(
    plan: Plan,
    lhs_shape: tuple[int, ...],
    rhs_shape: tuple[int, ...],
    dtype: Any,
    spec: Any,
    options: PlannerOptions | None,
    mode: str,
) -> tuple[bool, Decision | None, PlannerOptions | None]:
    """use_winrs for `plan` (of a layer with these shapes and ConvSpec), with auto mode's path alternatives; and
    the options to plan with: `options`, or where an alternative path measured faster, `options` pinned to it."""

    def alternatives() -> tuple[Plan, ...]:
        return path_alternatives(lhs_shape, rhs_shape, dtype, spec, options, plan)

    layer = Layer(tuple(lhs_shape), tuple(rhs_shape), dtype, spec, options)
    winrs, decision = use_winrs(plan, layer, mode, alternatives)
    if winrs and decision and decision.path and decision.path != plan.path:
        options = with_path(options, decision.path)
    return winrs, decision, options


def use_winrs(
    plan: Plan,
    layer: Layer,
    forced_mode: str | None = None,
    alternatives: Alternatives = (),
) -> tuple[bool, Decision | None]:
    """Whether WinRS computes this layer's filter gradient, and the measured decision behind it in auto mode (whose
    path, where set, is the one of `plan` and `alternatives` that measured fastest)."""
    chosen = current_mode(forced_mode)
    if not plan.supported or chosen == "xla":
        return False, None
    if chosen in ("winrs", "model"):
        return True, None
    decision = decide(plan, layer, alternatives)
    return decision.winrs, decision
