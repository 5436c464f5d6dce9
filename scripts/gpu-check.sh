#!/usr/bin/env bash
# scripts/gpu-check.sh — the one prepared check of dtrain's CUDA backend on a
# machine with one GPU, in under 8 minutes:
#   1. builds the CUDA library and says what it found (GPU, driver, cuBLASLt, NCCL);
#   2. every kernel op and its backward on the GPU against the CPU library,
#      on fresh random inputs (outputs poisoned with NaN first);
#   3. the PyTorch parity fixtures on the GPU (scripts/parity.ts, DTRAIN_DEVICE=cuda);
#   4. NCCL in a world of one rank, then a 1-rank job with a checkpoint and a resume;
#   5. a GPT-2-124M-shaped bf16 training benchmark: tokens/s and MFU, beside
#      PyTorch eager on the same GPU when PyTorch is installed.
# It prints a summary table last and writes the full log to gpu-check.log (or $1).
#
# Needs: nvcc (CUDA 12.x or 13.x) and an NVIDIA driver that runs its output
# (CUDA 13 needs driver 580 or newer); cuBLASLt (the CUDA toolkit, or pip's
# nvidia-cublas); NCCL for step 4 (pip's nvidia-nccl-cu13, or libnccl2); this
# checkout's node_modules/.bin/deno (npm ci). Optional: python3 with a CUDA
# build of torch, for the side-by-side benchmark.
#
#   scripts/gpu-check.sh [LOG]        exit status: 0 when no step failed
set -u
cd "$(dirname "$0")/.." || exit 2

LOG=${1:-gpu-check.log}
: >"$LOG" || exit 2
DENO=node_modules/.bin/deno
BUDGET_S=470 # stay under 8 minutes, whatever the steps take
START=$SECONDS
SUMMARY=()
STEP_RC=0
STEP_S=0
STEP_OUT=""
GPU_OK=1

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
left() { echo $((BUDGET_S - (SECONDS - START))); }

# run_step NAME MAX_S CMD...: runs CMD with a timeout of MAX_S seconds (less when
# the budget is nearly spent), its whole output into the log and its tail on
# the console; sets STEP_RC (124 on timeout), STEP_S and STEP_OUT (a file).
run_step() {
  local name=$1 max=$2 t
  shift 2
  t=$(left)
  [ "$t" -gt "$max" ] && t=$max
  STEP_OUT=$(mktemp)
  if [ "$t" -lt 10 ]; then
    say "== $name: not run, the 8-minute budget is spent"
    STEP_RC=124
    STEP_S=0
    return
  fi
  say "== $name (timeout ${t}s): $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$t" "$@" >"$STEP_OUT" 2>&1
  STEP_RC=$?
  STEP_S=$((SECONDS - t0))
  cat "$STEP_OUT" >>"$LOG"
  tail -n 20 "$STEP_OUT"
}

verdict() {
  case $1 in
    0) echo PASS ;;
    124 | 137) echo TIMEOUT ;;
    *) echo FAIL ;;
  esac
}

# record STEP RESULT NUMBERS [SECONDS]
record() { SUMMARY+=("$1|$2|$3|${4:-$STEP_S}"); }

# The value of "key" in the last RESULT {...} line of a step's output.
result_field() { grep '^RESULT ' "$2" | tail -n 1 | sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

# ---- 1. build --------------------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1; then
  say "nvcc is not on PATH: the CUDA library cannot be built (add the CUDA toolkit's bin folder to PATH)"
  record "1 build" FAIL "nvcc not on PATH" 0
  GPU_OK=0
else
  run_step "1. build the native libraries" 300 "$DENO" run -A scripts/build_native.ts
  size=$(stat -c %s build/libdtrain_cuda.so 2>/dev/null || echo 0)
  if [ "$STEP_RC" -eq 0 ] && [ "$size" -gt 0 ]; then
    record "1 build" PASS "libdtrain_cuda.so $((size / 1024)) KiB, $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p')"
  else
    record "1 build" "$(verdict "$STEP_RC")" "see $LOG"
    GPU_OK=0
  fi
fi
if [ "$GPU_OK" -eq 1 ]; then
  run_step "1b. what dtrain finds" 60 "$DENO" run -A scripts/gpu_check/env.ts
  if [ "$STEP_RC" -eq 0 ]; then
    record "1b environment" PASS "$(result_field gpu "$STEP_OUT"), driver $(result_field driver "$STEP_OUT")"
  else
    record "1b environment" FAIL "$(grep -m1 'not usable' "$STEP_OUT" | cut -c1-110)"
    GPU_OK=0
  fi
fi

# ---- 2. every op against the CPU library --------------------------------------------------
if [ "$GPU_OK" -eq 1 ]; then
  run_step "2. ops vs the CPU library" 180 "$DENO" run -A scripts/gpu_check/ops_vs_cpu.ts
  record "2 ops vs CPU" "$(verdict "$STEP_RC")" "$(grep '^ops_vs_cpu:' "$STEP_OUT" | sed 's/^ops_vs_cpu: //')"
else
  record "2 ops vs CPU" SKIPPED "no usable GPU" 0
fi

# ---- 3. PyTorch parity fixtures on the GPU -----------------------------------------------------
if [ "$GPU_OK" -eq 0 ]; then
  record "3 parity (GPU)" SKIPPED "no usable GPU" 0
elif ! grep -q DTRAIN_DEVICE scripts/parity.ts parity/*.ts 2>/dev/null; then
  # without the hook, the fixtures would run on the CPU and prove nothing about the GPU
  say "== 3. parity: skipped, scripts/parity.ts does not read DTRAIN_DEVICE yet"
  record "3 parity (GPU)" SKIPPED "scripts/parity.ts ignores DTRAIN_DEVICE" 0
else
  run_step "3. parity fixtures on the GPU" 150 env DTRAIN_DEVICE=cuda "$DENO" run -A scripts/parity.ts
  record "3 parity (GPU)" "$(verdict "$STEP_RC")" "$(grep -c PASS "$STEP_OUT") PASS, $(grep -c FAIL "$STEP_OUT") FAIL rows"
fi

# ---- 4. NCCL, and a 1-rank job with a checkpoint and a resume --------------------------------
if [ "$GPU_OK" -eq 1 ]; then
  run_step "4a. NCCL process group, one rank" 90 "$DENO" run -A scripts/gpu_check/nccl_one_rank.ts
  record "4a NCCL 1 rank" "$(verdict "$STEP_RC")" "$(grep '^nccl_one_rank:' "$STEP_OUT" | sed 's/^nccl_one_rank: //')"
  if ! ./dtrain --help 2>&1 | grep -q -- '--device'; then
    record "4b job + checkpoint" SKIPPED "the launcher has no --device flag yet" 0
    record "4c resume" SKIPPED "the launcher has no --device flag yet" 0
  else
    RUN=$(mktemp -d)/toy_ddp
    run_step "4b. 1-rank job on the GPU with a checkpoint" 90 \
      ./dtrain --nproc 1 --device cuda --run-dir "$RUN" examples/toy_ddp.ts 2
    ckpts=$(find "$RUN" -path '*checkpoints*' -type f 2>/dev/null | wc -l)
    if [ "$STEP_RC" -eq 0 ] && [ "$ckpts" -gt 0 ]; then
      record "4b job + checkpoint" PASS "$ckpts checkpoint files in $RUN"
    else
      record "4b job + checkpoint" "$( [ "$STEP_RC" -eq 0 ] && echo FAIL || verdict "$STEP_RC")" "exit $STEP_RC, $ckpts checkpoint files"
    fi
    if ./dtrain --help 2>&1 | grep -q -- '--resume'; then
      run_step "4c. resume the job from its checkpoint" 90 \
        ./dtrain --nproc 1 --device cuda --run-dir "$RUN" --resume examples/toy_ddp.ts 3
      record "4c resume" "$(verdict "$STEP_RC")" "$(grep -m1 -i 'resum' "$STEP_OUT" | cut -c1-60)"
    else
      record "4c resume" SKIPPED "the launcher has no --resume flag yet" 0
    fi
  fi
else
  record "4 NCCL + job" SKIPPED "no usable GPU" 0
fi

# ---- 5. GPT-2-124M bf16 benchmark, beside PyTorch eager ---------------------------------------
if [ "$GPU_OK" -eq 1 ]; then
  run_step "5a. dtrain GPT-2-124M bf16 training steps" 150 "$DENO" run -A scripts/gpu_check/bench_gpt.ts --batch 8 --steps 10
  ours=$(result_field tokens_per_s "$STEP_OUT")
  ours_mfu=$(result_field mfu "$STEP_OUT")
  if [ "$STEP_RC" -eq 0 ] && [ -n "$ours" ]; then
    record "5a bench dtrain" PASS "$(awk -v t="$ours" -v m="$ours_mfu" 'BEGIN { printf "%.0f tokens/s, MFU %.1f%%", t, 100 * m }')"
  else
    record "5a bench dtrain" "$(verdict "$STEP_RC")" "see $LOG"
  fi
  if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    run_step "5b. PyTorch eager, same model and batch" 120 python3 scripts/gpu_check/bench_gpt_torch.py --batch 8 --steps 10
    theirs=$(result_field tokens_per_s "$STEP_OUT")
    if [ "$STEP_RC" -eq 0 ] && [ -n "$theirs" ]; then
      record "5b bench torch eager" PASS "$(awk -v t="$theirs" -v m="$(result_field mfu "$STEP_OUT")" 'BEGIN { printf "%.0f tokens/s, MFU %.1f%%", t, 100 * m }')"
      if [ -n "$ours" ]; then
        record "5c dtrain / torch" "$(awk -v a="$ours" -v b="$theirs" 'BEGIN { print (a >= b ? "GOAL MET" : "BELOW GOAL") }')" \
          "$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2fx PyTorch eager tokens/s (goal >= 1)", a / b }')" 0
      fi
    else
      record "5b bench torch eager" "$(verdict "$STEP_RC")" "see $LOG"
    fi
  else
    record "5b bench torch eager" SKIPPED "python3 with CUDA torch not found" 0
  fi
else
  record "5 benchmark" SKIPPED "no usable GPU" 0
fi

# ---- summary ------------------------------------------------------------------------------------
failed=0
for row in "${SUMMARY[@]}"; do
  IFS='|' read -r _ result _ _ <<<"$row"
  case $result in FAIL | TIMEOUT) failed=$((failed + 1)) ;; esac
done
{
  printf '\n%-22s %-10s %6s  %s\n' "step" "result" "secs" "numbers"
  printf '%-22s %-10s %6s  %s\n' "----" "------" "----" "-------"
  for row in "${SUMMARY[@]}"; do
    IFS='|' read -r step result numbers secs <<<"$row"
    printf '%-22s %-10s %6s  %s\n' "$step" "$result" "$secs" "$numbers"
  done
  printf '\ntotal %ss; %s step(s) failed; full log: %s\n' "$((SECONDS - START))" "$failed" "$LOG"
} | tee -a "$LOG"
[ "$failed" -eq 0 ]
