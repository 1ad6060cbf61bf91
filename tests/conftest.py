import os

# Tests of the WinRS path force it; tests of the default (measured) choice set their mode themselves.
os.environ["WINRS_JAX_MODE"] = "winrs"

import jax  # noqa: E402
import numpy as np
import pytest

import winrs_jax


def _have_cuda() -> bool:
    try:
        return winrs_jax.CUDA_BUILT and len(jax.devices("cuda")) > 0
    except RuntimeError:
        return False


def pytest_collection_modifyitems(config, items):
    if _have_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and the CUDA handler")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
