/**
 * How `dtrain check --exact` switches exact mode on in a script that does
 * not ask for it: the process's numerics policy gets `exact: true` (DDP reads
 * it when its own option is not given) and every Trainer's config gets
 * `exact: true` too (a Trainer sets its config's policy when it starts).
 * The rest of the policy — autocast, loss scaling, clipping, dropout — stays
 * as the script asks: exact mode must hold for the numerics the run uses.
 */
import {
  DEFAULT_NUMERICS,
  type NumericsPolicy,
  numericsPolicy,
  setNumericsPolicy,
} from "../tensor/numerics_policy.ts";
import type { TrainerConfigHook } from "../train/engine.ts";

/** Whether this build's numerics policy has the `exact` switch. */
export function hasExactMode(): boolean {
  return "exact" in DEFAULT_NUMERICS;
}

/**
 * Sets exact mode in the process's policy and, through `addConfigHook`, in
 * every Trainer's config. Throws when this build has no exact mode.
 */
export function switchExactModeOn(addConfigHook: (hook: TrainerConfigHook) => unknown): void {
  if (!hasExactMode()) {
    throw new Error(
      "dtrain check --exact: this build of dtrain has no exact mode (the numerics policy has no " +
        "`exact` field)",
    );
  }
  const exact = { exact: true } as unknown as Partial<NumericsPolicy>;
  setNumericsPolicy({ ...numericsPolicy(), ...exact }, "dtrain check --exact");
  addConfigHook((cfg) => {
    cfg.numerics = { ...cfg.numerics, ...exact };
    (cfg as unknown as Record<string, unknown>).exact = true;
  });
}
