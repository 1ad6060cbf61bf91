"""The index math of the persistent block's T-tap tiles (cpp/winrs/tap_runs.h), checked on the host: every
MMA's operands replayed on coordinates, over batches, filter widths, row widths, paddings and SM counts
(tests/cpp/tap_runs_check.cc), compiled here with the C++ compiler that built the package. The kernels
themselves run in test_gpu.py and tools/kernel_check.cu."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _compiler() -> str | None:
    return next((found for name in ("c++", "g++", "clang++") if (found := shutil.which(name))), None)


SOURCES = (ROOT / "cpp" / "winrs").is_dir()


def _host_check(tmp_path: Path, name: str) -> str:
    """Compiles and runs tests/cpp/<name>.cc; its output, after asserting that it exited 0."""
    binary = tmp_path / name
    source = ROOT / "tests" / "cpp" / f"{name}.cc"
    subprocess.run([_compiler(), "-std=c++17", "-O1", "-I", str(ROOT / "cpp"), str(source), "-o", str(binary)],
                   check=True)  # fmt: skip
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.skipif(_compiler() is None or not SOURCES, reason="needs a C++ compiler and the sources")
def test_tap_run_tiles_sum_every_term_once(tmp_path: Path) -> None:
    """Each term dY[n, oh, ow] X[n, oh + fh - pt, ow + fw - pl] of a real X row is summed exactly once, each
    MMA meets X of its own images, row and column, reads steps of its own run only, and no step mixes real units
    with units past a run's end; a batch of 32 on odd rows fits only with the last column apart
    (tap_run_even_split), which the one-tap tiles then sum."""
    assert "layers checked" in _host_check(tmp_path, "tap_runs_check")


@pytest.mark.skipif(_compiler() is None or not SOURCES, reason="needs a C++ compiler and the sources")
def test_tf32_tile_layouts_and_transpose(tmp_path: Path) -> None:
    """The TF32 T-tap tiles' shared-memory layouts (cpp/winrs/tf32_layout.h) are bijections in whole 16-byte
    pieces, a raw k8 slice is 256 floats on with the same swizzle, the producer's transpose reads every element
    once without bank conflicts (the check fails with the quarter warps' channel rotation undone), and every
    tap's X K-block starts on a k8 slice inside one K-major atom. That the layouts are the TMA's and wgmma's own
    swizzles is for the device: tools/tf32_wgmma_probe.cu and kernel_check (tools/device_check.sh kcheck-tf32)."""
    assert _host_check(tmp_path, "tf32_layout_check").strip() == "ok"
