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
      nvidia-smi --query-gpu=name,driver_version --format=csv
      WINRS_JAX_CUDA=on WINRS_JAX_CUDA_ARCHITECTURES="${WINRS_JAX_CUDA_ARCHITECTURES:-90}" \
        python3 -m pip install --no-build-isolation -v . >/tmp/build.log 2>&1 || { tail -50 /tmp/build.log; exit 1; }
      (cd /tmp && python3 -c "import winrs_jax, jax; print('cuda built:', winrs_jax.CUDA_BUILT, jax.devices())") ;;
    test)
      (cd tests && python3 -m pytest -q -m gpu -x 2>&1 | tee "$OUT/gpu-tests.log" | tail -15)
      (cd tests && python3 -m pytest -q -x 2>&1 | tail -3)
      (cd /tmp && python3 "$OLDPWD/examples/train_digits.py" --epochs 3 2>&1 | tail -8) ;;
    sanitize)
      # The kernels alone, outside XLA, with exact-size allocations (tools/kernel_check.cu).
      nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -lineinfo -Icpp tools/kernel_check.cu \
        cpp/cuda/dispatch.cu cpp/cuda/omega_alpha*.cu cpp/winrs/plan.cc cpp/cpu/backward_filter.cc \
        -o /tmp/kernel_check || exit 1
      /tmp/kernel_check | tee "$OUT/kernel-check.log" | tail -2
      for tool in memcheck racecheck synccheck; do
        compute-sanitizer --tool "$tool" /tmp/kernel_check >"$OUT/sanitizer-$tool.log" 2>&1
        grep -E "ERROR SUMMARY|failures|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log"
      done ;;
    bench)
      (cd /tmp && python3 -m winrs_jax.bench --suite paper --json "$OUT/bench.jsonl" --plot "$OUT/bench.png" \
        2>/tmp/bench-stderr.log | tee "$OUT/bench.txt"); tail -3 /tmp/bench-stderr.log ;;
    tune)
      (cd /tmp && python3 "$OLDPWD/tools/tune.py" variants && python3 "$OLDPWD/tools/tune.py" segments) \
        2>&1 | tee "$OUT/tune.jsonl" ;;
    resnet)
      for dtype in float32 bfloat16; do
        (cd /tmp && python3 "$OLDPWD/examples/train_resnet.py" --epochs 3 --width 64 --batch 128 --dtype $dtype \
          --plot "$OUT/resnet-$dtype.png") 2>&1 | tee -a "$OUT/resnet.txt" | grep -E "ms|ratio|Error|plan:"
      done ;;
    mix)
      # Dynamic instruction mix of the first kernel of one layer, and its SASS.
      layer="${PROFILE_LAYERS:-32:56:256:3}"
      (cd /tmp && ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 \
        --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances values \
        python3 "$OLDPWD/tools/profile_layer.py" "$layer") >"$OUT/mix.txt" 2>&1
      grep -A3 "sass__inst_executed_per_opcode\|inst_executed.sum" "$OUT/mix.txt" | cut -c1-3000
      so=$(cd /tmp && python3 -c "import winrs_jax._winrs as m; print(m.__file__)")
      cuobjdump -sass "$so" >"$OUT/sass.txt" 2>&1; wc -l "$OUT/sass.txt" ;;
    profile)
      for layer in ${PROFILE_LAYERS:-32:56:256:3 32:32:256:5}; do
        (cd /tmp && ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
          --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats \
          --section ComputeWorkloadAnalysis --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_wait \
          python3 "$OLDPWD/tools/profile_layer.py" "$layer") >"$OUT/ncu-${layer//:/-}.txt" 2>&1
        grep -E "Duration|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Stall" \
          "$OUT/ncu-${layer//:/-}.txt" | head -20
      done ;;
  esac
done
