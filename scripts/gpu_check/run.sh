#!/bin/sh
# run.sh — dtrain's device check, as `deno task gpu-bundle` packs it (dist/gpu-check/), for a
# machine with NVIDIA GPUs and nothing installed: no network, node, npm or Deno. At most 8 minutes:
#   1  facts: the GPU, driver and libraries dtrain finds, or what is missing
#   2  every kernel op on the GPU against the CPU library (a sticky CUDA error stops the sweep
#      and names the first failing op)
#   3  the PyTorch parity fixtures on the GPU, with the CPU's tolerances
#   4  NCCL: one rank; two ranks (sharing the GPU when there is only one); a 2-rank training
#      job with a checkpoint, then a new run resuming from it, which must repeat its steps
#   5  GPT-2-124M bf16 training tokens/s and MFU, beside this machine's PyTorch eager
#   6  attention alone at GPT-2's shape, forward + backward, beside torch's SDPA (a ratio)
# A table row is printed as each step ends (PASS, FAIL or SKIP, why, figures); everything goes to
# gpu-check.log. A failed step does not stop the later ones. Exit status 0 when no step failed;
# on a machine without a usable GPU the GPU steps are SKIPs, with the reason, and it exits 0.
#
#   sh run.sh [LOG]
#   DTRAIN_GPU_CHECK_DEVICE=cuda-emu sh run.sh    every step on the emulated GPU (CI runs this)
set -u
cd "$(dirname "$0")" || exit 2
HERE=$(pwd)
LOG=${1:-gpu-check.log}
: >"$LOG" || exit 2
DEVICE=${DTRAIN_GPU_CHECK_DEVICE:-cuda}
case $DEVICE in
  cuda | cuda-emu) ;;
  *)
    echo "run.sh: DTRAIN_GPU_CHECK_DEVICE=$DEVICE: expected cuda or cuda-emu" >&2
    exit 2
    ;;
esac
# the single file unpacks beside the bundle, not in HOME (which may be empty or read-only)
DTRAIN_CACHE=${DTRAIN_CACHE:-$HERE/.cache}
DTRAIN_DEVICE=$DEVICE
NO_COLOR=1
export DTRAIN_CACHE DTRAIN_DEVICE NO_COLOR
BUDGET=470 # seconds: the whole check stays under 8 minutes
START=$(date +%s)
TABLE=$(mktemp) || exit 2
OUT=$(mktemp) || exit 2
trap 'rm -f "$TABLE" "$OUT"' EXIT
FAILS=0
RC=0
SECS=0
rm -rf runs

say() { printf '%s\n' "$*" >>"$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# step MAX_S CMD...: runs CMD for at most MAX_S seconds (less when the budget is nearly spent);
# its output goes to the log and to $OUT; sets RC (124 or 137: it ran out of time) and SECS
step() {
  max=$1
  shift
  t=$(left)
  [ "$t" -gt "$max" ] && t=$max
  : >"$OUT"
  if [ "$t" -lt 5 ]; then
    echo "SUMMARY not run: the 8-minute budget is spent" >"$OUT"
    RC=124
    SECS=0
    return
  fi
  say "== $* (at most ${t}s)"
  t0=$(date +%s)
  timeout -k 5 "$t" "$@" >"$OUT" 2>&1
  RC=$?
  SECS=$(($(date +%s) - t0))
  cat "$OUT" >>"$LOG"
}

# the step's last SUMMARY line (rank 0's, under the launcher)
summary() { sed -n 's/^\(\[r0\] \)\{0,1\}SUMMARY //p' "$OUT" | tail -n 1 | cut -c1-160; }
# the step's last line that says what went wrong
problem() {
  grep -i 'error\|fail\|cannot\|not found\|refus' "$OUT" | grep -v '^ *at \|^\[dtrain\] *at ' |
    tail -n 1 | sed 's/^\[dtrain\] //' | cut -c1-160
}

# row STEP RESULT SECONDS TEXT: one table row, printed now and kept for the summary
row() {
  line=$(printf '%-30s %-5s %4ss  %s' "$1" "$2" "$3" "$4")
  printf '%s\n' "$line"
  printf '%s\n' "$line" >>"$TABLE"
  say "ROW $line"
  if [ "$2" = FAIL ]; then FAILS=$((FAILS + 1)); fi
}

# record STEP: the row of the step that just ran, from its exit status and output
record() {
  if [ "$RC" -eq 0 ]; then
    row "$1" PASS "$SECS" "$(summary)"
  elif [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    row "$1" FAIL "$SECS" "timed out after ${SECS}s $(summary)"
  else
    why=$(summary)
    [ -n "$why" ] || why=$(problem)
    row "$1" FAIL "$SECS" "exit $RC: $why"
  fi
}

skip() { row "$1" SKIP 0 "$2"; }

header=$(printf '%-30s %-5s %5s  %s' "step" "result" "time" "why / figures")
printf '%s\n' "$header"
say "dtrain device check on $(uname -n) ($(uname -m)), $(date -u '+%Y-%m-%dT%H:%M:%SZ'), device $DEVICE"

# ---- 1. facts --------------------------------------------------------------------------------
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

# ---- 2. every op against the CPU library -----------------------------------------------------
if [ "$GPU_OK" = 1 ]; then
  step 200 ./dtrain exec js/ops_vs_cpu.js
  record "2 ops vs CPU"
else
  skip "2 ops vs CPU" "$WHY"
fi

# ---- 3. PyTorch parity fixtures on the GPU ---------------------------------------------------
if [ "$GPU_OK" = 1 ]; then
  # the emulated GPU is slow: its own test in CI runs every group, the bundle's run the toy MLPs
  if [ "$DEVICE" = cuda-emu ]; then
    step 150 ./dtrain exec js/parity.js fixtures/pytorch --device "$DEVICE" --only toy
  else
    step 150 ./dtrain exec js/parity.js fixtures/pytorch --device "$DEVICE"
  fi
  record "3 parity fixtures"
else
  skip "3 parity fixtures" "$WHY"
fi

# ---- 4. NCCL: one rank, two ranks, a training job with a checkpoint and a resume -------------
if [ "$GPU_OK" = 1 ]; then
  step 90 ./dtrain --nproc 1 --device "$DEVICE" --run-dir runs/nccl-1 scripts/nccl_ranks.ts
  record "4a NCCL, 1 rank"
  # DTRAIN_SHARE_GPUS=1: on a machine with one GPU both ranks use it (NCCL sees two hosts)
  step 120 env DTRAIN_SHARE_GPUS=1 ./dtrain --nproc 2 --device "$DEVICE" --run-dir runs/nccl-2 \
    scripts/nccl_ranks.ts
  record "4b NCCL, 2 ranks"
  step 150 env DTRAIN_SHARE_GPUS=1 ./dtrain --nproc 2 --device "$DEVICE" --run-dir runs/train \
    scripts/train_job.ts 6
  if [ "$RC" -ne 0 ]; then
    record "4c train, checkpoint, resume"
  elif [ ! -d runs/train/checkpoints/step-00000004 ]; then
    row "4c train, checkpoint, resume" FAIL "$SECS" "the job wrote no checkpoint at step 4"
  else
    first=$SECS
    step 120 env DTRAIN_SHARE_GPUS=1 ./dtrain --nproc 2 --device "$DEVICE" \
      --run-dir runs/train-resumed --resume runs/train/checkpoints/step-00000004 scripts/train_job.ts 6
    if [ "$RC" -ne 0 ]; then
      SECS=$((SECS + first))
      record "4c train, checkpoint, resume"
    else
      second=$SECS
      step 30 ./dtrain exec js/resume_check.js runs/train runs/train-resumed
      SECS=$((SECS + first + second))
      record "4c train, checkpoint, resume"
    fi
  fi
else
  skip "4 NCCL and a training job" "$WHY"
fi

# ---- 5. GPT-2-124M bf16 training, beside PyTorch eager ---------------------------------------
# (json.dumps writes "key": value, JSON.stringify "key":value)
tokens() { sed -n 's/^RESULT .*"tokens_per_s": *\([0-9.e+-]*\).*/\1/p' "$OUT" | tail -n 1; }
if [ "$GPU_OK" = 1 ]; then
  if [ "$DEVICE" = cuda-emu ]; then
    step 90 env DTRAIN_COUNT_CALLS=1 ./dtrain exec js/bench_gpt.js --device cuda-emu --tiny --steps 1 --warmup 1
  else
    # counting costs ~1 us per native call (~0.5 ms of a step of ~100 ms): launches per layer come along
    step 150 env DTRAIN_COUNT_CALLS=1 ./dtrain exec js/bench_gpt.js --device cuda --batch 8 --steps 10
  fi
  record "5a GPT-2 124M bf16, dtrain"
  ours=$(tokens)
  if [ "$DEVICE" = cuda-emu ]; then
    skip "5b same model, PyTorch eager" "the emulated GPU has no PyTorch peer"
  elif ! command -v python3 >/dev/null 2>&1; then
    skip "5b same model, PyTorch eager" "python3 is not on PATH"
  elif ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    skip "5b same model, PyTorch eager" "python3 has no torch that sees a GPU"
  else
    step 150 python3 bench_gpt_torch.py --batch 8 --steps 10
    theirs=$(tokens)
    if [ "$RC" -eq 0 ] && [ -n "$ours" ] && [ -n "$theirs" ]; then
      ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
      row "5b same model, PyTorch eager" PASS "$SECS" "$(summary); dtrain runs at ${ratio}x its tokens/s"
    else
      record "5b same model, PyTorch eager"
    fi
  fi
else
  skip "5 GPT-2 124M benchmark" "$WHY"
fi

# ---- 6. attention alone (GPT-2's shape), beside torch's scaled_dot_product_attention ---------
ms_of() { sed -n 's/^RESULT .*"ms": *\([0-9.e+-]*\).*/\1/p' "$OUT" | tail -n 1; }
if [ "$GPU_OK" = 1 ]; then
  if [ "$DEVICE" = cuda-emu ]; then
    step 60 ./dtrain exec js/bench_attention.js --device cuda-emu --tiny
  else
    step 60 ./dtrain exec js/bench_attention.js --device cuda
  fi
  record "6a attention fwd+bwd, dtrain"
  ours=$(ms_of)
  if [ "$DEVICE" = cuda-emu ]; then
    skip "6b same, torch SDPA" "the emulated GPU has no PyTorch peer"
  elif ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    skip "6b same, torch SDPA" "python3 has no torch that sees a GPU"
  else
    step 60 python3 bench_attention_torch.py
    theirs=$(ms_of)
    if [ "$RC" -eq 0 ] && [ -n "$ours" ] && [ -n "$theirs" ]; then
      ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", b / a }')
      row "6b same, torch SDPA" PASS "$SECS" "$(summary); dtrain runs at ${ratio}x its speed"
    else
      record "6b same, torch SDPA"
    fi
  fi
else
  skip "6 attention benchmark" "$WHY"
fi

# ---- the whole table --------------------------------------------------------------------------
{
  printf '\n%s\n' "$header"
  cat "$TABLE"
  printf '\ntotal %ss; %s step(s) failed; full log: %s\n' "$(($(date +%s) - START))" "$FAILS" "$LOG"
} | tee -a "$LOG"
[ "$FAILS" -eq 0 ]
