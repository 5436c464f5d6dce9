# shellcheck shell=sh
# 40 GPT-2-124M bf16 training, beside PyTorch eager (sourced by run.sh; one process, no NCCL)
tokens() { sed -n 's/^RESULT .*"tokens_per_s": *\([0-9.e+-]*\).*/\1/p' "$OUT" | tail -n 1; }
if [ "$GPU_OK" = 1 ]; then
  if [ "$DEVICE" = cuda-emu ]; then
    step 90 env DTRAIN_COUNT_CALLS=1 ./dtrain exec js/bench_gpt.js --device cuda-emu --tiny --steps 1 --warmup 1
  else
    # counting costs ~1 us per native call (~0.5 ms of a step of ~100 ms): launches per layer come along
    step 150 env DTRAIN_COUNT_CALLS=1 ./dtrain exec js/bench_gpt.js --device cuda --batch 8 --steps 10
  fi
  record "4a GPT-2 124M bf16, dtrain"
  ours=$(tokens)
  if [ "$DEVICE" = cuda-emu ]; then
    skip "4b same model, PyTorch eager" "the emulated GPU has no PyTorch peer"
  elif ! command -v python3 >/dev/null 2>&1; then
    skip "4b same model, PyTorch eager" "python3 is not on PATH"
  elif ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    skip "4b same model, PyTorch eager" "python3 has no torch that sees a GPU"
  else
    step 150 python3 bench_gpt_torch.py --batch 8 --steps 10
    theirs=$(tokens)
    if [ "$RC" -eq 0 ] && [ -n "$ours" ] && [ -n "$theirs" ]; then
      ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
      row "4b same model, PyTorch eager" PASS "$SECS" "$(summary); dtrain runs at ${ratio}x its tokens/s"
    else
      record "4b same model, PyTorch eager"
    fi
  fi
else
  skip "4 GPT-2 124M benchmark" "$WHY"
fi
