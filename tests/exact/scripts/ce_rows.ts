/**
 * Cross-entropy's gradients (fused kernel, mean) of the same rows at two
 * places in a batch: every row alone (its own aligned batch of one) and all
 * rows together (row r at byte r·V·4, which is not 16-byte aligned for most
 * r when V is not a multiple of 4). Prints whether every row got the same
 * bits both ways, for V = 3, 6 and 8; the device is the first argument.
 * Exact mode needs it: the loss runs over a rank's whole batch, so a row's
 * place in the batch changes with the world size.
 */
import { useDevice } from "../../../tensor/device_choice.ts";
import { fromArray, scope } from "../../../tensor/tensor.ts";
import { crossEntropy } from "../../../nn/losses.ts";
import { backward } from "../../../tensor/autograd.ts";

useDevice((Deno.args[0] ?? "cpu") as "cpu");
const ROWS = 32; // a power of two: a row's gradient alone is exactly ROWS times its share of the mean
const out: Record<string, number> = {};
for (const V of [3, 6, 8]) {
  const logits = Float32Array.from({ length: ROWS * V }, (_, i) => Math.sin(i * 12.9898) * 3);
  const targets = Int32Array.from({ length: ROWS }, (_, r) => (r * 7) % V);
  const run = (from: number, rows: number) =>
    scope(() => {
      const l = fromArray(logits.slice(from * V, (from + rows) * V), [rows, V]);
      l.requiresGrad = true;
      // the mean: the fused kernel (its gradient is recomputed from each row's log-sum-exp)
      backward(crossEntropy(l, fromArray(targets.slice(from, from + rows), [rows])));
      return [...(l.grad!.toArray() as Float32Array)];
    });
  const whole = run(0, ROWS);
  let differing = 0;
  for (let r = 0; r < ROWS; r++) {
    const alone = run(r, 1);
    const same = alone.every((g, j) => g === whole[r * V + j]! * ROWS);
    if (!same) differing++;
  }
  out[`V${V}`] = differing;
}
console.log(JSON.stringify(out));
