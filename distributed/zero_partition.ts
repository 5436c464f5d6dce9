/**
 * Which rank owns each parameter under a sharded optimizer (ZeRO): whole
 * parameters, assigned bucket by bucket of DDP's gradient buckets so that
 * each bucket splits into W nearly equal per-rank blocks (the blocks that
 * ZeRO-2 reduce-scatters and every stage all-gathers) and the ranks' totals
 * stay near 1/W of the model. Pure arithmetic on sizes: every rank computes
 * the same answer from the same parameter list.
 */

/**
 * Owners for the parameters of each bucket (`sizes[b][i]` elements of the
 * i-th parameter of bucket b; the answer has the same shape). Within a
 * bucket, parameters go largest first (then in bucket order) to the rank
 * whose block of that bucket is smallest, ties to the rank with the
 * smallest total so far, then the lowest rank.
 */
export function partitionBuckets(
  sizes: readonly (readonly number[])[],
  worldSize: number,
): number[][] {
  if (!Number.isInteger(worldSize) || worldSize < 1) {
    throw new RangeError(
      `partitionBuckets: worldSize must be a positive integer, got ${worldSize}`,
    );
  }
  const total = new Array<number>(worldSize).fill(0);
  return sizes.map((bucket) => {
    const owners = new Array<number>(bucket.length).fill(0);
    const block = new Array<number>(worldSize).fill(0);
    const order = bucket.map((_, i) => i).sort((a, b) => bucket[b]! - bucket[a]! || a - b);
    for (const i of order) {
      let best = 0;
      for (let r = 1; r < worldSize; r++) {
        if (
          block[r]! < block[best]! || (block[r] === block[best] && total[r]! < total[best]!)
        ) best = r;
      }
      owners[i] = best;
      block[best]! += bucket[i]!;
      total[best]! += bucket[i]!;
    }
    return owners;
  });
}

/** The layout of one bucket's per-rank blocks: each parameter's offset in its owner's block, and the block size. */
export function blockLayout(
  sizes: readonly number[],
  owners: readonly number[],
  worldSize: number,
): { offsets: number[]; blockSize: number } {
  const fill = new Array<number>(worldSize).fill(0);
  const offsets = sizes.map((n, i) => {
    const off = fill[owners[i]!]!;
    fill[owners[i]!]! += n;
    return off;
  });
  return { offsets, blockSize: Math.max(0, ...fill) };
}
