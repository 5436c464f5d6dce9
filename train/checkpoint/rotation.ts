/**
 * Which old checkpoints a rotation deletes: everything except the newest
 * `keepLast`, every `keepEvery`-th step, and the checkpoint just saved. A pure
 * function, so the policy is tested apart from the file system.
 */

/** How many checkpoints to keep. */
export interface RotationPolicy {
  /** Keep the newest this many (by step); at least 1. */
  keepLast: number;
  /** Also keep forever every checkpoint whose step is a multiple of this (step 0 included). */
  keepEvery?: number;
}

/** Throws unless the policy's counts are positive integers. */
export function checkRotationPolicy(policy: RotationPolicy): void {
  if (!Number.isSafeInteger(policy.keepLast) || policy.keepLast < 1) {
    throw new RangeError(`keepLast must be an integer >= 1, got ${policy.keepLast}`);
  }
  const every = policy.keepEvery;
  if (every !== undefined && (!Number.isSafeInteger(every) || every < 1)) {
    throw new RangeError(`keepEvery must be an integer >= 1 (or left out), got ${every}`);
  }
}

/**
 * The steps to delete among the complete checkpoints `steps`, right after
 * `justSaved` was saved. The one just saved is always kept, even when
 * newer steps exist (a run resumed from an older checkpoint).
 * @example
 * stepsToDelete([10, 20, 30, 40], 40, { keepLast: 2, keepEvery: 20 }) // [10]
 */
export function stepsToDelete(
  steps: readonly number[],
  justSaved: number,
  policy: RotationPolicy,
): number[] {
  checkRotationPolicy(policy);
  const newestFirst = [...new Set(steps)].sort((a, b) => b - a);
  const keep = new Set(newestFirst.slice(0, policy.keepLast));
  keep.add(justSaved);
  const every = policy.keepEvery;
  return newestFirst.filter((s) => !keep.has(s) && (every === undefined || s % every !== 0))
    .reverse();
}
