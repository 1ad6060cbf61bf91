#!/usr/bin/env bash
# Build, test and benchmark on a GPU machine (the device tool); logs go to $OUT.
#   tools/device_check.sh build|kcheck|kcheck-tf32|l2-bandwidth|probe|tf32-probe|sanitize|test|auto-tests|suite|accuracy|tune|tune-highest|tune-buckets|tune-atomics|tune-sums|bench|bench-paper|bench-real|bench-3d|bench-strided|bench-strided-heldout|bench-dilated|bench-grouped|resnet|models|mix|stalls|stream-splits|stall-samples|sass|profile|ab|gemm-calibration|cudnn-profile|breakdown|probe-steps|waves|first-trace|layouts|choice-timing|retrace
# Each stage stands alone after `build` (which is incremental: the build directory is kept between calls).
set -uo pipefail
OUT="${OUT:-/tmp/winrs-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT="$(pwd)"
# Nsight Compute's sections of the profile stages (ours and cuDNN's kernels alike).
NCU_SECTIONS="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats
  --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis"
kernel_check() { ls "$ROOT"/build/*/kernel_check 2>/dev/null | head -1; }
bench() {  # bench NAME ARGS...: python -m winrs_jax.bench from outside the source tree (NAME-DTYPE with --dtype)
  local dtype; dtype="$(echo "$*" | sed -n 's/.*--dtype \([a-z0-9_]*\).*/\1/p')"
  local name="$1${dtype:+-$dtype}"; shift
  (cd /tmp && python3 -m winrs_jax.bench "$@" --json "$OUT/$name.jsonl" --plot "$OUT/$name.png" \
    2>/tmp/bench-stderr.log | tee "$OUT/$name.txt"); tail -3 /tmp/bench-stderr.log
}
for stage in "$@"; do
  echo "== $stage $(date +%T)"
  case "$stage" in
    build)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
      WINRS_JAX_CUDA=on WINRS_JAX_CUDA_ARCHITECTURES="${WINRS_JAX_CUDA_ARCHITECTURES:-90a}" \
        python3 -m pip install --no-build-isolation -C cmake.define.WINRS_JAX_BUILD_TOOLS=ON -v . \
        >/tmp/build.log 2>&1 || { tail -50 /tmp/build.log; exit 1; }
      grep -E "warning|error" /tmp/build.log | grep -v "^ *$" | head -5
      (cd /tmp && python3 -c "import winrs_jax, jax; print('cuda built:', winrs_jax.CUDA_BUILT, jax.devices())") ;;
    kcheck)
      # Every variant and path against the CPU executor, outside XLA (tools/kernel_check.cu).
      # On Hopper the 16-bit direct kernel's 128 x 128 block runs by wgmma; the second run checks mma.sync's.
      "$(kernel_check)" ${KCHECK_PATHS:-} >"$OUT/kernel-check.log" 2>&1; grep -E "FAILED|failures" "$OUT/kernel-check.log" | tail -30
      WINRS_JAX_WGMMA=0 "$(kernel_check)" bf16 fp16 >"$OUT/kernel-check-mma.log" 2>&1
      grep -E "FAILED|failures" "$OUT/kernel-check-mma.log" | tail -30
      # The 128 x 128 TMA block where the persistent block runs by default, and the persistent block's one-tap
      # tiles where its T-tap tiles do (wgmma_persistent.cuh, persistent_taps).
      WINRS_JAX_PERSISTENT=0 "$(kernel_check)" bf16 fp16 >"$OUT/kernel-check-one-tile.log" 2>&1
      grep -E "FAILED|failures" "$OUT/kernel-check-one-tile.log" | tail -30
      WINRS_JAX_TAP_RUNS=0 "$(kernel_check)" bf16 fp16 >"$OUT/kernel-check-one-tap.log" 2>&1
      grep -E "FAILED|failures" "$OUT/kernel-check-one-tap.log" | tail -30
      # Filters 3k + 1 wide cut 3 + 1 and 3 + 3 + 1 (an experiment's switch, winrs/tap_runs.h, TapRunRules).
      WINRS_JAX_TAP_BALANCED=0 "$(kernel_check)" bf16 >"$OUT/kernel-check-tap-uneven.log" 2>&1
      grep -E "FAILED|failures" "$OUT/kernel-check-tap-uneven.log" | tail -30 ;;
    kcheck-tf32)
      # The TF32 and split-TF32 T-tap tiles on wgmma (wgmma_tf32_taps.cuh) against the CPU executor
      # (kernel_check asserts that each path's cases launched them), then under memcheck; and with them off,
      # the direct kernel on mma.sync.
      # Time-limited and line-buffered: a kernel that waits for ever names its case and leaves the call's time
      # to the next stages.
      WINRS_JAX_TF32_TAPS=1 timeout 90 stdbuf -oL "$(kernel_check)" tf32 tf32x3 >"$OUT/kernel-check-tf32-taps.log" 2>&1 \
        || echo "kernel_check: exit $? after: $(tail -1 "$OUT/kernel-check-tf32-taps.log" | cut -c1-100)"
      grep -E "FAILED|failures" "$OUT/kernel-check-tf32-taps.log" | tail -30
      WINRS_JAX_TF32_TAPS=1 timeout 150 compute-sanitizer --tool memcheck "$(kernel_check)" ${SANITIZE_TF32_PATHS:-tf32 tf32x3} \
        >"$OUT/sanitizer-tf32-taps.log" 2>&1
      grep -E "ERROR SUMMARY|failures" "$OUT/sanitizer-tf32-taps.log"
      WINRS_JAX_TF32_TAPS=0 timeout 90 "$(kernel_check)" tf32 tf32x3 >"$OUT/kernel-check-tf32-mma.log" 2>&1
      grep -E "FAILED|failures" "$OUT/kernel-check-tf32-mma.log" | tail -30
      # The split-TF32 tiles' other order of products (an experiment's switch, wgmma_tf32_taps.cuh).
      WINRS_JAX_TF32_TAPS=1 WINRS_JAX_TF32X3_LOW_FIRST=1 timeout 90 "$(kernel_check)" tf32x3 \
        >"$OUT/kernel-check-tf32x3-low-first.log" 2>&1
      grep -E "FAILED|failures|launches" "$OUT/kernel-check-tf32x3-low-first.log" | tail -30
      # The split-TF32 tiles on the filter-row tile's layers (an experiment's switch, winrs/tap_runs.h).
      WINRS_JAX_TF32_TAPS=1 WINRS_JAX_TF32X3_ROW_TILE_LAYERS=1 timeout 90 "$(kernel_check)" tf32x3 \
        >"$OUT/kernel-check-tf32x3-row-tile-layers.log" 2>&1
      grep -E "FAILED|failures|launches" "$OUT/kernel-check-tf32x3-row-tile-layers.log" | tail -30 ;;
    l2-bandwidth)
      # How fast the SMs read buffers that sit in L2 (and one in memory): tools/l2_bandwidth.cu.
      nvcc -O3 "--generate-code=arch=compute_90a,code=[sm_90a]" tools/l2_bandwidth.cu -o /tmp/l2_bandwidth \
        && /tmp/l2_bandwidth | tee "$OUT/l2-bandwidth.jsonl" ;;
    probe)
      # The wgmma descriptor properties that the filter-row tile's wgmma MMA relies on (tools/wgmma_probe.cu).
      nvcc -std=c++17 -O2 "--generate-code=arch=compute_90a,code=[sm_90a]" tools/wgmma_probe.cu -o /tmp/wgmma_probe \
        && /tmp/wgmma_probe | tee "$OUT/wgmma-probe.txt" ;;
    tf32-probe)
      # The TF32 three-tap tile's parts on wgmma (tools/tf32_wgmma_probe.cu): the producer's transpose checked for
      # bank conflicts (host), the fragment, transpose and descriptor layouts against an exact product, and the
      # rate of the main loop from shared memory.
      nvcc -std=c++17 -O3 --expt-relaxed-constexpr -Icpp "--generate-code=arch=compute_90a,code=[sm_90a]" \
        tools/tf32_wgmma_probe.cu -o /tmp/tf32_wgmma_probe && /tmp/tf32_wgmma_probe | tee "$OUT/tf32-wgmma-probe.jsonl" ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        compute-sanitizer --tool "$tool" "$(kernel_check)" ${SANITIZE_PATHS:-fp32 bf16 tf32x3} >"$OUT/sanitizer-$tool.log" 2>&1
        grep -E "ERROR SUMMARY|failures|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log"
      done ;;
    test)
      (cd tests && timeout 540 python3 -m pytest -q -m gpu --tb=line -p no:cacheprovider ${TEST_K:+-k "$TEST_K"} 2>&1 \
        | tee "$OUT/gpu-tests.log" \
        | tail -25) ;;
    auto-tests)
      # The CPU suite's tests of auto mode and the bench, run where auto's measurement takes its GPU paths (loops for
      # depthwise layers, repeats from the plan's predicted time).
      (cd tests && timeout 300 python3 -m pytest -q -p no:cacheprovider --tb=short test_choice.py test_bench.py 2>&1 \
        | tee "$OUT/auto-tests.log" | tail -25) ;;
    suite)
      (cd tests && timeout 400 python3 -m pytest -q -m "not gpu" -p no:cacheprovider --tb=line 2>&1 \
        | tee "$OUT/suite.log" | tail -15)
      (cd /tmp && timeout 120 python3 "$ROOT/examples/train_digits.py" --epochs 2 2>&1 | tail -6) ;;
    accuracy)
      # XLA's and WinRS's errors on zero-mean inputs, every layer of the suites in ACCURACY_SUITES, every dtype
      # (the paper suite alone takes about 10 minutes, most of it PyTorch's float64 reference).
      (cd /tmp && python3 "$ROOT/tools/accuracy.py" --gpu ${ACCURACY_SUITES:-paper}) 2>&1 \
        | tee "$OUT/accuracy-gpu.jsonl" | tail -6 ;;
    tune)
      (cd /tmp && python3 "$ROOT/tools/tune.py" variants ${TUNE_PATHS:-}) 2>&1 | tee "$OUT/tune.jsonl" | tail -70 ;;
    tune-highest)
      (cd /tmp && python3 "$ROOT/tools/tune.py" highest) 2>&1 | tee "$OUT/tune-highest.jsonl" | grep geomean ;;
    tune-buckets)
      (cd /tmp && python3 "$ROOT/tools/tune.py" buckets) 2>&1 | tee "$OUT/tune-buckets.jsonl" | tail -120 ;;
    tune-sums)
      (cd /tmp && python3 "$ROOT/tools/tune.py" sums) 2>&1 | tee "$OUT/tune-sums.jsonl" | tail -80 ;;
    tune-atomics)
      (cd /tmp && python3 "$ROOT/tools/tune.py" atomics) 2>&1 | tee "$OUT/tune-atomics.jsonl" | tail -80 ;;
    bench) bench bench ${BENCH_ARGS:-} ;;
    bench-paper) bench bench-paper --suite paper ${BENCH_ARGS:-} ;;
    bench-real) bench bench-real --suite real ${BENCH_ARGS:-} ;;
    bench-3d) bench bench-3d --suite 3d ${BENCH_ARGS:-} ;;
    bench-strided) bench bench-strided --suite strided ${BENCH_ARGS:-} ;;
    bench-strided-heldout) bench bench-strided-heldout --suite strided-heldout ${BENCH_ARGS:-} ;;
    bench-dilated) bench bench-dilated --suite dilated ${BENCH_ARGS:-} ;;
    bench-grouped) bench bench-grouped --suite grouped ${BENCH_ARGS:-} ;;
    resnet)
      for dtype in float32 bfloat16; do
        (cd /tmp && python3 "$ROOT/examples/train_resnet.py" --epochs 3 --width 64 --batch 128 --dtype $dtype \
          --plot "$OUT/resnet-$dtype.png") 2>&1 | tee -a "$OUT/resnet.txt" | grep -E "ms|ratio|Error|plan:"
      done ;;
    models)
      # ResNet-50 and a ConvNeXt-style network with every convolution through winrs_jax.conv vs lax (issue 9).
      for model in resnet50 convnext; do
        for dtype in float32 bfloat16; do
          (cd /tmp && python3 "$ROOT/examples/train_resnet.py" --model $model --epochs 3 --width ${MODEL_WIDTH:-64} \
            --size ${MODEL_SIZE:-128} --batch 128 --dtype $dtype --plot "$OUT/$model-$dtype.png") 2>&1 \
            | tee -a "$OUT/models.txt" | grep -E "ms|ratio|Error"
        done
      done ;;
    mix)
      # Dynamic instruction mix of the first kernel of each layer (PROFILE_ARGS: profile_layer's flags, e.g.
      # --kernels=3,2 to force a pair), each count named by its opcode ("details"; "values" printed the counts
      # alone).
      for layer in ${PROFILE_LAYERS:-32:56:256:3}; do
        (cd /tmp && ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 \
          --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,sm__cycles_elapsed.max,gpu__time_duration.sum \
          --print-metric-instances details \
          python3 "$ROOT/tools/profile_layer.py" "$layer" ${PROFILE_DTYPE:-bf16} winrs ${PROFILE_ARGS:-}) \
          >"$OUT/mix-${layer//:/-}.txt" 2>&1
        grep -E "kernels |omega_kernel|sass__inst_executed_per_opcode|inst_executed.sum|cycles_elapsed|duration" \
          "$OUT/mix-${layer//:/-}.txt" | cut -c1-3000
      done ;;
    stalls)
      # Cycles per issued instruction by stall reason (warp-state metrics) of the first kernel of each layer.
      reasons="barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected selected"
      reasons="$reasons dispatch_stall lg_throttle no_instruction tex_throttle drain membar branch_resolving"
      metrics="smsp__inst_executed.sum,gpu__time_duration.sum"
      for reason in $reasons; do metrics="$metrics,smsp__average_warp_latency_issue_stalled_$reason.ratio"; done
      for layer in ${PROFILE_LAYERS:-32:56:256:3}; do
        (cd /tmp && ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 --metrics "$metrics" \
          python3 "$ROOT/tools/profile_layer.py" "$layer" ${PROFILE_DTYPE:-bf16} winrs ${PROFILE_ARGS:-}) \
          >"$OUT/stalls-${layer//:/-}${PROFILE_TAG:-}.txt" 2>&1
        grep -E "omega_kernel|duration|inst_executed|stalled" "$OUT/stalls-${layer//:/-}${PROFILE_TAG:-}.txt" \
          | sed 's/smsp__average_warp_latency_issue_stalled_//'
      done ;;
    sass)
      # The SASS of the kernels whose mangled names match SASS_MATCH (default: Omega_8(3, 6) and Omega_8(7, 2) in
      # bf16, register staging), one file each.
      lib="$(cd /tmp && python3 -c 'import winrs_jax._winrs as m; print(m.__file__)')"
      cuobjdump -sass "$lib" >/tmp/all.sass 2>&1
      for match in ${SASS_MATCH:-OmegaConfigILi3ELNS_4PathE3ELb0ELb0E OmegaConfigILi7ELNS_4PathE3ELb0ELb0E}; do
        awk -v m="$match" '/Function :/ {on = index($0, m) > 0} on' /tmp/all.sass >"$OUT/sass-$match.txt"
        echo "$match: $(wc -l <"$OUT/sass-$match.txt") lines"
      done ;;
    profile)
      for layer in ${PROFILE_LAYERS:-32:56:256:3 128:28:128:3}; do  # Shape.parse's forms, e.g. 64:56:128:3:g128
        (cd /tmp && ncu --kernel-name regex:${PROFILE_KERNEL:-omega} --launch-skip 2 --launch-count 1 $NCU_SECTIONS \
          python3 "$ROOT/tools/profile_layer.py" "$layer" ${PROFILE_DTYPE:-bf16} winrs ${PROFILE_ARGS:-}) \
          >"$OUT/ncu-${layer//:/-}${PROFILE_TAG:-}.txt" 2>&1
        grep -E "omega_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Tensor|Stall|Grid Size|Waves" \
          "$OUT/ncu-${layer//:/-}${PROFILE_TAG:-}.txt" | head -30
      done ;;
    stall-samples)
      # Warp stall samples of the first omega kernel of each layer by SASS instruction (tools/stall_samples.py).
      for layer in ${PROFILE_LAYERS:-32:56:256:3}; do
        (cd /tmp && python3 "$ROOT/tools/stall_samples.py" "$layer" ${PROFILE_DTYPE:-bf16} "/tmp/stalls-${layer//:/-}") \
          2>&1 | grep -v Warning | tee -a "$OUT/stall-samples.txt"
      done ;;
    ab)
      # A launch-time switch A/B in one process (tools/ab_env.py): AB="VAR A B", PROFILE_LAYERS, PROFILE_DTYPE;
      # AB_TIMEOUT seconds at most (240).
      (cd /tmp && timeout "${AB_TIMEOUT:-240}" python3 "$ROOT/tools/ab_env.py" ${AB:-WINRS_JAX_WINDOW 1 0} ${PROFILE_DTYPE:-bf16} \
        ${PROFILE_LAYERS:-32:56:256:3}) 2>&1 | grep -v Warning | tee "$OUT/ab.jsonl" ;;
    gemm-calibration)
      # cuBLAS's time for each layer's per-tap GEMM (tools/gemm_calibration.py): the one-tap formulation's ceiling.
      (cd /tmp && python3 "$ROOT/tools/gemm_calibration.py" ${PROFILE_DTYPE:-bf16} \
        ${PROFILE_LAYERS:-32:56:256:3 32:14:1024:3 128:7:512:3 128:28:128:3 32:16:512:5 32:32:256:9}) 2>&1 \
        | grep -v Warning | tee "$OUT/gemm-calibration.jsonl" ;;
    cudnn-profile)
      # cuDNN's filter-gradient kernel of each layer (N:H:C:F) under Nsight Compute (tools/cudnn_wgrad_profile.py):
      # its launch shape, occupancy, throughputs and warp states, the model of what our kernels lack.
      for layer in ${PROFILE_LAYERS:-32:56:256:3 128:28:128:3}; do
        timeout 150 ncu --profile-from-start off $NCU_SECTIONS \
          python3 "$ROOT/tools/cudnn_wgrad_profile.py" ${PROFILE_DTYPE:-bf16} "$layer" >"$OUT/ncu-cudnn-$layer.txt" 2>&1
        grep -E "^  sm90|Duration|Compute \(SM\)|L2 Cache Th|Registers Per|Grid Size|Cluster Size" "$OUT/ncu-cudnn-$layer.txt"
      done ;;
    breakdown)
      # Every kernel of one filter gradient, WinRS's and XLA's, with its time, from PyTorch's profiler (CUPTI; XLA's
      # process ended in a segmentation fault under ncu): the main kernel's share, and what the memset, residual
      # columns and dW's cast and transpose add. PROFILE_ARGS: profile_layer's flags, e.g. "--rank3 --hlo" (a
      # height-1 layer as a true 1D one, and the compiled program).
      for layer in ${PROFILE_LAYERS:-32:56:256:3 128:28:128:3}; do
        for impl in winrs xla; do
          echo "-- $layer ${PROFILE_DTYPE:-bf16} $impl"
          (cd /tmp && python3 "$ROOT/tools/profile_layer.py" "$layer" ${PROFILE_DTYPE:-bf16} $impl --kernels \
            ${PROFILE_ARGS:-}) >"$OUT/breakdown-${layer//:/-}-$impl.txt" 2>&1
          grep -E " us  " "$OUT/breakdown-${layer//:/-}-$impl.txt"
        done
      done ;;
    probe-steps)
      # The copy-staged main loop's halves timed apart: the package rebuilt with each timing probe (CMake
      # WINRS_JAX_PROBE: MMAs only, copies only; their results are wrong), PROBE_SHAPES timed with WinRS forced,
      # then rebuilt as shipped. Against the full loop's time: which half a step waits for. The default shapes:
      # the three-tap tiles on 128 (1D k=3, 3x3 32:112:128) and 64 channels (32:112:64->128), and 3x3
      # 128:28:128, whose TMA-staged one-tap block the probes leave alone (a control for run-to-run noise).
      for probe in mma_only copies_only ""; do
        echo "-- probe ${probe:-none}"
        WINRS_JAX_CUDA=on WINRS_JAX_CUDA_ARCHITECTURES="${WINRS_JAX_CUDA_ARCHITECTURES:-90a}" \
          python3 -m pip install --no-build-isolation -C cmake.define.WINRS_JAX_BUILD_TOOLS=ON \
          -C cmake.define.WINRS_JAX_PROBE="$probe" -v . >/tmp/build.log 2>&1 || { tail -50 /tmp/build.log; exit 1; }
        shapes=""
        for shape in ${PROBE_SHAPES:-32:1:16000:256:256:1:3 32:112:128:3 128:28:128:3 32:112:112:64:128:3:3}; do
          shapes="$shapes --shape $shape"
        done
        (cd /tmp && python3 -m winrs_jax.bench $shapes --dtype ${PROBE_DTYPE:-bf16} \
          --json "$OUT/probe-${probe:-none}.jsonl" 2>/dev/null | tee "$OUT/probe-${probe:-none}.txt" | cut -c1-90)
      done ;;
    waves)
      # bf16 time against Z near whole waves of resident blocks (tools/tune.py waves), WAVE_SHAPES in Shape.parse forms.
      (cd /tmp && python3 "$ROOT/tools/tune.py" waves ${WAVE_SHAPES:-16:64:128:3 128:7:512:3 128:17:192:3 16:128:64:3}) \
        2>&1 | tee "$OUT/waves.jsonl" | tail -80 ;;
    stream-splits)
      # The streaming kernel's time at the planner's split count and at 1 or 2 tiles a split (tools/tune.py stream-splits).
      (cd /tmp && python3 "$ROOT/tools/tune.py" stream-splits ${PROFILE_DTYPE:-bf16} ${PROFILE_LAYERS:-64:56:128:3:g128}) \
        2>&1 | grep -v Warning | tee "$OUT/stream-splits-${PROFILE_DTYPE:-bf16}.jsonl" | tail -60 ;;
    first-trace)
      # What auto adds to a first training step with a new layer, in fresh processes (tools/first_trace.py).
      (cd /tmp && python3 "$ROOT/tools/first_trace.py" --dtype ${FIRST_DTYPE:-bf16} --jit-cache ${FIRST_JIT_CACHE:-off} \
        --runs ${FIRST_RUNS:-1} \
        ${FIRST_LAYERS:-64:28:256:7:g256 64:56:128:3:g128 128:28:128:3}) 2>&1 | tee -a "$OUT/first-trace.jsonl" | tail -20 ;;
    choice-timing)
      # Where auto's first choice of each CHOICE_LAYERS layer spends its time (tools/choice_timing.py, cProfile).
      for layer in ${CHOICE_LAYERS:-128:28:128:3}; do
        (cd /tmp && python3 "$ROOT/tools/choice_timing.py" "$layer" ${PROFILE_DTYPE:-bf16}) >"$OUT/choice-${layer//:/-}.txt" 2>&1
        head -3 "$OUT/choice-${layer//:/-}.txt"; grep -E "cumtime|compile|_time_all|repeat_count|_fillers|block_until|_measure" "$OUT/choice-${layer//:/-}.txt" | head -14
      done ;;
    retrace)
      # What winrs_jax.conv adds to a cached re-trace and lowering of a training step, and where (cProfile).
      for layer in ${RETRACE_LAYERS:-128:28:128:3 64:28:256:7:g256}; do
        (cd /tmp && python3 "$ROOT/tools/retrace_cost.py" "$layer" ${PROFILE_DTYPE:-bf16}) >"$OUT/retrace-${layer//:/-}.txt" 2>&1
        head -2 "$OUT/retrace-${layer//:/-}.txt"
      done ;;
    layouts)
      # NCHW/OIHW against NHWC/HWIO, lax and WinRS, in a jitted four-layer training gradient (tools/layout_cost.py).
      for dtype in bfloat16 float32; do
        (cd /tmp && python3 "$ROOT/tools/layout_cost.py" --dtype $dtype) 2>&1 | tee -a "$OUT/layouts.txt" | tail -4
      done ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
