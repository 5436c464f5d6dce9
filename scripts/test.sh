#!/bin/sh
# Runs every test of dtrain: installs the npm dependencies (Deno itself comes
# from the npm package "deno") when missing, builds the native libraries, and
# runs `deno test`. Extra arguments go to deno test (e.g. --filter parity).
set -e
cd "$(dirname "$0")/.."
[ -x node_modules/.bin/deno ] || npm ci --no-audit --no-fund
node_modules/.bin/deno run -A scripts/build_native.ts --quiet
# The launcher's type check of each script (deno check, seconds per new script) is off for the
# many launches of the suite; tests/launch/type_check_test.ts checks every launched script at once
# and runs the launcher's check itself.
export DTRAIN_NO_CHECK=1
exec node_modules/.bin/deno test -A --parallel "$@" tests/
