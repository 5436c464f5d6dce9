# shellcheck shell=sh
# 10 facts: the GPU, driver and libraries dtrain finds (sourced by run.sh; sets GPU_OK and WHY)
step 120 ./dtrain exec js/gpu_env.js
GPU_OK=$(sed -n 's/^GPU_OK //p' "$OUT" | tail -n 1)
if [ "$RC" -ne 0 ]; then
  why=$(problem)
  row "1 facts" FAIL "$SECS" "dtrain did not run (exit $RC): $why"
  WHY="dtrain did not run"
  GPU_OK=0
else
  row "1 facts" PASS "$SECS" "$(summary)"
  WHY=$(summary)
fi
[ "${GPU_OK:-0}" = 1 ] || GPU_OK=0
