/**
 * The V8 flags the launcher gives rank processes, merged with the user's own (DENO_V8_FLAGS in the
 * rank's environment): a flag the user sets keeps the user's value, every other flag of the user's
 * still applies.
 *
 * --max-semi-space-size=1 (MB): V8's young generation stays at 1 MB instead of growing towards
 * 16 MB. A training step leaves short-lived garbage (tensor handles, tape nodes, records) that
 * dies young. With the small nursery it is swept more often (18 scavenges instead of 6-7 over the
 * toy's 237 steps, no less scavenge time in all), yet the toy DDP's CPU per steady step fell: lower
 * in 34 of 49 alternating pairs of runs, rank 0's main thread by 4-7 % (docs/BENCHMARKS.md,
 * 2026-12-07) — most likely because the step's allocations stay in a nursery the caches hold.
 */

/** The flags a rank gets, in V8's spelling. */
export const RANK_V8_FLAGS: readonly string[] = ["--max-semi-space-size=1"];

/** A flag's name as V8 compares it: no dashes in front, `_` as `-`, no `no-`, no value. */
function flagName(flag: string): string {
  const name = flag.trim().replace(/^-+/, "").split("=")[0]!.replaceAll("_", "-");
  return name.startsWith("no-") ? name.slice(3) : name;
}

/**
 * The `deno run` arguments that give a rank RANK_V8_FLAGS, less those the user's `DENO_V8_FLAGS`
 * (comma-separated, as Deno reads it) already sets. Deno applies the environment's flags and then
 * the command line's, so a flag of ours left in would override the user's value; the user's other
 * flags need nothing here, Deno applies them from the environment the rank inherits.
 */
export function rankV8Args(userFlags: string | undefined): string[] {
  const theirs = new Set((userFlags ?? "").split(",").filter((f) => f.trim()).map(flagName));
  const ours = RANK_V8_FLAGS.filter((f) => !theirs.has(flagName(f)));
  return ours.length ? [`--v8-flags=${ours.join(",")}`] : [];
}
