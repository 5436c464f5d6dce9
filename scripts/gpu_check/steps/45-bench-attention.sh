# shellcheck shell=sh
# 45 attention alone at GPT-2's shape (B·T = 8·1024, 12 heads, head dim 64), forward + backward,
# beside torch's scaled_dot_product_attention on the same GPU (sourced by run.sh; one process)
ms_of() { sed -n 's/^RESULT .*"ms": *\([0-9.e+-]*\).*/\1/p' "$OUT" | tail -n 1; }
if [ "$GPU_OK" = 1 ]; then
  if [ "$DEVICE" = cuda-emu ]; then
    step 60 ./dtrain exec js/bench_attention.js --device cuda-emu --tiny
  else
    step 60 ./dtrain exec js/bench_attention.js --device cuda
  fi
  record "5a attention fwd+bwd, dtrain"
  ours=$(ms_of)
  if [ "$DEVICE" = cuda-emu ]; then
    skip "5b same, torch SDPA" "the emulated GPU has no PyTorch peer"
  elif ! command -v python3 >/dev/null 2>&1; then
    skip "5b same, torch SDPA" "python3 is not on PATH"
  elif ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    skip "5b same, torch SDPA" "python3 has no torch that sees a GPU"
  else
    step 60 python3 bench_attention_torch.py
    theirs=$(ms_of)
    if [ "$RC" -eq 0 ] && [ -n "$ours" ] && [ -n "$theirs" ]; then
      ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", b / a }')
      row "5b same, torch SDPA" PASS "$SECS" "$(summary); dtrain runs at ${ratio}x its speed"
    else
      record "5b same, torch SDPA"
    fi
  fi
else
  skip "5 attention benchmark" "$WHY"
fi
