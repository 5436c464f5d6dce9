/**
 * The numerics policy: which optional arithmetic a run allows — autocast's
 * low precision, loss scaling, gradient clipping, dropout — and which
 * shortcuts it accepts (non-deterministic reductions, TF32-like GPU
 * products), and whether DDP trains in exact mode (the same bits at every
 * world size, distributed/exact.ts). A policy is a plain object that is passed or set explicitly,
 * recorded in the run's records (config.json, run.json) and compared by
 * `dtrain diff`; it never comes from the environment.
 *
 * Where it applies: `autocast`, `GradScaler` and `clipGradNorm` take one as
 * an argument; without one they use the process's policy, which is the
 * default until `setNumericsPolicy` sets another (the Trainer sets its
 * config's `numerics` section when `fit()` starts; `dtrain check`'s probe
 * sets the plain one). Dropout layers read the process's policy. Whatever
 * a policy turns off is said once per process on stderr, and remembered
 * (`numericsOverrides`) so a tool can report it.
 */

/** What a run allows of the optional arithmetic. */
export interface NumericsPolicy {
  /**
   * The dtype autocast regions compute in: "as-called" (each `autocast(dtype, fn)`
   * call's own dtype) or "f32" (every region in f32, whatever it asks).
   */
  autocast: "as-called" | "f32";
  /** false: a GradScaler scales by 1 and never skips a step */
  lossScaling: boolean;
  /** false: clipGradNorm measures the gradients' norm and leaves them as they are */
  clipping: boolean;
  /** false: Dropout layers pass their input through in training mode too */
  dropout: boolean;
  /**
   * Reductions add in a fixed order, so a rerun gives the same bits. Every
   * kernel of this build does; false is refused until one offers a faster,
   * order-free reduction.
   */
  deterministicReductions: boolean;
  /**
   * TF32-like shortcuts of GPU products (f32 inputs rounded to 10-bit
   * mantissas). No kernel of this build uses them; true is refused until
   * one does.
   */
  tf32: boolean;
  /**
   * Exact mode: false, or the number of canonical shards (a power of two).
   * A DistributedDataParallel built without its own `exact` option reads it,
   * so a script runs in exact mode unchanged when its policy says so.
   */
  exact: false | number;
}

/** The policy of a run that says nothing: everything as the code asks, no shortcuts. */
export const DEFAULT_NUMERICS: Readonly<NumericsPolicy> = Object.freeze({
  autocast: "as-called",
  lossScaling: true,
  clipping: true,
  dropout: true,
  deterministicReductions: true,
  tf32: false,
  exact: false,
});

/**
 * Plain f32 arithmetic: no autocast, loss scaling, clipping or dropout — what
 * `dtrain check` compares one process and N ranks under (dropout masks cannot
 * match between them: each rank draws from its own position of the stream).
 */
export const PLAIN_NUMERICS: Readonly<NumericsPolicy> = Object.freeze({
  autocast: "f32",
  lossScaling: false,
  clipping: false,
  dropout: false,
  deterministicReductions: true,
  tf32: false,
  exact: false,
});

const FIELDS = Object.keys(DEFAULT_NUMERICS) as (keyof NumericsPolicy)[];

/**
 * A complete, checked policy from a partial one (the rest from the
 * default). Throws a RangeError naming the field for an unknown field, a
 * value of the wrong kind, or a shortcut this build does not have.
 */
export function resolveNumericsPolicy(partial: Partial<NumericsPolicy> = {}): NumericsPolicy {
  for (const k of Object.keys(partial)) {
    if (!(FIELDS as string[]).includes(k)) {
      throw new RangeError(`numerics policy: ${k} is not a field (fields: ${FIELDS.join(", ")})`);
    }
  }
  const p = { ...DEFAULT_NUMERICS, ...partial };
  if (p.autocast !== "as-called" && p.autocast !== "f32") {
    throw new RangeError(
      `numerics policy: autocast must be "as-called" or "f32", got ${JSON.stringify(p.autocast)}`,
    );
  }
  if (
    p.exact !== false &&
    (typeof p.exact !== "number" || !Number.isInteger(p.exact) || p.exact < 1 ||
      (p.exact & (p.exact - 1)) !== 0)
  ) {
    throw new RangeError(
      `numerics policy: exact must be false or a power of two (the canonical shard count), got ${
        JSON.stringify(p.exact)
      }`,
    );
  }
  for (const k of FIELDS) {
    if (k !== "autocast" && k !== "exact" && typeof p[k] !== "boolean") {
      throw new RangeError(
        `numerics policy: ${k} must be true or false, got ${JSON.stringify(p[k])}`,
      );
    }
  }
  if (!p.deterministicReductions) {
    throw new RangeError(
      "numerics policy: deterministicReductions false is not available: every reduction of this " +
        "build adds in a fixed order",
    );
  }
  if (p.tf32) {
    throw new RangeError(
      "numerics policy: tf32 true is not available: no product of this build has a TF32 path",
    );
  }
  return p;
}

let current: NumericsPolicy = { ...DEFAULT_NUMERICS };
let currentSource = "the default";

/** The process's policy (the default unless setNumericsPolicy set another). */
export function numericsPolicy(): Readonly<NumericsPolicy> {
  return current;
}

/**
 * Sets the process's policy (the fields not given keep their defaults) and
 * returns the previous one. `source` says who set it, in the log lines of
 * what it turns off ("the Trainer's config", "dtrain check").
 *
 * @example
 * ```ts
 * setNumericsPolicy({ clipping: false }, "my ablation");
 * ```
 */
export function setNumericsPolicy(
  policy: Partial<NumericsPolicy>,
  source = "setNumericsPolicy",
): NumericsPolicy {
  const next = resolveNumericsPolicy(policy);
  const prev = current;
  current = next;
  currentSource = source;
  for (const l of policyListeners) l(next);
  return prev;
}

/** Who set the process's policy ("the default" until someone did). */
export function numericsPolicySource(): string {
  return currentSource;
}

const policyListeners: ((p: NumericsPolicy) => void)[] = [];

/** Calls `fn` with every policy set from now on (the run records report it to the launcher). */
export function onNumericsPolicySet(fn: (p: NumericsPolicy) => void): void {
  policyListeners.push(fn);
}

/** The fields in which `p` differs from the default, as "field value" texts. */
export function policyChanges(p: Readonly<NumericsPolicy>): string[] {
  return FIELDS.filter((k) => p[k] !== DEFAULT_NUMERICS[k]).map((k) => `${k} ${p[k]}`);
}

const overridden = new Map<string, string>();
let log: (line: string) => void = (line) => console.error(line);

/**
 * Called by a part that did less than its caller asked because the policy
 * turned it off ("clipping", "dropout", …). The first time per part in a
 * process, prints one line saying so and what the caller asked for; every
 * time, remembers the part.
 */
export function noteNumericsOverride(part: string, detail: string, policy?: NumericsPolicy): void {
  if (overridden.has(part)) return;
  const same = policy === undefined || FIELDS.every((k) => policy[k] === current[k]);
  const by = same ? currentSource : "the caller's policy";
  overridden.set(part, detail);
  log(`[dtrain] numerics policy (set by ${by}): ${detail}; said once per process`);
}

/** The parts the policy turned off so far in this process, sorted. */
export function numericsOverrides(): string[] {
  return [...overridden.keys()].sort();
}

/** Tests: where the once-per-process lines go, and a fresh memory of what was said. */
export function setNumericsLogForTest(fn: (line: string) => void): void {
  log = fn;
  overridden.clear();
}
