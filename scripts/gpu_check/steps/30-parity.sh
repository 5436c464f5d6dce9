# shellcheck shell=sh
# 30 the PyTorch parity fixtures on the GPU, every group but SyncBatchNorm's, which starts two ranks
# and runs with the NCCL steps (sourced by run.sh)
if [ "$GPU_OK" = 1 ]; then
  step 150 ./dtrain exec js/parity.js fixtures/pytorch --device "$DEVICE" \
    --only toy,gpt,sampler,checkpoint,ops,cnn
  record "3 parity fixtures"
else
  skip "3 parity fixtures" "$WHY"
fi
