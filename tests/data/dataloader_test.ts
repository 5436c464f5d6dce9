import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { type Dataset, Subset, TensorDataset } from "../../data/dataset.ts";
import { addLoaderPassHook, DataLoader } from "../../data/dataloader.ts";
import {
  addSamplerPassHook,
  DistributedSampler,
  type SamplerPass,
  shardIndices,
} from "../../data/distributed_sampler.ts";
import { globalOrder, remainderIndices, ResumableSampler } from "../../data/resumable_sampler.ts";

buildNative({ quiet: true });

/** A dataset whose sample i is the row [i, i+0.5] with label i, so batches reveal their indices. */
function indexDataset(n: number, width = 2): TensorDataset {
  const x = new Float32Array(n * width).map((_, k) => Math.floor(k / width) + (k % width) / width);
  const y = Int32Array.from({ length: n }, (_, i) => i);
  return new TensorDataset({ data: x, sampleShape: [width] }, { data: y, sampleShape: [] });
}

async function labels(loader: DataLoader): Promise<number[][]> {
  const out: number[][] = [];
  for await (const b of loader) {
    out.push([...(b.tensors[1]!.toArray() as Int32Array)]);
    const x = b.tensors[0]!.toArray() as Float32Array;
    assert.equal(x[0], out.at(-1)![0], "features and labels come from the same sample");
    for (const t of b.tensors) t.dispose();
  }
  return out;
}

Deno.test("DataLoader batches in the sampler's order, follows sampler.setEpoch, ends with a partial batch", async () => {
  const ds = indexDataset(10);
  const sampler = new DistributedSampler(10, { numReplicas: 2, rank: 1, seed: 7 });
  const loader = new DataLoader(ds, { batchSize: 2, sampler });
  for (const epoch of [0, 1]) {
    sampler.setEpoch(epoch);
    const got = await labels(loader);
    assert.deepEqual(got.flat(), [...shardIndices(10, 2, 1, { seed: 7, epoch })]);
    assert.deepEqual(got.map((b) => b.length), [2, 2, 1]);
  }
});

Deno.test("DataLoader state resumes mid-epoch at the next batch", async () => {
  const ds = indexDataset(12);
  const a = new DataLoader(ds, { batchSize: 4 });
  const it = a[Symbol.asyncIterator]();
  const first = await it.next();
  for (const t of first.value!.tensors) t.dispose();
  await it.return(undefined);
  assert.deepEqual(a.state(), { epoch: 0, position: 1 });
  const b = new DataLoader(ds, { batchSize: 4 });
  b.loadState(a.state());
  assert.deepEqual(await labels(b), [[4, 5, 6, 7], [8, 9, 10, 11]]);
});

Deno.test("a new iteration starts the epoch again, as a new PyTorch iterator does (a peek skips nothing)", async () => {
  const ds = indexDataset(12);
  const loader = new DataLoader(ds, { batchSize: 4 });
  const it = loader[Symbol.asyncIterator]();
  const peek = await it.next(); // the tutorial's b_sz = len(next(iter(loader))[0])
  assert.equal(peek.value!.tensors[0]!.shape[0], 4);
  for (const t of peek.value!.tensors) t.dispose();
  assert.deepEqual(await labels(loader), [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]);
  loader.loadState({ epoch: 0, position: 2 });
  assert.deepEqual(await labels(loader), [[8, 9, 10, 11]], "loadState: the next pass resumes");
  assert.deepEqual((await labels(loader)).length, 3, "…and only that one");
  // A peek after resuming does not use the resume point up.
  loader.loadState({ epoch: 0, position: 1 });
  const it2 = loader[Symbol.asyncIterator]();
  for (const t of (await it2.next()).value!.tensors) t.dispose();
  await it2.return(undefined);
  assert.deepEqual(await labels(loader), [[4, 5, 6, 7], [8, 9, 10, 11]]);
});

Deno.test("DataLoader prefetches large batches on a background thread with the same content", async () => {
  const width = 4096; // 16 KiB per sample: a 64-sample batch goes to the background thread
  const ds = indexDataset(256, width);
  const sync = await labels(new DataLoader(ds, { batchSize: 64, prefetch: 0 }));
  const background = new DataLoader(ds, { batchSize: 64, prefetch: 2 });
  assert.deepEqual(await labels(background), sync);
  assert.ok(background.meanWaitMs >= 0);
});

/** Counts which of a dataset's fetches the loader calls. */
function spied(ds: Dataset): { ds: Dataset; calls: { sync: number; async: number } } {
  const calls = { sync: 0, async: 0 };
  const wrapped: Dataset = {
    length: ds.length,
    getBatch: (i) => (calls.sync++, ds.getBatch(i)),
    getBatchAsync: (i) => (calls.async++, ds.getBatchAsync!(i)),
  };
  if (ds.fetchesInBackground) wrapped.fetchesInBackground = (n) => ds.fetchesInBackground!(n);
  return { ds: wrapped, calls };
}

Deno.test("DataLoader fetches small batches when needed, without prefetch promises; large ones ahead in the background", async () => {
  const small = spied(indexDataset(40));
  assert.equal(small.ds.fetchesInBackground!(8), false);
  const want = await labels(new DataLoader(indexDataset(40), { batchSize: 8, prefetch: 0 }));
  assert.deepEqual(await labels(new DataLoader(small.ds, { batchSize: 8 })), want);
  assert.deepEqual(small.calls, { sync: 5, async: 0 });

  const large = spied(indexDataset(256, 4096));
  assert.equal(large.ds.fetchesInBackground!(64), true);
  await labels(new DataLoader(large.ds, { batchSize: 64 }));
  assert.deepEqual(large.calls, { sync: 0, async: 4 });

  // a dataset that does not say keeps the prefetch (its getBatchAsync may work in the background)
  const silent = spied(indexDataset(40));
  delete silent.ds.fetchesInBackground;
  assert.deepEqual(await labels(new DataLoader(silent.ds, { batchSize: 8 })), want);
  assert.deepEqual(silent.calls, { sync: 0, async: 5 });

  // a Subset answers for the dataset under it
  const sub = new Subset(
    indexDataset(256, 4096),
    Int32Array.from({ length: 128 }, (_, i) => 2 * i),
  );
  assert.equal(sub.fetchesInBackground(64), true);
  assert.equal(sub.fetchesInBackground(8), false);
});

Deno.test("globalOrder() split strided is torch's DistributedSampler for every rank", () => {
  for (
    const [n, w, dropLast] of [[10, 3, false], [10, 3, true], [7, 8, false], [
      1000,
      4,
      false,
    ]] as const
  ) {
    const order = globalOrder(n, w, 3, { shuffle: true, seed: 5, dropLast });
    for (let r = 0; r < w; r++) {
      assert.deepEqual(
        [...remainderIndices(order, 0, w, r)],
        [...shardIndices(n, w, r, { seed: 5, epoch: 3, dropLast })],
      );
    }
  }
});

Deno.test("ResumableSampler: same world size continues exactly; fewer ranks cover the rest once", () => {
  const n = 1000, opts = { shuffle: true, seed: 1, dropLast: false };
  const full = [0, 1, 2, 3].map((r) => shardIndices(n, 4, r, { seed: 1, epoch: 2 }));
  // 4 ranks consumed 6 steps of 16 per rank.
  const consumed = 6 * 16 * 4;
  for (let r = 0; r < 4; r++) {
    const s = new ResumableSampler(n, 4, r, opts);
    s.resume({ epoch: 2, epochWorldSize: 4, consumed });
    assert.deepEqual([...s.indices()], [...full[r]!.subarray(6 * 16)]);
  }
  // Continue on 1 rank: exactly the samples not yet seen, each once.
  const one = new ResumableSampler(n, 1, 0, opts);
  one.resume({ epoch: 2, epochWorldSize: 4, consumed });
  const seen = new Set(full.flatMap((f) => [...f.subarray(0, 6 * 16)]));
  const rest = [...one.indices()];
  assert.equal(rest.length, n - consumed);
  assert.equal(new Set(rest).size, rest.length);
  for (const i of rest) assert.ok(!seen.has(i));
  assert.equal(seen.size + rest.length, n);
  // The next epoch is torch's order for the new world size again.
  one.setEpoch(3);
  assert.deepEqual([...one.indices()], [...shardIndices(n, 1, 0, { seed: 1, epoch: 3 })]);
});

Deno.test("tool hook points: sampler passes are reported, a loader pass hook can suppress a pass's batches", async () => {
  // Hooks are per module instance: this test file's, removed before it ends.
  const passes: SamplerPass[] = [];
  const removeSampler = addSamplerPassHook((p) =>
    passes.push({ ...p, indices: p.indices.slice() })
  );
  const seen: number[] = [];
  const removeLoader = addLoaderPassHook((p) => {
    seen.push(p.epoch, p.order.length);
    return false;
  });
  try {
    const sampler = new DistributedSampler(10, { numReplicas: 2, rank: 1, seed: 7 });
    const loader = new DataLoader(indexDataset(10), { batchSize: 2, sampler });
    loader.setEpoch(3);
    assert.deepEqual(await labels(loader), [], "the hook suppressed every batch");
    assert.deepEqual(seen, [3, 5]);
    assert.equal(passes.length, 1);
    assert.deepEqual(
      [passes[0]!.rank, passes[0]!.epoch, passes[0]!.numReplicas, passes[0]!.datasetLength],
      [1, 3, 2, 10],
    );
    assert.deepEqual([...passes[0]!.indices], [...sampler.indicesFor(3)]);
  } finally {
    removeSampler();
    removeLoader();
  }
  const loader = new DataLoader(indexDataset(4), { batchSize: 2 });
  assert.deepEqual(await labels(loader), [[0, 1], [2, 3]], "removed hooks no longer act");
  assert.equal(passes.length, 1, "a plain loader's order does not go through a DistributedSampler");
});
