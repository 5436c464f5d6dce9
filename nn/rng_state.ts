/**
 * A process's random state, as torch.get_rng_state() / set_rng_state() hold
 * it, plus what dtrain's counter-based dropout adds: the default generator
 * (parameter init, user draws) and each Dropout layer's mask position. Saved
 * with a checkpoint and restored on resume, a loop with dropout continues
 * bit for bit. Plain JSON, so it fits a checkpoint's state.json.
 */
import type { Module } from "./module.ts";
import { Dropout } from "./layers.ts";
import { getDefaultGenerator } from "./init.ts";
import type { TorchGeneratorState } from "../random/torch_generator.ts";

/** One process's random state (one rank's). */
export interface RngState {
  /** the default generator (manualSeed, getDefaultGenerator) */
  generator: TorchGeneratorState;
  /** each Dropout layer's mask offset in the model's module order, as decimal strings */
  dropoutOffsets: string[];
}

function dropouts(m: Module): Dropout[] {
  const out: Dropout[] = [];
  const walk = (x: Module) => {
    if (x instanceof Dropout) out.push(x);
    for (const [, c] of x.children()) walk(c);
  };
  walk(m);
  return out;
}

/**
 * This process's random state: the default generator and, when a model is
 * given, the mask position of each of its Dropout layers.
 *
 * @example
 * ```ts
 * checkpoints.save({ step, files: [tensorFile("model", model.stateDict()), optimizerFile(opt)],
 *   state: { step, loader: loader.state(), rng: getRngState(model) } });
 * ```
 */
export function getRngState(model?: Module): RngState {
  return {
    generator: getDefaultGenerator().getState(),
    dropoutOffsets: model ? dropouts(model).map((d) => d.offset.toString()) : [],
  };
}

/**
 * Restores a state from getRngState() on a model of the same structure (the
 * same Dropout layers in the same order), so the next draws and dropout
 * masks are the ones the saved run would have made.
 *
 * @example
 * ```ts
 * const ck = checkpoints.loadLatest();
 * if (ck) setRngState(ck.state.rng as RngState, model);
 * ```
 */
export function setRngState(state: RngState, model?: Module): void {
  if (typeof state !== "object" || state === null || !Array.isArray(state.dropoutOffsets)) {
    throw new TypeError(
      `setRngState: expected { generator, dropoutOffsets } from getRngState(), got ${state}`,
    );
  }
  const ds = model ? dropouts(model) : [];
  if (ds.length !== state.dropoutOffsets.length) {
    throw new Error(
      `setRngState: the state holds ${state.dropoutOffsets.length} dropout layers, ` +
        `the model ${model ? ds.length : "(none given)"}`,
    );
  }
  const offsets = state.dropoutOffsets.map((o, i) => {
    if (typeof o !== "string" || !/^[0-9]+$/.test(o)) {
      throw new RangeError(`setRngState: dropout offset ${i} is ${o}, not a decimal string`);
    }
    return BigInt(o);
  });
  getDefaultGenerator().setState(state.generator);
  ds.forEach((d, i) => (d.offset = offsets[i]!));
}
