/**
 * The checks of autocast's weight cast cache (tensor/weight_cast.ts), run by
 * tests/amp/weight_cast_test.ts on the CPU in its own process and, as a
 * script (`weight_cast_checks.ts <device>`), on another device in a process
 * of its own: each parameter is cast once, not once per use; a cached copy is
 * never used after the parameter changed (copyFromArray, fill, copyFrom,
 * loadStateDict, an optimizer step, a write through a view, markModified
 * after a raw write), each checked against a fresh cast of the same values;
 * gradients reach the f32 parameter, also when the copy was dropped between
 * forward and backward.
 */
import assert from "node:assert/strict";
import { useDevice } from "../../../tensor/device_choice.ts";
import { autocast } from "../../../amp/autocast.ts";
import { backend } from "../../../tensor/backend.ts";
import { fromArray, scope, type Tensor } from "../../../tensor/tensor.ts";
import { linear, matmul } from "../../../tensor/ops/linalg.ts";
import { sum } from "../../../tensor/ops/reduce.ts";
import { backward } from "../../../tensor/autograd.ts";
import { dropWeightCasts } from "../../../tensor/weight_cast.ts";
import { Linear } from "../../../nn/layers.ts";
import { manualSeed } from "../../../nn/init.ts";
import { SGD } from "../../../optim/sgd.ts";

/** How often fn calls dt_cast (the wrapper is swapped for a counting one while it runs). */
function castsDuring<T>(fn: () => T): [T, number] {
  const call = backend().call as unknown as Record<string, (...a: unknown[]) => void>;
  const saved = call.dt_cast!;
  let n = 0;
  call.dt_cast = (...a: unknown[]) => {
    n++;
    return saved(...a);
  };
  try {
    return [fn(), n];
  } finally {
    call.dt_cast = saved;
  }
}

const bytes = (t: Tensor) => [...t.toBytes()];
const values = (n: number, seed: number) =>
  Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + seed) * 0.7);

/** The layer's output from plain copies of its parameters (never cached: not parameters). */
function fresh(lin: Linear, x: Tensor): number[] {
  return scope(() => {
    const w = fromArray(lin.weight.toArray() as Float32Array, lin.weight.shape);
    const b = fromArray(lin.bias!.toArray() as Float32Array, lin.bias!.shape);
    return bytes(autocast("bf16", () => linear(x, w, b)));
  });
}

function cached(lin: Linear, x: Tensor): number[] {
  return scope(() => bytes(autocast("bf16", () => lin.forward(x))));
}

/** Under autocast a weight is cast once for many uses, and its gradient is the f32 parameter's. */
export function castOncePerChange(): void {
  dropWeightCasts();
  manualSeed(1);
  scope(() => {
    const lin = new Linear(24, 16);
    const x1 = fromArray(values(5 * 24, 1), [5, 24]), x2 = fromArray(values(3 * 24, 2), [3, 24]);
    const [[y1, y2, y3], casts] = castsDuring(() =>
      autocast("bf16", () => [lin.forward(x1), lin.forward(x2), lin.forward(x1)])
    );
    // the weight and the bias once, each input once per use (it is not a parameter)
    assert.equal(casts, 2 + 3);
    assert.deepEqual(bytes(y1!), fresh(lin, x1));
    assert.deepEqual(bytes(y2!), fresh(lin, x2));
    assert.deepEqual(bytes(y3!), bytes(y1!));
    // a matmul with the weight as either operand uses the same copy
    const [, more] = castsDuring(() =>
      autocast(
        "bf16",
        () => [matmul(x1, lin.weight, { transB: true }), matmul(lin.weight, x2, { transB: true })],
      )
    );
    assert.equal(more, 2, "only the inputs are cast again");
    // gradients go to the f32 parameters, also after the copies were dropped before backward
    dropWeightCasts();
    backward(sum(y1!));
    assert.equal(lin.weight.grad!.dtype, "f32");
    const w = fromArray(lin.weight.toArray() as Float32Array, lin.weight.shape);
    w.requiresGrad = true;
    const b = fromArray(lin.bias!.toArray() as Float32Array, lin.bias!.shape);
    b.requiresGrad = true;
    dropWeightCasts();
    backward(sum(autocast("bf16", () => linear(x1, w, b))));
    assert.deepEqual(bytes(lin.weight.grad!), bytes(w.grad!));
    assert.deepEqual(bytes(lin.bias!.grad!), bytes(b.grad!));
  });
}

/** A cached weight copy is never used after the weight changed. */
export function neverStale(): void {
  dropWeightCasts();
  manualSeed(2);
  scope(() => {
    const lin = new Linear(40, 9);
    const x = fromArray(values(7 * 40, 3), [7, 40]);
    const check = (what: string, change: () => void) => {
      const before = cached(lin, x);
      assert.deepEqual(before, fresh(lin, x), `${what}: before`);
      change();
      const after = cached(lin, x);
      assert.deepEqual(after, fresh(lin, x), `${what}: the cached copy was stale`);
      assert.notDeepEqual(after, before, `${what}: the change did not change the output`);
    };
    check("copyFromArray", () => lin.weight.copyFromArray(values(9 * 40, 4)));
    check("fill", () => lin.bias!.fill(0.25));
    check("copyFrom", () => lin.weight.copyFrom(fromArray(values(9 * 40, 5), [9, 40])));
    check("loadStateDict", () => {
      manualSeed(3);
      lin.loadStateDict(new Linear(40, 9).stateDict());
    });
    check("an optimizer step", () => {
      const opt = new SGD(lin.parameters(), { lr: 0.5 });
      backward(sum(autocast("bf16", () => lin.forward(x))));
      opt.step();
    });
    check("fill through a view of the weight", () => {
      // a view shares the weight's write counter
      lin.weight.view([9 * 40]).fill(0.125);
    });
    check("a use in f16 between", () => {
      // a copy of one low precision is never served for the other
      const f16 = scope(() => autocast("f16", () => lin.forward(x)).dtype);
      assert.equal(f16, "f16");
      assert.deepEqual(cached(lin, x), fresh(lin, x));
      lin.weight.copyFromArray(values(9 * 40, 6));
    });
  });
}

/** A raw write into a weight's memory is seen once markModified() says so. */
export function rawWriteNeedsMark(): void {
  dropWeightCasts();
  manualSeed(4);
  scope(() => {
    const lin = new Linear(16, 4);
    const x = fromArray(values(3 * 16, 7), [3, 16]);
    const before = cached(lin, x);
    const w = lin.weight;
    backend().call.dt_scale(w.ptr, w.ptr, BigInt(w.numel), 2); // behind the tensor's back
    // the cache cannot see such a write (this is why the call exists), the next step would
    assert.deepEqual(cached(lin, x), before);
    w.markModified();
    const after = cached(lin, x);
    assert.deepEqual(after, fresh(lin, x));
    assert.notDeepEqual(after, before);
  });
}

if (import.meta.main) {
  useDevice(Deno.args[0] ?? "cpu");
  castOncePerChange();
  neverStale();
  rawWriteNeedsMark();
  console.log(JSON.stringify({ ok: true }));
}
