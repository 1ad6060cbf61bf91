"""Benchmark of winrs_jax's backward-filter convolution against XLA's, timed in the same process.

Run `python -m winrs_jax.bench --help`.
"""
