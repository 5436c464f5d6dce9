/** The SHA-256 of a model's weights and an optimizer's state, tensor by tensor in name order. */
import { createHash } from "node:crypto";
import type { Module, Optimizer, Tensor } from "dtrain";

/** One digest of every weight and optimizer-state tensor (names included, so a swap shows). */
export function stateDigest(model: Module, opt: Optimizer<{ lr: number }>): string {
  const h = createHash("sha256");
  const add = (prefix: string, entries: Iterable<[string, Tensor]>) => {
    for (const [n, t] of [...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      h.update(prefix + n);
      h.update(t.toBytes());
    }
  };
  add("model.", model.stateDict());
  add("optimizer.", opt.stateDict().tensors);
  return h.digest("hex");
}
