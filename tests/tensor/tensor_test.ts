import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { castTensor, fromArray, scope } from "../../tensor/tensor.ts";
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
