#!/bin/sh
# run.sh — dtrain's device check, as `deno task gpu-bundle` packs it (dist/gpu-check/), for a
# machine with NVIDIA GPUs and nothing installed: no network, node, npm or Deno. `sh run.sh --help`
# says what the bundle holds. At most 8 minutes. The steps are the files steps/NN-*.sh, sourced in
# the order of their names (a new check is one more file); the figures wanted most come first, and
# the steps that start several ranks (which a hung NCCL could hold) come last:
#   10 facts: the GPU, driver and libraries dtrain finds (and where), or what is missing
#   20 every kernel op on the GPU against the CPU library, within bounds derived from each
#      dtype's epsilon and the size of each reduction (a sticky CUDA error stops the sweep)
#   30 the PyTorch parity fixtures on the GPU (every group but SyncBatchNorm's two ranks)
#   40 GPT-2-124M bf16 training tokens/s and MFU, beside this machine's PyTorch eager
#   45 attention alone at GPT-2's shape, forward + backward, beside torch's SDPA (a ratio)
#   50 NCCL: one rank; two ranks sharing the GPU; SyncBatchNorm parity on two ranks; a 2-rank
#      training job with a checkpoint, then a new run resuming from it, which must repeat its steps
# A table row is printed as each step ends (PASS, FAIL or SKIP, why, figures); everything goes to
# gpu-check.log. A failed step does not stop the later ones. Exit status 0 when no step failed;
# on a machine without a usable GPU the GPU steps are SKIPs, with the reason, and it exits 0.
#
#   sh run.sh [LOG]
#   DTRAIN_GPU_CHECK_DEVICE=cuda-emu sh run.sh    every step on the emulated GPU (CI runs this)
set -u
cd "$(dirname "$0")" || exit 2
HERE=$(pwd)
case ${1:-} in
  -h | --help)
    cat <<'HELP'
Usage: sh run.sh [LOG]     (DTRAIN_GPU_CHECK_DEVICE=cuda-emu: every step on the emulated GPU)

dtrain's device check: about 8 minutes on a machine with an NVIDIA GPU (driver >= 580), no network,
no Deno, node or npm. One table row per step as it ends; everything in LOG (gpu-check.log).

What this folder holds, and why:
  dtrain              the single file: Deno, dtrain bundled, libdtrain_cpu.so, libdtrain_cuda.so
                      (nvcc: sm_80 + sm_90 + PTX, cudart static: only the driver is needed), the
                      emulated GPU's libraries (this same check runs in CI without a GPU)
  run.sh, steps/      this script and its steps (10 facts, 20 ops vs CPU, 30 parity, 40 GPT-2
                      benchmark, 45 attention benchmark, 50 NCCL and a resumed training job), in
                      the order they run
  js/                 the single-process checks, bundled, run with `dtrain exec`; syncbn_rank.js,
                      a rank of the two-rank SyncBatchNorm parity check
  scripts/            the launched checks, TypeScript on the public API (NCCL ranks, a training job)
  fixtures.tar.xz     the PyTorch parity fixtures (xz: they are mostly JSON), unpacked
                      into fixtures/ on the first run
  bench_gpt_torch.py  the PyTorch side of the benchmark (needs this machine's python3 + torch)
  bench_attention_torch.py  the PyTorch side of the attention benchmark (torch SDPA)

Two ranks share the one GPU (DTRAIN_SHARE_GPUS=1, an NCCL host identity per rank), NCCL talks over
the loopback interface without InfiniBand, and a collective waits at most 30 s (DTRAIN_TIMEOUT),
so a hung NCCL step cannot eat the time of the steps after it.
HELP
    exit 0
    ;;
esac
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
# the fixtures of the parity checks are these, never a checkout's
DTRAIN_FIXTURES=$HERE/fixtures/pytorch
DTRAIN_OPS_FIXTURES=$HERE/fixtures
# One GPU, two ranks: they share it, each an NCCL "host" of its own (the launcher sets NCCL_HOSTID),
# so NCCL joins them over its socket transport, on loopback: no InfiniBand, no second interface.
DTRAIN_SHARE_GPUS=1
NCCL_IB_DISABLE=1
NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# a collective (and an NCCL start) that waits longer than this fails its step instead of the budget
DTRAIN_TIMEOUT=${DTRAIN_TIMEOUT:-30}
export DTRAIN_CACHE DTRAIN_DEVICE NO_COLOR DTRAIN_FIXTURES DTRAIN_OPS_FIXTURES DTRAIN_SHARE_GPUS \
  NCCL_IB_DISABLE NCCL_SOCKET_IFNAME NCCL_DEBUG DTRAIN_TIMEOUT
if [ "$DEVICE" = cuda-emu ]; then
  # rehearse the GPU machine: one device, which the two ranks must share
  DTRAIN_CUDA_EMU_DEVICES=${DTRAIN_CUDA_EMU_DEVICES:-1}
  export DTRAIN_CUDA_EMU_DEVICES
fi
BUDGET=${DTRAIN_GPU_CHECK_BUDGET:-470} # seconds: the whole check stays under 8 minutes
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
    echo "SUMMARY not run: the ${BUDGET}-second budget is spent" >"$OUT"
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

# xz-compressed; a machine without the xz program unpacks it with Python's own lzma
if [ ! -d fixtures ] && [ -f fixtures.tar.xz ]; then
  if command -v xz >/dev/null 2>&1; then
    tar -xJf fixtures.tar.xz
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(".")' fixtures.tar.xz
  fi || { echo "run.sh: cannot unpack fixtures.tar.xz (neither xz nor python3 could)" >&2; exit 2; }
fi

# GPU_OK (1: the GPU steps run) and WHY (why not) are set by the facts step
GPU_OK=0
WHY="the facts step did not run"
for f in steps/*.sh; do
  # shellcheck disable=SC1090
  . "./$f"
done

# ---- the whole table --------------------------------------------------------------------------
{
  printf '\n%s\n' "$header"
  cat "$TABLE"
  printf '\ntotal %ss; %s step(s) failed; full log: %s\n' "$(($(date +%s) - START))" "$FAILS" "$LOG"
} | tee -a "$LOG"
[ "$FAILS" -eq 0 ]
