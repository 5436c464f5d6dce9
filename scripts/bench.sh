#!/bin/sh
# Every benchmark side by side with its PyTorch peer, one after another:
# GEMM vs OpenBLAS, training steps vs PyTorch, toy DDP vs torchrun, allReduce
# vs gloo. Needs Debian's python3-torch and libopenblas0-pthread for the peers.
set -e
cd "$(dirname "$0")/.."
deno=./node_modules/.bin/deno
$deno run -A scripts/build_native.ts --quiet
for b in bench_gemm bench_train bench_ddp bench_allreduce; do
  echo "== $b"
  $deno run -A "scripts/$b.ts" "$@"
done
