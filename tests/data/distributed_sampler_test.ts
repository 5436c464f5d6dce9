/**
 * DistributedSampler and shardIndices against torch's sampler.json, the
 * repeated-epoch warning, argument validation, and the parity helper that
 * `deno task parity` prints (including that it flags a tampered fixture).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { DistributedSampler, samplerSizes, shardIndices } from "../../data/distributed_sampler.ts";
import { checkSamplerFixtures } from "../../parity/sampler.ts";
import { fixturesDir, readJsonFixture } from "../random/_fixtures.ts";

interface SamplerCase {
  n: number;
  num_replicas: number;
  seed: number;
  epoch: number;
  shuffle: boolean;
  drop_last: boolean;
  num_samples: number;
  total_size: number;
  indices: number[][];
}
const fixture = readJsonFixture<{ cases: SamplerCase[] }>("sampler.json");

Deno.test("shardIndices() matches torch's DistributedSampler for every sampler.json case", () => {
  assert.ok(fixture.cases.length > 0);
  for (const c of fixture.cases) {
    const name = `n=${c.n} ws=${c.num_replicas} seed=${c.seed} epoch=${c.epoch} ` +
      `shuffle=${c.shuffle} drop_last=${c.drop_last}`;
    const sizes = samplerSizes(c.n, c.num_replicas, { dropLast: c.drop_last });
    assert.deepEqual(sizes, {
      numSamples: c.num_samples,
      totalSize: c.total_size,
    }, name);
    assert.equal(c.indices.length, c.num_replicas, name);
    for (let rank = 0; rank < c.num_replicas; rank++) {
      const actual = shardIndices(c.n, c.num_replicas, rank, {
        shuffle: c.shuffle,
        seed: c.seed,
        epoch: c.epoch,
        dropLast: c.drop_last,
      });
      assert.deepEqual(
        Array.from(actual),
        c.indices[rank],
        `${name} rank ${rank}`,
      );
    }
  }
});

Deno.test("checkSamplerFixtures() passes one row per case and flags a tampered fixture", () => {
  const rows = checkSamplerFixtures(fixturesDir());
  assert.equal(rows.length, fixture.cases.length);
  assert.deepEqual(rows.filter((r) => !r.pass), []);

  const tampered = structuredClone(fixture);
  const target = tampered.cases.findIndex((c) => c.shuffle && c.n >= 10 && c.num_replicas === 2);
  const list = tampered.cases[target]!.indices[1]!;
  [list[0], list[1]] = [list[1]!, list[0]!];
  tampered.cases[target + 1]!.num_samples += 1;
  const folder = Deno.makeTempDirSync({ prefix: "dtrain_sampler_parity_" });
  try {
    Deno.writeTextFileSync(
      join(folder, "sampler.json"),
      JSON.stringify(tampered),
    );
    const failed = checkSamplerFixtures(folder).filter((r) => !r.pass);
    assert.equal(failed.length, 2);
    assert.match(failed[0]!.note!, /^rank 1: element 0 is \d+, expected \d+$/);
    assert.match(failed[1]!.note!, /^num_samples \d+, expected \d+$/);
  } finally {
    Deno.removeSync(folder, { recursive: true });
  }
  assert.throws(
    () => checkSamplerFixtures("/nonexistent-dtrain-folder"),
    /Cannot read parity fixture/,
  );
});

/** A sampler whose warnings are collected instead of printed. */
function quietSampler(shuffle = true) {
  const warnings: string[] = [];
  const sampler = new DistributedSampler(100, {
    numReplicas: 4,
    rank: 1,
    shuffle,
    seed: 7,
    onWarning: (message) => warnings.push(message),
  });
  return { sampler, warnings };
}

Deno.test("DistributedSampler warns once when a shuffled epoch is iterated again without setEpoch", () => {
  const { sampler, warnings } = quietSampler();
  const first = [...sampler];
  assert.deepEqual(warnings, []);
  const second = [...sampler];
  assert.deepEqual(second, first, "torch semantics: the order repeats");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /the order of epoch 0 was gone through again/);
  assert.match(
    warnings[0]!,
    /sampler\.setEpoch\(epoch\) at the start of each epoch/,
  );
  sampler.indices();
  [...sampler];
  assert.equal(warnings.length, 1, "the warning is shown once");
});

Deno.test("DistributedSampler does not count a pass left early (a peek at the first indices)", () => {
  const { sampler, warnings } = quietSampler();
  for (let epoch = 0; epoch < 3; epoch++) {
    // The DDP tutorial's peek at the first batch, before set_epoch: epoch - 1's order, left early.
    for (const _ of sampler) break;
    sampler.setEpoch(epoch);
    [...sampler];
  }
  assert.deepEqual(warnings, []);
});

Deno.test("DistributedSampler does not warn when setEpoch advances, and each epoch reshuffles", () => {
  const { sampler, warnings } = quietSampler();
  const orders: number[][] = [];
  for (let epoch = 0; epoch < 3; epoch++) {
    sampler.setEpoch(epoch);
    orders.push([...sampler]);
  }
  assert.deepEqual(warnings, []);
  assert.notDeepEqual(orders[0], orders[1]);
  assert.notDeepEqual(orders[1], orders[2]);
  assert.equal(sampler.epoch, 2);
  assert.deepEqual(
    orders[2],
    Array.from(shardIndices(100, 4, 1, { seed: 7, epoch: 2 })),
  );
});

Deno.test("DistributedSampler stays quiet without shuffle and for indicesFor()", () => {
  const plain = quietSampler(false);
  [...plain.sampler];
  [...plain.sampler];
  assert.deepEqual(plain.warnings, []);

  const { sampler, warnings } = quietSampler();
  sampler.setEpoch(3);
  const third = sampler.indicesFor(3);
  sampler.indicesFor(3);
  assert.deepEqual(warnings, []);
  assert.equal(sampler.epoch, 3, "indicesFor() leaves the current epoch alone");
  assert.deepEqual(sampler.indices(), third);
  assert.deepEqual(warnings, [], "indicesFor() does not count as a pass");
});

Deno.test("DistributedSampler sends the warning to console.warn by default", () => {
  const original = console.warn;
  const printed: unknown[][] = [];
  console.warn = (...args: unknown[]) => printed.push(args);
  try {
    const sampler = new DistributedSampler(10, { numReplicas: 2, rank: 0 });
    [...sampler];
    [...sampler];
  } finally {
    console.warn = original;
  }
  assert.equal(printed.length, 1);
  assert.match(String(printed[0]![0]), /setEpoch/);
});

Deno.test("DistributedSampler exposes torch's sizes and splits an unshuffled epoch by stride", () => {
  const sampler = new DistributedSampler(10, {
    numReplicas: 3,
    rank: 2,
    shuffle: false,
  });
  assert.equal(sampler.numSamples, 4);
  assert.equal(sampler.totalSize, 12);
  assert.equal(sampler.length, 4);
  // Padding repeats the start of the list: positions 10, 11 hold 0, 1.
  assert.deepEqual([...sampler], [2, 5, 8, 1]);
  const trimmed = new DistributedSampler(10, {
    numReplicas: 3,
    rank: 2,
    shuffle: false,
    dropLast: true,
  });
  assert.deepEqual([...trimmed], [2, 5, 8]);
  assert.deepEqual(shardIndices(0, 4, 3), new Int32Array(0));
  // Padding beyond one copy of the list: n = 2, 8 ranks.
  assert.deepEqual(
    Array.from(
      { length: 8 },
      (_, r) => shardIndices(2, 8, r, { shuffle: false })[0],
    ),
    [0, 1, 0, 1, 0, 1, 0, 1],
  );
});

Deno.test("DistributedSampler and shardIndices reject bad arguments with what was expected", () => {
  assert.throws(
    () => new DistributedSampler(10, { numReplicas: 4, rank: 4 }),
    /rank 4: expected an integer in \[0, 4\) for numReplicas=4/,
  );
  assert.throws(
    () => new DistributedSampler(10, { numReplicas: 4, rank: -1 }),
    /rank -1/,
  );
  assert.throws(
    () => new DistributedSampler(-5, { numReplicas: 2, rank: 0 }),
    /dataset length -5: expected an integer >= 0/,
  );
  assert.throws(
    () => new DistributedSampler(10, { numReplicas: 0, rank: 0 }),
    /numReplicas 0: expected an integer >= 1/,
  );
  assert.throws(
    () => new DistributedSampler(10, { numReplicas: 2, rank: 0, seed: 1.5 }),
    /seed 1\.5: expected a safe integer/,
  );
  const sampler = new DistributedSampler(10, { numReplicas: 2, rank: 0 });
  assert.throws(
    () => sampler.setEpoch(-1),
    /epoch -1: expected an integer >= 0/,
  );
  assert.throws(() => sampler.setEpoch(0.5), /epoch 0\.5/);
  assert.throws(
    () => shardIndices(10, 2, 2),
    /rank 2: expected an integer in \[0, 2\)/,
  );
  assert.throws(() => shardIndices(2.5, 2, 0), /dataset length 2\.5/);
});
