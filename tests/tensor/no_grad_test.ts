/**
 * noGrad as `with torch.no_grad():` — for a synchronous function, and for an
 * async one across every await (the `for await` over a DataLoader that a
 * port of PyTorch's evaluation loop writes), without turning recording off
 * for code that runs meanwhile outside it.
 */
import assert from "node:assert/strict";
import { isGradEnabled, noGrad } from "../../tensor/autograd.ts";
import { fromArray, type Tensor } from "../../tensor/tensor.ts";
import { mul } from "../../tensor/ops/elementwise.ts";
import { TensorDataset } from "../../data/dataset.ts";
import { DataLoader } from "../../data/dataloader.ts";

function leaf(): Tensor {
  const w = fromArray(new Float32Array([1, 2, 3, 4]), [2, 2]);
  w.requiresGrad = true;
  return w;
}

const tick = () => new Promise<void>((r) => setTimeout(r, 1));

Deno.test("noGrad(fn) turns recording off inside fn and back on after, also when fn throws", () => {
  const w = leaf();
  assert.equal(noGrad(() => mul(w, w).requiresGrad), false);
  assert.equal(mul(w, w).requiresGrad, true);
  assert.throws(() =>
    noGrad(() => {
      throw new Error("boom");
    }), /boom/);
  assert.equal(isGradEnabled(), true);
  assert.equal(noGrad(() => noGrad(() => 7)), 7);
  assert.equal(isGradEnabled(), true);
});

Deno.test("await noGrad(async fn) keeps recording off after every await of fn", async () => {
  const w = leaf();
  const seen: boolean[] = [];
  const out = await noGrad(async () => {
    seen.push(mul(w, w).requiresGrad);
    await tick();
    seen.push(mul(w, w).requiresGrad);
    await Promise.resolve();
    seen.push(isGradEnabled());
    return 42;
  });
  assert.equal(out, 42);
  assert.deepEqual(seen, [false, false, false]);
  assert.equal(mul(w, w).requiresGrad, true);
  assert.equal(isGradEnabled(), true);
});

Deno.test("noGrad over `for await` of a DataLoader records nothing in any batch", async () => {
  const w = leaf();
  const data = new TensorDataset({ data: new Float32Array(40).fill(0.5), sampleShape: [2] });
  const loader = new DataLoader(data, { batchSize: 4, prefetch: 2 });
  const recorded: boolean[] = [];
  await noGrad(async () => {
    for await (const { tensors: [x] } of loader) {
      const y = mul(x!, x!);
      recorded.push(y.requiresGrad || mul(w, w).requiresGrad);
      y.dispose();
      x!.dispose();
    }
  });
  assert.equal(recorded.length, 5);
  assert.deepEqual(recorded, [false, false, false, false, false]);
  assert.equal(mul(w, w).requiresGrad, true);
});

Deno.test("code running outside an async noGrad while it awaits keeps recording", async () => {
  const w = leaf();
  const inside: boolean[] = [];
  const outside: boolean[] = [];
  const evaluation = noGrad(async () => {
    for (let i = 0; i < 5; i++) {
      await tick();
      inside.push(mul(w, w).requiresGrad);
    }
  });
  const training = (async () => {
    for (let i = 0; i < 5; i++) {
      await tick();
      outside.push(mul(w, w).requiresGrad);
    }
  })();
  await Promise.all([evaluation, training]);
  assert.deepEqual(inside, [false, false, false, false, false]);
  assert.deepEqual(outside, [true, true, true, true, true]);
});

Deno.test("a rejected async noGrad rejects with fn's error and leaves recording on", async () => {
  const w = leaf();
  await assert.rejects(
    noGrad(async () => {
      await tick();
      throw new Error("eval failed");
    }),
    /eval failed/,
  );
  assert.equal(mul(w, w).requiresGrad, true);
});
