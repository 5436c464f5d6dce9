#!/bin/sh
# Runs every test of dtrain: installs the npm dependencies (Deno itself comes
# from the npm package "deno") when missing, builds the native libraries, and
# runs `deno test`. Extra arguments go to deno test (e.g. --filter parity).
set -e
cd "$(dirname "$0")/.."
# npm ci also when package-lock.json changed since the last install (npm's copy of it is
# node_modules/.package-lock.json): a pull that adds a dependency gets it.
if [ ! -x node_modules/.bin/deno ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
node_modules/.bin/deno run -A scripts/build_native.ts --quiet
# The launcher's type check of each script (deno check, seconds per new script) is off for the
# many launches of the suite; tests/launch/type_check_test.ts checks every launched script at once
# and runs the launcher's check itself.
export DTRAIN_NO_CHECK=1
exec node_modules/.bin/deno test -A --parallel "$@" tests/
