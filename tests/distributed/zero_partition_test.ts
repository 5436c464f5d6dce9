/**
 * The ZeRO partition (distributed/zero_partition.ts): whole parameters,
 * largest first to the emptiest block of each bucket, every rank's total near
 * 1/W; block offsets pack each owner's parameters in bucket order.
 */
import assert from "node:assert/strict";
import { blockLayout, partitionBuckets } from "../../distributed/zero_partition.ts";

Deno.test("partitionBuckets balances each bucket's blocks and the ranks' totals", () => {
  const sizes = [[100, 10, 60, 40], [30, 30, 30, 30], [7]];
  const owners = partitionBuckets(sizes, 2);
  assert.deepEqual(owners[0], [0, 0, 1, 1]); // 100 + 10 | 60 + 40 (10: a tie, to the lower rank)
  // a tie within a bucket goes to the smaller total: rank 1 (100) before rank 0 (110)
  assert.deepEqual(owners[1], [1, 0, 1, 0]);
  assert.equal(owners[2]!.length, 1);
  const totals = [0, 0];
  sizes.forEach((b, i) => b.forEach((n, j) => totals[owners[i]![j]!]! += n));
  assert.ok(Math.abs(totals[0]! - totals[1]!) <= 7 + 10, `totals ${totals}`);
  assert.deepEqual(partitionBuckets(sizes, 1), sizes.map((b) => b.map(() => 0)));
  assert.throws(() => partitionBuckets(sizes, 0), /worldSize must be a positive integer, got 0/);
});

Deno.test("blockLayout packs each owner's parameters in bucket order; the block is the largest share", () => {
  const { offsets, blockSize } = blockLayout([100, 10, 60, 40], [0, 0, 1, 1], 2);
  assert.deepEqual(offsets, [0, 100, 0, 60]);
  assert.equal(blockSize, 110);
  assert.equal(blockLayout([], [], 3).blockSize, 0);
});
