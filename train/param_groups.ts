/**
 * The optimizer's parameter groups from the config (optim.groups): each
 * rule picks parameters by dotted name and number of dims and sets their
 * weight decay or learning rate; a parameter joins the first rule it
 * matches, and the ones no rule matches form a last group with the optim
 * section's settings. nanoGPT's rule is `[{ maxDims: 1, weightDecay: 0 }]`.
 */
import type { Module } from "../nn/module.ts";
import type { Tensor } from "../tensor/tensor.ts";
import type { TrainConfig } from "./config.ts";

/** One group: its parameters (with names, for messages) and what it overrides. */
export interface ConfigGroup {
  names: string[];
  params: Tensor[];
  lr?: number;
  weightDecay?: number;
}

type Rule = TrainConfig["optim"]["groups"][number];

function matches(rule: Rule, name: string, p: Tensor): boolean {
  if (rule.names !== null && !new RegExp(rule.names).test(name)) return false;
  if (rule.minDims !== null && p.shape.length < rule.minDims) return false;
  if (rule.maxDims !== null && p.shape.length > rule.maxDims) return false;
  return true;
}

/**
 * The groups of `model`'s parameters under `rules`, in rule order, then the
 * unmatched rest; groups without parameters are left out. A rule that
 * matches nothing is an error naming it (a typo in a name pattern would
 * otherwise silently train with the wrong settings).
 *
 * @example
 * ```ts
 * paramGroupsFromConfig(model, [{ names: null, minDims: null, maxDims: 1, lr: null, weightDecay: 0 }]);
 * // → [{ names: ["0.bias", "2.bias"], params: [...], weightDecay: 0 }, { names: ["0.weight", "2.weight"], params: [...] }]
 * ```
 */
export function paramGroupsFromConfig(model: Module, rules: readonly Rule[]): ConfigGroup[] {
  const groups: ConfigGroup[] = rules.map((r) => ({
    names: [],
    params: [],
    ...(r.lr !== null ? { lr: r.lr } : {}),
    ...(r.weightDecay !== null ? { weightDecay: r.weightDecay } : {}),
  }));
  const rest: ConfigGroup = { names: [], params: [] };
  for (const [name, p] of model.namedParameters()) {
    const i = rules.findIndex((r) => matches(r, name, p));
    const g = i < 0 ? rest : groups[i]!;
    g.names.push(name);
    g.params.push(p);
  }
  const empty = groups.findIndex((g) => g.params.length === 0);
  if (empty >= 0) {
    throw new Error(
      `optim.groups[${empty}] (${
        JSON.stringify(rules[empty])
      }) matches no parameter of the model ` +
        `(its parameters: ${
          model.namedParameters().map(([n, p]) => `${n} [${p.shape}]`).join(", ")
        })`,
    );
  }
  return rest.params.length > 0 ? [...groups, rest] : groups;
}
