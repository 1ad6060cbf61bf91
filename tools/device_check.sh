#!/usr/bin/env bash
# Build, test and benchmark on a GPU machine (the device tool); logs go to $OUT.
#   tools/device_check.sh build|test|sanitize|bench|profile ...
set -uo pipefail
OUT="${OUT:-/tmp/winrs-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
for stage in "$@"; do
  case "$stage" in
    build)
      nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gpu.txt"
      WINRS_JAX_CUDA=on WINRS_JAX_CUDA_ARCHITECTURES="${WINRS_JAX_CUDA_ARCHITECTURES:-90}" \
        python3 -m pip install --no-build-isolation -v . >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
      (cd /tmp && python3 -c "import winrs_jax, jax; print('cuda built:', winrs_jax.CUDA_BUILT, jax.devices())") ;;
    test)
      (cd tests && python3 -m pytest -q -m gpu -x 2>&1 | tee "$OUT/gpu-tests.log" | tail -15)
      (cd tests && python3 -m pytest -q -x 2>&1 | tee "$OUT/all-tests.log" | tail -5) ;;
    sanitize)
      for tool in memcheck racecheck; do
        # Platform allocator: one allocation per buffer, so memcheck sees out-of-bounds accesses. No command
        # buffers: the platform allocator cannot free memory while XLA captures a CUDA graph.
        XLA_FLAGS=--xla_gpu_enable_command_buffer= XLA_PYTHON_CLIENT_ALLOCATOR=platform compute-sanitizer --tool "$tool" --kernel-name kns=omega \
          python3 tools/sanitize_variants.py >"$OUT/sanitizer-$tool.log" 2>&1
        grep -E "ok|ERROR SUMMARY" "$OUT/sanitizer-$tool.log" | tail -4
      done ;;
    bench)
      python3 -m winrs_jax.bench --suite paper --json "$OUT/bench.jsonl" --plot "$OUT/bench.png" \
        2>"$OUT/bench-stderr.log" | tee "$OUT/bench.txt"; tail -3 "$OUT/bench-stderr.log" ;;
  esac
done
