/**
 * DDP behaviours under the launcher, chosen by CASE:
 * - "mismatch": rank 1 builds a wider hidden layer → construction must fail naming the difference;
 * - "unused": a parameter gets no gradient → backward must fail naming it;
 * - "broadcast": ranks init with different seeds → after DDP construction all hold rank 0's weights,
 *   and after a step with different data per rank the weights are still identical.
 */
import {
  AdamW,
  backward,
  crossEntropy,
  DistributedDataParallel,
  fromArray,
  initProcessGroup,
  Linear,
  manualSeed,
  ReLU,
  scope,
  Sequential,
} from "dtrain";
import { createHash } from "node:crypto";

const pg = initProcessGroup();
const mode = Deno.env.get("CASE");
manualSeed(pg.rank + 1);
const hidden = mode === "mismatch" && pg.rank === 1 ? 16 : 8;
const model = new Sequential(new Linear(4, hidden), new ReLU(), new Linear(hidden, 2));
const extra = new Linear(2, 2);
if (mode === "unused") {
  (model as unknown as { registerModule(n: string, m: unknown): void }).registerModule("3", extra);
}
const ddp = new DistributedDataParallel(model, pg);
const digest = () => {
  const h = createHash("sha256");
  for (const p of model.parameters()) h.update(p.toBytes());
  return h.digest("hex");
};
const atStart = digest();
const opt = new AdamW(ddp.parameters());
scope(() => {
  const x = fromArray(new Float32Array(12).map((_, i) => (i + 1) * (pg.rank + 1) * 0.1), [3, 4]);
  const y = fromArray(new Int32Array([0, 1, pg.rank % 2]), [3]);
  backward(crossEntropy(ddp.forward(x), y));
  opt.step();
});
console.log(JSON.stringify({ rank: pg.rank, atStart, afterStep: digest() }));
pg.close();
