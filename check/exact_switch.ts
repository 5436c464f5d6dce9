/**
 * How `dtrain check --exact` switches exact mode on in a script that does
 * not ask for it: the process's numerics policy gets `exact: S` canonical
 * shards (a DistributedDataParallel built without its own `exact` option
 * reads it) and every Trainer's config gets `exact: S` too (a Trainer sets
 * its config's policy when it starts). A shard count the script chose
 * itself is kept. The rest of the policy — autocast, loss scaling,
 * clipping, dropout — stays as the script asks: exact mode must hold for
 * the numerics the run uses.
 */
import { DEFAULT_EXACT_SHARDS } from "../distributed/exact.ts";
import {
  numericsPolicy,
  onNumericsPolicySet,
  setNumericsPolicy,
} from "../tensor/numerics_policy.ts";
import type { TrainerConfigHook } from "../train/engine.ts";

/**
 * The canonical shard count the check asks for when the script sets none:
 * exact mode's default, or the largest world size compared when that is
 * larger (every world size compared must divide it).
 */
export function checkShardCount(largestWorld: number): number {
  return Math.max(DEFAULT_EXACT_SHARDS, largestWorld);
}

/**
 * Sets exact mode with `shards` canonical shards in the process's policy
 * and, through `addConfigHook`, in every Trainer's config, unless the script
 * set a shard count of its own.
 */
export function switchExactModeOn(
  shards: number,
  addConfigHook: (hook: TrainerConfigHook) => unknown,
): void {
  const policy = numericsPolicy();
  if (policy.exact === false) {
    setNumericsPolicy({ ...policy, exact: shards }, "dtrain check --exact");
  }
  // A script that sets a policy of its own (any other field) keeps exact mode: the check's switch
  // is the one thing it may not turn off.
  onNumericsPolicySet((p) => {
    if (p.exact === false) setNumericsPolicy({ ...p, exact: shards }, "dtrain check --exact");
  });
  addConfigHook((cfg) => {
    const own = typeof cfg.exact === "number"
      ? cfg.exact
      : cfg.numerics.exact !== false
      ? cfg.numerics.exact
      : null;
    cfg.numerics = { ...cfg.numerics, exact: own ?? shards };
    cfg.exact = own ?? shards;
  });
}
