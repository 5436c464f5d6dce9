/**
 * A stand-in script for the tests of check/runs.ts: prints the launch and
 * check variables it was given, one "NAME=value" per line, writes a line to
 * stderr, then exits 3 — or, with the argument "hang", never ends.
 */
const NAMES = [
  "RANK",
  "WORLD_SIZE",
  "DTRAIN_RUN_ID",
  "DTRAIN_RUN_DIR",
  "DTRAIN_CHECK_OUT",
  "DTRAIN_CHECK_STAGE",
  "DTRAIN_CHECK_OTHER",
  "KEEP_ME",
];
for (const name of NAMES) console.log(`${name}=${Deno.env.get(name) ?? ""}`);
console.error("to stderr");
if (Deno.args[0] === "hang") {
  console.log("hanging");
  setInterval(() => {}, 1000);
} else {
  Deno.exit(3);
}
