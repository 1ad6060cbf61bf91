#!/usr/bin/env bash
# Nsight Compute on the first Omega kernel of one layer in several dtypes, with the counters that separate the
# paths (time, instructions, stalls, shared-memory bank conflicts, tensor pipe), and the SASS of the module.
#   tools/compare_profile.sh LAYER DTYPE...   (after tools/device_check.sh build; output under $OUT)
set -uo pipefail
OUT="${OUT:-/tmp/winrs-out}"; ROOT="$(pwd)"; layer="$1"; shift
metrics=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__sass_inst_executed_op_global_ld.sum,\
smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_shared_ld.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,\
smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum,lts__t_bytes.sum,dram__bytes.sum,\
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio
for dtype in "$@"; do
  (cd /tmp && ncu --kernel-name regex:omega --launch-skip 2 --launch-count 1 --metrics "$metrics" \
    python3 "$ROOT/tools/profile_layer.py" "$layer" "$dtype") >"$OUT/ncu-$dtype.txt" 2>&1
  echo "== $dtype"; grep -E "omega_kernel|arithmetic|kernels  " "$OUT/ncu-$dtype.txt" | cut -c1-150 | head -3
  grep -E "^ +[a-z_]+__" "$OUT/ncu-$dtype.txt" | awk '{print $1, $(NF)}'
done
so=$(cd /tmp && python3 -c "import winrs_jax._winrs as m; print(m.__file__)")
cuobjdump -sass "$so" 2>/dev/null | gzip >"$OUT/sass.txt.gz"; ls -la "$OUT/sass.txt.gz"
