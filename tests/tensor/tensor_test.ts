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
