/**
 * The numerics policy: checked on the way in, applied by autocast, the
 * GradScaler, clipGradNorm and Dropout — from an explicit argument or the
 * process's policy — and every part it turns off said once in the log.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { fromArray, type Tensor } from "../../tensor/tensor.ts";
import { clipGradNorm } from "../../optim/clip.ts";
import { autocast, autocastDtype } from "../../amp/autocast.ts";
import { GradScaler } from "../../amp/grad_scaler.ts";
import { Dropout } from "../../nn/layers.ts";
import {
  DEFAULT_NUMERICS,
  numericsOverrides,
  numericsPolicy,
  PLAIN_NUMERICS,
  policyChanges,
  resolveNumericsPolicy,
  setNumericsLogForTest,
  setNumericsPolicy,
} from "../../tensor/numerics_policy.ts";

buildNative({ quiet: true });

/** Runs fn with a fresh log memory and the default policy; returns the lines it printed. */
function logged(fn: () => void): string[] {
  const lines: string[] = [];
  setNumericsLogForTest((l) => lines.push(l));
  const before = setNumericsPolicy(DEFAULT_NUMERICS, "the test");
  try {
    fn();
  } finally {
    setNumericsPolicy(before);
    setNumericsLogForTest((l) => console.error(l));
  }
  return lines;
}

/** A parameter whose gradient has L2 norm 5 (3, 4). */
function param(): Tensor {
  const p = fromArray(new Float32Array(2)).keep();
  p.grad = fromArray(new Float32Array([3, 4])).keep();
  return p;
}

Deno.test("resolveNumericsPolicy fills the defaults and refuses unknown fields, wrong kinds and shortcuts this build lacks", () => {
  assert.deepEqual(resolveNumericsPolicy(), DEFAULT_NUMERICS);
  assert.deepEqual(resolveNumericsPolicy({ clipping: false }), {
    ...DEFAULT_NUMERICS,
    clipping: false,
  });
  assert.throws(
    () => resolveNumericsPolicy({ clip: false } as never),
    /numerics policy: clip is not a field \(fields: autocast, lossScaling, clipping/,
  );
  assert.throws(
    () => resolveNumericsPolicy({ autocast: "bf16" } as never),
    /autocast must be "as-called" or "f32", got "bf16"/,
  );
  assert.throws(
    () => resolveNumericsPolicy({ dropout: "no" } as never),
    /dropout must be true or false/,
  );
  assert.throws(() => resolveNumericsPolicy({ tf32: true }), /tf32 true is not available/);
  assert.throws(
    () => resolveNumericsPolicy({ deterministicReductions: false }),
    /deterministicReductions false is not available/,
  );
  assert.deepEqual(policyChanges(PLAIN_NUMERICS), [
    "autocast f32",
    "lossScaling false",
    "clipping false",
    "dropout false",
  ]);
});

Deno.test("setNumericsPolicy returns the previous policy; a refused one leaves the current in place", () => {
  logged(() => {
    const prev = setNumericsPolicy({ dropout: false }, "a");
    assert.deepEqual(prev, DEFAULT_NUMERICS);
    assert.throws(() => setNumericsPolicy({ tf32: true }, "b"));
    assert.deepEqual(numericsPolicy(), { ...DEFAULT_NUMERICS, dropout: false });
  });
});

Deno.test("clipping off: clipGradNorm measures without clipping and says so once; on, it clips", () => {
  const lines = logged(() => {
    const p = param();
    assert.equal(clipGradNorm([p], 1), 5);
    assert.deepEqual([...p.grad!.toArray() as Float32Array].map((v) => v.toFixed(3)), [
      "0.600",
      "0.800",
    ]);
    setNumericsPolicy({ clipping: false }, "the ablation");
    for (let i = 0; i < 3; i++) {
      const q = param();
      assert.equal(clipGradNorm([q], 1), 5);
      assert.deepEqual([...q.grad!.toArray()], [3, 4], "not clipped");
    }
    assert.deepEqual(numericsOverrides(), ["clipping"]);
  });
  assert.deepEqual(lines, [
    "[dtrain] numerics policy (set by the ablation): clipping is off: clipGradNorm(maxNorm 1) " +
    "measures the norm and does not clip; said once per process",
  ]);
});

Deno.test("a policy passed to clipGradNorm, autocast and GradScaler wins over the process's", () => {
  const lines = logged(() => {
    const plain = resolveNumericsPolicy(PLAIN_NUMERICS);
    const p = param();
    assert.equal(clipGradNorm([p], 1, { numerics: plain }), 5);
    assert.deepEqual([...p.grad!.toArray()], [3, 4]);
    assert.equal(autocast("bf16", () => autocastDtype()), "bf16", "the process's policy allows it");
    assert.equal(autocast("bf16", () => autocastDtype(), plain), null);
    assert.equal(new GradScaler({}, () => {}).scaleValue, 65536);
    const off = new GradScaler({}, () => {}, plain);
    assert.equal(off.opts.enabled, false);
    assert.equal(off.scaleValue, 1);
    // The caller's policy is not the process's: the process's clipping is untouched.
    const q = param();
    clipGradNorm([q], 1);
    assert.deepEqual([...q.grad!.toArray() as Float32Array].map((v) => v.toFixed(3)), [
      "0.600",
      "0.800",
    ]);
  });
  assert.equal(lines.length, 3, lines.join("\n"));
  assert.ok(lines.every((l) => l.includes("set by the caller's policy")));
  assert.match(lines[1]!, /autocast is f32: autocast\("bf16"\) regions compute in f32/);
  assert.match(lines[2]!, /loss scaling is off: a GradScaler scales by 1 and skips no step/);
});

Deno.test("dropout off: a Dropout layer in training mode passes its input through, said once", () => {
  const lines = logged(() => {
    const d = new Dropout(0.5, 7n);
    const x = fromArray(new Float32Array(64).fill(1));
    assert.ok((d.forward(x).toArray() as Float32Array).some((v) => v === 0), "drops when allowed");
    setNumericsPolicy(PLAIN_NUMERICS, "dtrain check");
    for (let i = 0; i < 2; i++) assert.equal(d.forward(x), x);
  });
  assert.deepEqual(lines, [
    "[dtrain] numerics policy (set by dtrain check): dropout is off: Dropout layers pass their " +
    "input through; said once per process",
  ]);
});
