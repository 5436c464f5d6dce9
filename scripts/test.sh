#!/bin/sh
# Runs every test of dtrain: installs the npm dependencies (Deno itself comes
# from the npm package "deno") when missing, builds the native libraries, and
# runs `deno test`. Extra arguments go to deno test (e.g. --filter parity).
set -e
cd "$(dirname "$0")/.."
[ -x node_modules/.bin/deno ] || npm ci --no-audit --no-fund
node_modules/.bin/deno run -A scripts/build_native.ts --quiet
exec node_modules/.bin/deno test -A --parallel "$@" tests/
