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


@pytest.fixture(autouse=True)
def _float32_means_fp32(request):
    """The tests without the gpu marker compare float32 results with float64 at FP32 accuracy and with XLA at
    its own precision. On a GPU, XLA (and WinRS, like it) reads the default precision as TF32, so there those
    tests pin HIGHEST; on the CPU it changes nothing. The gpu-marked tests test the default precision."""
    if "gpu" in request.keywords:
        yield
        return
    with jax.default_matmul_precision("highest"):
        yield
