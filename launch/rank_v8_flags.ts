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
 *
 * --no-concurrent-recompilation and --single-threaded-gc, where a node runs at least as many ranks
 * as it has cores: V8 then optimises functions and collects garbage on the rank's own thread
 * instead of on background threads, which with a core or less per rank only take the cores the
 * ranks' main threads need. The toy DDP on 2 cores and 2 ranks, `bench_ddp.ts` alternated with and
 * without them (docs/BENCHMARKS.md, "2026-12-07, later"): 12-15 % more samples a second,
 * 9-11 % less CPU per step in each rank; GPT-mini DDP (mostly native kernels) unchanged within the
 * host's noise. V8's --single-threaded (which also stops its other background work) gained less
 * there: 3 % in two of three sittings. With spare cores the background threads use them, and the
 * flags are not given.
 */

/** The flags every rank gets, in V8's spelling. */
export const RANK_V8_FLAGS: readonly string[] = ["--max-semi-space-size=1"];

/** Added where a node's ranks have a core each or less. */
export const CROWDED_V8_FLAGS: readonly string[] = [
  "--no-concurrent-recompilation",
  "--single-threaded-gc",
];

/** The flags of a rank on a node with `cores` cores (its affinity) and `localRanks` ranks. */
export function rankV8Flags(cores: number, localRanks: number): readonly string[] {
  return localRanks >= cores ? [...RANK_V8_FLAGS, ...CROWDED_V8_FLAGS] : RANK_V8_FLAGS;
}

/** A flag's name as V8 compares it: no dashes in front, `_` as `-`, no `no-`, no value. */
function flagName(flag: string): string {
  const name = flag.trim().replace(/^-+/, "").split("=")[0]!.replaceAll("_", "-");
  return name.startsWith("no-") ? name.slice(3) : name;
}

/**
 * The `deno run` arguments that give a rank `flags` (default RANK_V8_FLAGS), less those the user's
 * `DENO_V8_FLAGS` (comma-separated, as Deno reads it) already sets. Deno applies the environment's
 * flags and then the command line's, so a flag of ours left in would override the user's value;
 * the user's other flags need nothing here, Deno applies them from the environment the rank
 * inherits.
 */
export function rankV8Args(
  userFlags: string | undefined,
  flags: readonly string[] = RANK_V8_FLAGS,
): string[] {
  const theirs = new Set((userFlags ?? "").split(",").filter((f) => f.trim()).map(flagName));
  const ours = flags.filter((f) => !theirs.has(flagName(f)));
  return ours.length ? [`--v8-flags=${ours.join(",")}`] : [];
}
