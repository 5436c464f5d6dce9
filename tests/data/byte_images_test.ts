/**
 * ByteImageDataset: a batch is each image's bytes through the table (the
 * same numbers as a pre-converted f32 copy) with its label; bad sizes,
 * tables and indices are refused with the numbers named.
 */
import assert from "node:assert/strict";
import { ByteImageDataset } from "../../data/byte_images.ts";

Deno.test("ByteImageDataset batches images through the table, with their labels", () => {
  const pixels = Uint8Array.from({ length: 3 * 4 }, (_, i) => (i * 37) % 256);
  const table = Float32Array.from({ length: 256 }, (_, b) => b / 2 - 7);
  const ds = new ByteImageDataset(pixels, [2, 2], Int32Array.of(5, 6, 7), table);
  assert.equal(ds.length, 3);
  const [x, y] = ds.getBatch(Int32Array.of(2, 0));
  assert.deepEqual(x!.shape, [2, 2, 2]);
  assert.deepEqual(
    [...(x!.toArray() as Float32Array)],
    [...pixels.subarray(8, 12), ...pixels.subarray(0, 4)].map((b) => table[b]!),
  );
  assert.deepEqual([...(y!.toArray() as Int32Array)], [7, 5]);
  x!.dispose();
  y!.dispose();
});

Deno.test("ByteImageDataset refuses sizes that do not fit and indices outside it", () => {
  const table = new Float32Array(256);
  assert.throws(
    () => new ByteImageDataset(new Uint8Array(10), [2, 2], new Int32Array(3), table),
    /10 pixel bytes do not make 3 images of \[2,2\] \(12 bytes\)/,
  );
  assert.throws(
    () => new ByteImageDataset(new Uint8Array(4), [4], new Int32Array(1), new Float32Array(10)),
    /table needs 256 entries, got 10/,
  );
  const ds = new ByteImageDataset(new Uint8Array(4), [4], new Int32Array(1), table);
  assert.throws(() => ds.getBatch(Int32Array.of(0, 1)), /index 1 is outside \[0, 1\)/);
});
