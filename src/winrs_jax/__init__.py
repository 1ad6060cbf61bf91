"""winrs_jax: WinRS fused 1D-Winograd backward-filter convolution for JAX (XLA FFI, CPU and CUDA)."""

from winrs_jax._ffi import CUDA_BUILT, export_disabled_checks
from winrs_jax._primitives import checkpoint_policy
from winrs_jax.choice import mode
from winrs_jax.conv import conv, conv_backward_filter, plan
from winrs_jax.planner import Plan, PlannerOptions, Variant, variants

__all__ = [
    "CUDA_BUILT",
    "Plan",
    "PlannerOptions",
    "Variant",
    "checkpoint_policy",
    "conv",
    "conv_backward_filter",
    "export_disabled_checks",
    "mode",
    "plan",
    "variants",
]
__version__ = "0.1.0"
