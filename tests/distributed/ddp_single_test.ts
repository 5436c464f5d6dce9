/**
 * DistributedDataParallel over a world of one (SingleProcessGroup): the
 * bound forward follows the module's forward, backward's options reach the
 * pass, and a step through ddp equals the same step without DDP bit for bit.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { DistributedDataParallel } from "../../distributed/ddp.ts";
import { SingleProcessGroup } from "../../distributed/backends/single_backend.ts";
import { Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { manualSeed } from "../../nn/init.ts";
import { AdamW } from "../../optim/adamw.ts";
import { clipGradNorm } from "../../optim/clip.ts";
import { backward } from "../../tensor/autograd.ts";
import { crossEntropy } from "../../tensor/ops/nn.ts";
import { fromArray, full, scope, type Tensor } from "../../tensor/tensor.ts";

buildNative({ quiet: true });

const toy = () => new Sequential(new Linear(8, 16), new ReLU(), new Linear(16, 2));

function batch(seed: number): [Tensor, Tensor] {
  const gen = manualSeed(seed);
  const x = fromArray(gen.normal_(new Float32Array(4 * 8), 0, 1), [4, 8]).keep();
  const y = fromArray(Int32Array.from({ length: 4 }, () => gen.randint(0, 2)), [4]).keep();
  return [x, y];
}

Deno.test("DDP over one rank: steps through ddp equal plain steps bit for bit", () => {
  manualSeed(0);
  const plain = toy();
  manualSeed(0);
  const wrapped = toy();
  const ddp = new DistributedDataParallel(wrapped, new SingleProcessGroup(10_000, "cpu"));
  const o1 = new AdamW(plain.parameters()), o2 = new AdamW(ddp.parameters());
  for (let s = 0; s < 5; s++) {
    const [x, y] = batch(s + 1);
    const l1 = scope(() => {
      o1.zeroGrad();
      const loss = crossEntropy(plain.forward(x), y);
      backward(loss);
      clipGradNorm(plain.parameters(), 0.5);
      o1.step();
      return loss.item();
    });
    const l2 = scope(() => {
      o2.zeroGrad();
      const loss = crossEntropy(ddp.forward(x), y);
      ddp.backward(loss); // returns with the gradients synced
      clipGradNorm(ddp.parameters(), 0.5);
      o2.step();
      return loss.item();
    });
    assert.equal(l2, l1, `step ${s}: loss`);
    x.dispose();
    y.dispose();
  }
  const a = plain.parameters(), b = ddp.parameters();
  a.forEach((p, i) => assert.deepEqual(b[i]!.toArray(), p.toArray(), `parameter ${i}`));
  ddp.close();
});

Deno.test("ddp.forward follows a forward replaced on the module; backward's options reach the pass", () => {
  manualSeed(0);
  const model = toy();
  const ddp = new DistributedDataParallel(model, new SingleProcessGroup(10_000, "cpu"));
  const [x, y] = batch(3);
  const f1 = ddp.forward;
  assert.equal(ddp.forward, f1, "the same bound function while the module's forward is the same");
  const original = model.forward;
  let calls = 0;
  model.forward = (t: Tensor) => (calls++, original.call(model, t));
  scope(() => ddp.forward(x));
  assert.equal(calls, 1, "ddp.forward runs the replaced forward");
  model.forward = original;
  // a gradient of 2 doubles every parameter gradient of the default 1 (exactly: a power of two)
  const grads = (gradient?: Tensor) =>
    scope(() => {
      for (const p of ddp.parameters()) p.grad?.fill(0);
      const loss = crossEntropy(ddp.forward(x), y);
      // with a gradient, the deferred form: both options reach their place
      ddp.backward(loss, gradient ? { gradient, deferGradSync: true } : {});
      ddp.finishGradSync();
      return ddp.parameters().map((p) => [...(p.grad!.toArray() as Float32Array)]);
    });
  const one = grads();
  const two = scope(() => grads(full([], 2)));
  two.forEach((g, i) => assert.deepEqual(g, one[i]!.map((v) => 2 * v), `parameter ${i}`));
  x.dispose();
  y.dispose();
  ddp.close();
});
