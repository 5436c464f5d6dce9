# shellcheck shell=sh
# 20 every kernel op on the GPU against the CPU library (sourced by run.sh)
if [ "$GPU_OK" = 1 ]; then
  step 200 ./dtrain exec js/ops_vs_cpu.js
  record "2 ops vs CPU"
else
  skip "2 ops vs CPU" "$WHY"
fi
