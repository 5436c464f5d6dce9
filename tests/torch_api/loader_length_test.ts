/**
 * DataLoader.length against torch's len(DataLoader) (fixtures/torch_api/
 * loader_lengths.json): dataset sizes 0..64, batch sizes 1, 3, 8, drop_last
 * on and off, alone and under DistributedSamplers of 3 and 4 replicas
 * (their own drop_last too); and that counting the batches a pass yields
 * gives the same number, also for the Trainer's resumable sampler.
 */
import assert from "node:assert/strict";
import { DataLoader } from "../../data/dataloader.ts";
import { TensorDataset } from "../../data/dataset.ts";
import { DistributedSampler } from "../../data/distributed_sampler.ts";
import { ResumableSampler } from "../../data/resumable_sampler.ts";
import { readPiecesFixture } from "./_fixtures.ts";

interface LenCase {
  n: number;
  batch_size: number;
  drop_last: boolean;
  sampler: { num_replicas: number; rank: number; drop_last: boolean } | null;
  len: number;
}
const FIX = readPiecesFixture<{ cases: LenCase[] }>("loader_lengths.json");

function dataset(n: number): TensorDataset {
  return new TensorDataset({ data: new Float32Array(n), sampleShape: [] });
}

Deno.test(`DataLoader.length equals torch's len(DataLoader) in ${FIX.cases.length} cases`, () => {
  for (const c of FIX.cases) {
    const sampler = c.sampler
      ? new DistributedSampler(c.n, {
        numReplicas: c.sampler.num_replicas,
        rank: c.sampler.rank,
        dropLast: c.sampler.drop_last,
      })
      : undefined;
    const loader = new DataLoader(dataset(c.n), {
      batchSize: c.batch_size,
      dropLast: c.drop_last,
      sampler,
    });
    assert.equal(loader.length, c.len, JSON.stringify(c));
  }
});

Deno.test("DataLoader.length is the number of batches a pass yields", async () => {
  for (
    const [n, batch, dropLast] of [[10, 3, false], [10, 3, true], [9, 3, true], [
      0,
      2,
      false,
    ]] as const
  ) {
    const loader = new DataLoader(dataset(n), { batchSize: batch, dropLast, prefetch: 0 });
    let count = 0;
    for await (const _ of loader) count++;
    assert.equal(loader.length, count, `n=${n} batch=${batch} dropLast=${dropLast}`);
  }
  const resumable = new ResumableSampler(23, 2, 1, { shuffle: true, seed: 0, dropLast: false });
  const loader = new DataLoader(dataset(23), { batchSize: 5, sampler: resumable, prefetch: 0 });
  let count = 0;
  for await (const _ of loader) count++;
  assert.equal(loader.length, 3); // ceil(12 / 5): rank 1 of 2 gets 12 of 23 (padded)
  assert.equal(count, 3);
});
