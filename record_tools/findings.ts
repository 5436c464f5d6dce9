/**
 * What a comparison of two runs produces: a Finding (one difference, with
 * evidence and a check), the WEIGHT table that ranks findings, and the Sink
 * the comparisons report into.
 */

/** One difference, with its evidence and a check that would confirm or rule it out. */
export interface Finding {
  /** rank key: lower is printed first (see WEIGHT) */
  weight: number;
  /** what differs, e.g. "seed", "config", "env:DTRAIN_NUM_THREADS" */
  topic: string;
  /** one line naming the thing and both values */
  headline: string;
  /** further facts, one per line */
  evidence: string[];
  /** what to do to confirm or rule it out */
  check: string;
}

/** Where the comparisons put what they find. */
export interface Sink {
  /** findings so far; a later comparison may refer to earlier ones */
  readonly findings: Finding[];
  /** what could not be compared, and context that is not a difference */
  readonly notes: string[];
  /** what was compared, for the "runs agree" line */
  readonly compared: string[];
}

/**
 * The ranking. Deliberate changes to what is computed come first (code,
 * seed, numerics policy, config, device), then the partition of the work (world size,
 * launch options), then the data order (usually a consequence of the
 * former), then sources of last-bit non-determinism (numeric environment,
 * native build, hardware, runtime versions), then cosmetic settings; the
 * loss divergence and the run's outcome are the symptoms the others explain.
 */
export const WEIGHT = {
  script: 10,
  dtrainVersion: 15,
  seed: 20,
  numerics: 25,
  config: 30,
  scriptArgs: 35,
  device: 40,
  worldSize: 50,
  topology: 52,
  launchOptions: 55,
  dataOrder: 60,
  envNumeric: 70,
  envSelection: 72,
  nativeBuild: 75,
  gpuStack: 78,
  envTuning: 80,
  hardware: 84,
  runtime: 88,
  envCosmetic: 95,
  loss: 100,
  nondeterminism: 101,
  outcome: 105,
} as const;

/** A tolerance as people write it: 1e-6 rather than 0.000001. */
export const tolText = (tol: number) => tol > 0 && tol < 1e-3 ? tol.toExponential() : String(tol);
/** The first 8 hex digits of a long hash. */
export const short = (hash: string) => hash.length > 12 ? `${hash.slice(0, 8)}…` : hash;
/** A recorded value as text; undefined is "(unset)". */
export const show = (v: unknown) =>
  v === undefined ? "(unset)" : typeof v === "string" ? v : JSON.stringify(v);
