# shellcheck shell=sh
# 50 NCCL: one rank, two ranks sharing the GPU, SyncBatchNorm parity on two ranks, a training job
# with a checkpoint and a resume (sourced by run.sh). Last: a hung collective (DTRAIN_TIMEOUT, 30 s)
# can cost only these steps.
if [ "$GPU_OK" = 1 ]; then
  step 90 ./dtrain --nproc 1 --device "$DEVICE" --timeout "$DTRAIN_TIMEOUT" --run-dir runs/nccl-1 \
    scripts/nccl_ranks.ts
  record "6a NCCL, 1 rank"
  step 120 ./dtrain --nproc 2 --device "$DEVICE" --timeout "$DTRAIN_TIMEOUT" --run-dir runs/nccl-2 \
    scripts/nccl_ranks.ts
  record "6b NCCL, 2 ranks"
  step 120 ./dtrain exec js/parity.js fixtures/pytorch --device "$DEVICE" --only syncbn
  record "6c SyncBN parity, 2 ranks"
  step 150 ./dtrain --nproc 2 --device "$DEVICE" --timeout "$DTRAIN_TIMEOUT" --run-dir runs/train \
    scripts/train_job.ts 6
  if [ "$RC" -ne 0 ]; then
    record "6d train, checkpoint, resume"
  elif [ ! -d runs/train/checkpoints/step-00000004 ]; then
    row "6d train, checkpoint, resume" FAIL "$SECS" "the job wrote no checkpoint at step 4"
  else
    first=$SECS
    step 120 ./dtrain --nproc 2 --device "$DEVICE" --timeout "$DTRAIN_TIMEOUT" \
      --run-dir runs/train-resumed --resume runs/train/checkpoints/step-00000004 scripts/train_job.ts 6
    if [ "$RC" -ne 0 ]; then
      SECS=$((SECS + first))
      record "6d train, checkpoint, resume"
    else
      second=$SECS
      step 30 ./dtrain exec js/resume_check.js runs/train runs/train-resumed
      SECS=$((SECS + first + second))
      record "6d train, checkpoint, resume"
    fi
  fi
else
  skip "6 NCCL and a training job" "$WHY"
fi
