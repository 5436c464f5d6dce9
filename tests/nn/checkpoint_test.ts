/**
 * Activation checkpointing (nn/checkpoint.ts): GPT-mini with dropout and
 * every block checkpointed gives the unchecked model's loss and gradients
 * bit for bit over two steps (dropout masks replayed, and the masks of the
 * next step the same too), holds fewer live bytes at the end of its forward,
 * feeds an input's gradient back, and runs under DDP's checks (every
 * parameter reported to the outer backward pass).
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { GPT, type GPTConfig } from "../../nn/gpt.ts";
import { checkpoint } from "../../nn/checkpoint.ts";
import { Linear } from "../../nn/layers.ts";
import { manualSeed } from "../../nn/init.ts";
import { backward } from "../../tensor/autograd.ts";
import { memoryStats } from "../../tensor/allocator.ts";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { relu } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { DistributedDataParallel } from "../../distributed/ddp.ts";
import { SingleProcessGroup } from "../../distributed/backends/single_backend.ts";

buildNative({ quiet: true });

const MINI: GPTConfig = {
  vocabSize: 65,
  blockSize: 32,
  nLayer: 3,
  nHead: 4,
  nEmbd: 64,
  dropout: 0.2,
};

function tokens(seed: number, B = 4, T = 32): [Tensor, Tensor] {
  const gen = manualSeed(seed);
  const idx = Int32Array.from({ length: B * (T + 1) }, () => gen.randint(0, 65));
  const x = Int32Array.from(
    { length: B * T },
    (_, i) => idx[Math.floor(i / T) * (T + 1) + (i % T)]!,
  );
  const y = Int32Array.from(
    { length: B * T },
    (_, i) => idx[Math.floor(i / T) * (T + 1) + (i % T) + 1]!,
  );
  return [fromArray(x, [B, T]).keep(), fromArray(y, [B, T]).keep()];
}

function grads(m: GPT): Uint8Array[] {
  return m.parameters().map((p) => p.grad!.toBytes());
}

Deno.test("GPT-mini with dropout: every block checkpointed gives the unchecked gradients bit for bit, two steps running", () => {
  manualSeed(3);
  const plain = new GPT(MINI);
  manualSeed(3);
  const checked = new GPT({ ...MINI, checkpointBlocks: true });
  for (let step = 0; step < 2; step++) {
    const [x, y] = tokens(10 + step);
    const run = (m: GPT) =>
      scope(() => {
        for (const p of m.parameters()) p.grad?.fill(0);
        const loss = m.loss(x, y);
        backward(loss);
        return loss.item();
      });
    const a = run(plain), b = run(checked);
    assert.equal(b, a, `step ${step}: loss`);
    const ga = grads(plain), gb = grads(checked);
    ga.forEach((g, i) => assert.deepEqual(gb[i], g, `step ${step}: gradient of parameter ${i}`));
    x.dispose();
    y.dispose();
  }
});

Deno.test("a checkpointed GPT holds fewer live bytes after its forward", () => {
  manualSeed(3);
  const [x, y] = tokens(5, 8, 32);
  const liveAfterForward = (cfg: GPTConfig) =>
    scope(() => {
      const m = new GPT(cfg);
      const before = memoryStats().liveBytes;
      const loss = m.loss(x, y);
      const held = memoryStats().liveBytes - before;
      backward(loss);
      m.dispose();
      return held;
    });
  const plain = liveAfterForward({ ...MINI, nLayer: 4 });
  const checked = liveAfterForward({ ...MINI, nLayer: 4, checkpointBlocks: true });
  assert.ok(checked < plain * 0.6, `checkpointed ${checked} bytes vs ${plain}`);
});

Deno.test("checkpoint: an input's gradient and the parameters' equal the unchecked function's", () => {
  manualSeed(1);
  const lin = new Linear(6, 5);
  const f = (x: Tensor) => relu(lin.forward(x));
  const run = (checked: boolean) =>
    scope(() => {
      const x = fromArray(new Float32Array(12).map((_, i) => i / 7 - 0.8), [2, 6]);
      x.requiresGrad = true;
      for (const p of lin.parameters()) p.grad?.fill(0);
      backward(sum(checked ? checkpoint(f, x) : f(x)));
      return [x.grad!.toBytes(), ...lin.parameters().map((p) => p.grad!.toBytes())];
    });
  assert.deepEqual(run(true), run(false));
  assert.throws(
    () => scope(() => checkpoint((x) => x, fromArray(new Float32Array(2), [2]))),
    /fn returned one of its inputs unchanged/,
  );
});

Deno.test("a checkpointed GPT under DDP: the outer pass reports every parameter (no unused-parameter error)", () => {
  manualSeed(3);
  const m = new GPT({ ...MINI, checkpointBlocks: true });
  const ddp = new DistributedDataParallel(m, new SingleProcessGroup(10_000, "cpu"));
  const [x, y] = tokens(7);
  scope(() => ddp.backward(m.loss(x, y)));
  for (const [n, p] of m.namedParameters()) assert.ok(p.grad, `${n} has a gradient`);
  ddp.close();
  x.dispose();
  y.dispose();
});
