/**
 * The environment variables through which `dtrain check` drives a run of the
 * user's script. Only the check's own code reads them: the probe
 * (check/probe.ts), installed by the rank bootstrap (launch/rank_bootstrap.ts) or
 * by check/probe_main.ts for a run without the launcher.
 */
export const CHECK_ENV = {
  /** folder for rank-<r>.jsonl and the kept checkpoints; turns the probe on */
  OUT: "DTRAIN_CHECK_OUT",
  /** "sampler" (a loader pass yields one batch; the process ends after 2 training passes) or a label for the logs */
  STAGE: "DTRAIN_CHECK_STAGE",
  /** "1": no autocast, no loss scaling, no clipping, no dropout */
  PLAIN: "DTRAIN_CHECK_PLAIN",
  /** the Trainer stops after this many optimizer steps in total */
  MAX_STEPS: "DTRAIN_CHECK_MAX_STEPS",
  /** the Trainer checkpoints every this many steps */
  CKPT_EVERY: "DTRAIN_CHECK_CKPT_EVERY",
  /** the probe ends the process at the next optimizer step after this many steps of this process */
  STOP_AFTER: "DTRAIN_CHECK_STOP_AFTER",
  /** S: switch exact mode on with S canonical shards (the numerics policy's and a Trainer config's `exact`) */
  EXACT: "DTRAIN_CHECK_EXACT",
  /** "1": record a hash of every parameter, gradient, buffer and optimizer-state tensor at every step */
  HASH_STATE: "DTRAIN_CHECK_HASH_STATE",
} as const;
