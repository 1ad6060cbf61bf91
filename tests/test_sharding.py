"""Data parallelism on 4 CPU devices (a subprocess, since the device count is fixed when JAX starts)."""

import json
import os
import subprocess
import sys
from pathlib import Path


def test_batch_sharded_training_step_all_reduces_dw_without_gathering_activations():
    script = Path(__file__).parent / "scripts" / "data_parallel.py"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"  # 4 host devices, also on a GPU machine
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # float32 sums over different shard orders: compare with XLA at the tolerance of the other gradient tests.
    cases = ("jit", "shard_map", "explicit", "no_pcast", "penalty", "ensemble", "batch_grouped")
    for case in (*cases, "explicit_batch_grouped", "explicit_layouts"):
        assert report[f"{case}_error"] < 2e-4, report
    assert report["winrs_calls"] >= 1, report
    # The bf16 3D layer read in place: both dW in bfloat16, apart by their roundings (8 eps of bfloat16).
    assert max(report["volume_errors"]) < 8 * 2.0**-8 and report["volume_in_place"], report
    assert report["all_reduce"] and not report["all_gather"], report
    assert report["measured_batches"] == [2], report  # the per-device shard of the batch of 8
    lax_error, our_error = report["explicit_ensemble_errors"]
    assert our_error == lax_error, report
    ours, lax_gathers = report["ensemble_gathers"]
    assert ours <= 1 and ours < lax_gathers, report  # at most the forward's; WinRS adds none
