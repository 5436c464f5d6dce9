/**
 * Test rank script: prints this rank's environment contract as one JSON
 * line on stdout (and a line on stderr), then exits 0. The store token goes
 * to $TEST_PID_DIR/token-<rank> only, never to the output.
 */
const names = [
  "RANK",
  "LOCAL_RANK",
  "WORLD_SIZE",
  "LOCAL_WORLD_SIZE",
  "GROUP_RANK",
  "MASTER_ADDR",
  "MASTER_PORT",
  "DTRAIN_RUN_ID",
  "DTRAIN_RUN_DIR",
  "DTRAIN_NUM_THREADS",
  "DTRAIN_NNODES",
  "DTRAIN_HANG_WARN",
  "DTRAIN_TIMEOUT",
  "DTRAIN_RESTART_COUNT",
  "DTRAIN_LOG_RANKS",
  "OMP_NUM_THREADS",
];
const env = Object.fromEntries(names.map((n) => [n, Deno.env.get(n) ?? null]));
const token = Deno.env.get("DTRAIN_STORE_TOKEN") ?? "";
const pidDir = Deno.env.get("TEST_PID_DIR");
// Handed to the test so it can check the launcher never prints the secret.
if (pidDir) Deno.writeTextFileSync(`${pidDir}/token-${env.RANK}`, token);
console.log(
  `ENV ${
    JSON.stringify({ ...env, tokenLength: token.length, args: Deno.args, main: import.meta.main })
  }`,
);
console.error(`stderr line from rank ${env.RANK}`);
