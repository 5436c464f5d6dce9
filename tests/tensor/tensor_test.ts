import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { castTensor, fromArray, scope, tensorOverHostMemory, zeros } from "../../tensor/tensor.ts";
import { memoryStats } from "../../tensor/allocator.ts";

buildNative({ quiet: true });

Deno.test("Tensor.toArray() of a bf16 tensor rounds through f32 and frees its temporary", () => {
  scope(() => {
    const b = castTensor(fromArray(new Float32Array([1, 1.00390625, -3.5])), "bf16");
    const live = memoryStats().liveBytes;
    // 1 + 2^-8 is a tie between two bf16 values and rounds to even (1).
    assert.deepEqual([...(b.toArray() as Float32Array)], [1, 1, -3.5]);
    assert.equal(memoryStats().liveBytes, live, "the f32 copy made for reading must be freed");
  });
});

Deno.test("scope() frees what it created and keeps what it returns", () => {
  const before = memoryStats().liveBytes;
  const kept = scope(() => {
    fromArray(new Float32Array(1024)); // a temporary
    return fromArray(new Float32Array(16));
  });
  assert.equal(kept.disposed, false);
  kept.dispose();
  assert.equal(memoryStats().liveBytes, before);
});

Deno.test("Tensor.item() reads one element of every dtype, and refuses others", () => {
  scope(() => {
    assert.equal(fromArray(new Float32Array([-2.75])).item(), -2.75);
    assert.equal(fromArray(new Int32Array([-7])).item(), -7);
    assert.equal(fromArray(new BigInt64Array([2n ** 40n + 3n])).item(), 2 ** 40 + 3);
    assert.equal(fromArray(new Uint8Array([200])).item(), 200);
    assert.equal(castTensor(fromArray(new Float32Array([1.00390625])), "bf16").item(), 1);
    assert.equal(castTensor(fromArray(new Float32Array([0.1])), "f16").item(), 0.0999755859375);
    // one after the other: each reads its own value, not the previous one's bytes
    const a = fromArray(new Int32Array([1])), b = fromArray(new Float32Array([0.5]));
    assert.deepEqual([a.item(), b.item(), a.item()], [1, 0.5, 1]);
    assert.throws(() => fromArray(new Float32Array(2)).item(), /one element, got shape \[2\]/);
    const gone = fromArray(new Float32Array([1]));
    gone.dispose();
    assert.throws(() => gone.item(), /was already disposed/);
  });
});

Deno.test("tensorOverHostMemory writes into the owner's memory, counts it while live, and never frees or caches it", () => {
  const host = new Float32Array(6).fill(1.5);
  const before = memoryStats();
  const t = tensorOverHostMemory(Deno.UnsafePointer.of(host)!, [2, 3]);
  assert.equal(memoryStats().liveBytes, before.liveBytes + 24);
  assert.deepEqual(Array.from(t.toArray() as Float32Array), [1.5, 1.5, 1.5, 1.5, 1.5, 1.5]);
  t.fill(2);
  assert.deepEqual(Array.from(host), [2, 2, 2, 2, 2, 2]);
  const view = t.subview(3, [3]).keep();
  t.dispose();
  view.fill(4);
  assert.deepEqual(Array.from(host), [2, 2, 2, 4, 4, 4]);
  view.dispose();
  const after = memoryStats();
  assert.equal(after.liveBytes, before.liveBytes);
  assert.equal(after.cachedBytes, before.cachedBytes, "the owner's memory went into the cache");
  // a new tensor of the same size gets memory of its own, not the owner's
  const fresh = zeros([2, 3]);
  assert.notEqual(
    Deno.UnsafePointer.value(fresh.ptr),
    Deno.UnsafePointer.value(Deno.UnsafePointer.of(host)!),
  );
  fresh.dispose();
});
