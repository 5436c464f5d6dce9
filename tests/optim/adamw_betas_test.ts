/**
 * AdamW takes PyTorch's `betas: [b1, b2]`; the old `beta1`/`beta2` spelling
 * still works, warns once per process, and gives the same optimizer.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { AdamW } from "../../optim/adamw.ts";
import { fromArray, type Tensor } from "../../tensor/tensor.ts";

buildNative({ quiet: true });

const param = (): Tensor => {
  const t = fromArray(new Float32Array([1, -2, 3]), [3]).keep();
  t.requiresGrad = true;
  return t;
};

/** Runs `fn` with console.warn captured; returns the warnings. */
function warnings(fn: () => void): string[] {
  const seen: string[] = [];
  const original = console.warn;
  console.warn = (...a: unknown[]) => seen.push(a.join(" "));
  try {
    fn();
  } finally {
    console.warn = original;
  }
  return seen;
}

Deno.test("AdamW's betas reach the group, the kernel's state and the state dict as PyTorch writes them", () => {
  const p = param();
  const opt = new AdamW([p], { lr: 0.1, betas: [0.8, 0.95] });
  assert.deepEqual(opt.groups[0]!.hyper.betas, [0.8, 0.95]);
  assert.deepEqual(opt.stateDict().paramGroups[0]!.betas, [0.8, 0.95]);
  const def = new AdamW([param()]);
  assert.deepEqual(def.groups[0]!.hyper.betas, [0.9, 0.999]);
});

Deno.test("the deprecated beta1/beta2 give the same betas and warn once per process", () => {
  let a!: AdamW, b!: AdamW, c!: AdamW;
  const first = warnings(() => {
    a = new AdamW([param()], { beta1: 0.7, beta2: 0.9 });
    b = new AdamW([{ params: [param()], beta2: 0.5 }], { betas: [0.6, 0.99] });
  });
  const later = warnings(() => {
    c = new AdamW([param()], { beta1: 0.85 });
  });
  assert.deepEqual(a.groups[0]!.hyper.betas, [0.7, 0.9]);
  assert.deepEqual(
    b.groups[0]!.hyper.betas,
    [0.6, 0.5],
    "a group's beta2 keeps the optimizer's beta1",
  );
  assert.deepEqual(c.groups[0]!.hyper.betas, [0.85, 0.999]);
  assert.equal(first.length, 1);
  assert.match(first[0]!, /beta1\/beta2 options are deprecated; write betas: \[beta1, beta2\]/);
  assert.deepEqual(later, []);
});

Deno.test("bad betas are errors naming what was wrong", () => {
  assert.throws(
    () => new AdamW([param()], { betas: [1, 0.9] }),
    /invalid beta parameter at index 0: 1/,
  );
  assert.throws(
    () => new AdamW([param()], { betas: [0.9] as unknown as [number, number] }),
    /betas must be two numbers/,
  );
  assert.throws(
    () => new AdamW([param()], { betas: [0.9, 0.99], beta1: 0.5 }),
    /sets both betas and the deprecated beta1\/beta2/,
  );
});

Deno.test("a saved state's betas are restored into betas", () => {
  const src = new AdamW([param()], { betas: [0.5, 0.6] });
  const dst = new AdamW([param()]);
  dst.loadStateDict(src.stateDict());
  assert.deepEqual(dst.groups[0]!.hyper.betas, [0.5, 0.6]);
});
