/**
 * Tests of check/sampler_stage.ts on recorded sampler passes built with
 * torch's split (shardIndices): correct splits pass, with padding and with
 * dropLast; each way a split goes wrong fails with its cause.
 */
import assert from "node:assert/strict";
import { shardIndices } from "../../data/distributed_sampler.ts";
import type { RankEvents } from "../../check/events.ts";
import type { ProbeEvent } from "../../check/probe.ts";
import { checkSampler } from "../../check/sampler_stage.ts";
import { assertFailsWith, rowOf, withOutcome } from "./_helpers.ts";

interface PassOptions {
  shuffle?: boolean;
  dropLast?: boolean;
  /** the epoch each pass asks for (default 0, 1: setEpoch called) */
  epochs?: number[];
}

/** What the probe records for `world` ranks drawing from a dataset of n items (a per-rank n when given as a function). */
function recorded(
  n: number | ((rank: number) => number),
  world: number,
  o: PassOptions = {},
): RankEvents {
  const byRank: RankEvents = new Map();
  for (let rank = 0; rank < world; rank++) {
    const length = typeof n === "number" ? n : n(rank);
    const events: ProbeEvent[] = (o.epochs ?? [0, 1]).map((epoch) => ({
      kind: "sampler",
      rank,
      epoch,
      datasetLength: length,
      numReplicas: world,
      indices: [
        ...shardIndices(length, world, rank, {
          seed: 3,
          epoch,
          shuffle: o.shuffle ?? true,
          dropLast: o.dropLast ?? false,
        }),
      ],
    }));
    byRank.set(rank, events);
  }
  return byRank;
}

Deno.test("checkSampler() passes torch's split, exact and with padding", () => {
  const exact = checkSampler(recorded(200, 2), 2);
  assert.deepEqual(withOutcome(exact, "FAIL"), []);
  assert.equal(
    rowOf(exact, "sampler", "epoch 0 coverage").measured,
    "200/200 indices, 0 overlaps beyond 0 pad",
  );
  assert.equal(
    rowOf(exact, "sampler", "order changes").measured,
    "order differs on 2/2 ranks (epochs 0 -> 1)",
  );
  const padded = checkSampler(recorded(203, 4), 4); // 4 x 51 = 204: one index repeated as padding
  assert.deepEqual(withOutcome(padded, "FAIL"), []);
  assert.equal(
    rowOf(padded, "sampler", "epoch 1 coverage").measured,
    "203/203 indices, 0 overlaps beyond 1 pad",
  );
});

Deno.test("checkSampler() accepts dropLast's trim of at most numReplicas - 1 indices", () => {
  const rows = checkSampler(recorded(203, 4, { dropLast: true }), 4);
  assert.deepEqual(withOutcome(rows, "FAIL"), []);
  assert.equal(
    rowOf(rows, "sampler", "epoch 0 coverage").measured,
    "200/203 indices (3 trimmed by dropLast), 0 overlaps",
  );
});

Deno.test("checkSampler() reports a missing setEpoch as an order that did not change", () => {
  const rows = checkSampler(recorded(200, 2, { epochs: [0, 0] }), 2);
  assert.deepEqual(withOutcome(rows, "FAIL"), ["sampler / order changes between epochs"]);
  assertFailsWith(
    rows,
    "sampler",
    "order changes",
    "order did not change between epochs",
    "both passes report epoch 0",
    "setEpoch(epoch)",
  );
});

Deno.test("checkSampler() skips the order check when shuffle is off or the script ran one epoch", () => {
  const unshuffled = checkSampler(recorded(201, 2, { shuffle: false }), 2);
  assert.equal(rowOf(unshuffled, "sampler", "order changes").outcome, "SKIP");
  assert.match(rowOf(unshuffled, "sampler", "order changes").cause!, /shuffle is off/);
  const oneEpoch = checkSampler(recorded(200, 2, { epochs: [0] }), 2);
  assert.deepEqual(withOutcome(oneEpoch, "FAIL"), []);
  assert.deepEqual(withOutcome(oneEpoch, "SKIP"), [
    "sampler / epoch 1 coverage",
    "sampler / order changes between epochs",
  ]);
});

Deno.test("checkSampler() names a dataset length that differs between ranks", () => {
  const rows = checkSampler(recorded((rank) => 101 - rank, 2), 2);
  assertFailsWith(
    rows,
    "sampler",
    "ranks agree",
    "dataset length differs between ranks (rank 0: 101, rank 1: 100)",
  );
  assertFailsWith(rows, "sampler", "epoch 0 coverage", "are on no rank");
});

Deno.test("checkSampler() requires padding to repeat the start of the epoch's order", () => {
  const byRank = recorded(203, 4);
  const last = byRank.get(3)![0]! as Extract<ProbeEvent, { kind: "sampler" }>;
  const start = byRank.get(0)![0]! as Extract<ProbeEvent, { kind: "sampler" }>;
  assert.equal(
    last.indices.at(-1),
    start.indices[0],
    "torch pads rank 3 with the order's first index",
  );
  last.indices[last.indices.length - 1] = start.indices[1]!; // still one repeat, but not of the start
  assertFailsWith(checkSampler(byRank, 4), "sampler", "epoch 0 coverage", "beyond torch's padding");
});

Deno.test("checkSampler() finds overlapping shares and a wrong world size", () => {
  const sameRank = recorded(200, 2);
  sameRank.set(1, sameRank.get(0)!.map((e) => ({ ...e }))); // rank 1 built its sampler with rank 0
  const rows = checkSampler(sameRank, 2);
  assertFailsWith(rows, "sampler", "ranks agree", "rank 1's sampler has rank 0");
  assertFailsWith(
    rows,
    "sampler",
    "epoch 0 coverage",
    "100 indices are on no rank",
    "100 indices are on more than one rank",
  );

  const alone = recorded(200, 1); // each rank thinks it is alone: numReplicas 1, and all see everything
  alone.set(1, alone.get(0)!);
  const wrongWorld = checkSampler(alone, 2);
  assertFailsWith(wrongWorld, "sampler", "ranks agree", "numReplicas 1, expected 2");
  assertFailsWith(
    wrongWorld,
    "sampler",
    "epoch 0 coverage",
    "200 indices are on more than one rank",
  );
});

Deno.test("checkSampler() fails DataLoaders without a DistributedSampler, skips data drawn otherwise", () => {
  const batch: ProbeEvent = { kind: "batch", indices: [0, 1] };
  const loss: ProbeEvent = { kind: "loss", value: 1 };
  const rows = checkSampler(new Map([[0, [batch, loss]], [1, [batch, loss]]]), 2);
  assertFailsWith(rows, "sampler", "ranks agree", "DataLoaders draw no DistributedSampler");
  assert.equal(rowOf(rows, "sampler", "epoch 0 coverage").outcome, "FAIL");
  // Random windows without a DataLoader (nanoGPT's get_batch): nothing to judge, said so.
  const own = checkSampler(new Map([[0, [loss]], [1, [loss]]]), 2);
  assert.deepEqual(own.map((r) => [r.check, r.outcome]), [["ranks agree", "SKIP"]]);
  assert.match(own[0]!.cause!, /without a DataLoader or DistributedSampler/);
  const oneSilent = recorded(200, 2);
  oneSilent.set(1, []);
  assertFailsWith(
    checkSampler(oneSilent, 2),
    "sampler",
    "ranks agree",
    "rank 1 recorded no DistributedSampler pass",
  );
});

Deno.test("checkSampler() leaves out passes no backward followed, and checks another sampler's coverage", () => {
  const world = 2;
  const byRank: RankEvents = new Map();
  const pass = (sampler: number, rank: number, epoch: number, n: number): ProbeEvent => ({
    kind: "sampler",
    sampler,
    rank,
    epoch,
    datasetLength: n,
    numReplicas: world,
    indices: [...shardIndices(n, world, rank, { seed: 3, epoch, shuffle: sampler === 0 })],
  });
  const loss: ProbeEvent = { kind: "loss", value: 0.5 };
  for (let rank = 0; rank < world; rank++) {
    byRank.set(rank, [
      pass(0, rank, 0, 200), // a setup pass over the sampler
      pass(0, rank, 0, 200), // epoch 0
      loss,
      pass(1, rank, 0, 60), // the evaluation after epoch 0
      pass(0, rank, 0, 200), // the tutorial's peek before setEpoch(1)
      pass(0, rank, 1, 200), // epoch 1
      loss,
    ]);
  }
  const rows = checkSampler(byRank, world);
  assert.deepEqual(withOutcome(rows, "FAIL"), []);
  assert.match(
    rowOf(rows, "sampler", "ranks agree").measured,
    /not epochs: 2 passes on rank 0, 2 passes on rank 1/,
  );
  assert.equal(
    rowOf(rows, "sampler", "order changes").measured,
    "order differs on 2/2 ranks (epochs 0 -> 1)",
  );
  assert.equal(rowOf(rows, "sampler", "sampler 2 (60 samples) coverage").outcome, "PASS");
  // Without setEpoch the kept passes still repeat epoch 0: that fails as before.
  for (const [rank, events] of byRank) {
    byRank.set(
      rank,
      events.map((e) => (e.kind === "sampler" && e.sampler === 0 ? pass(0, rank, 0, 200) : e)),
    );
  }
  assertFailsWith(checkSampler(byRank, world), "sampler", "order changes", "setEpoch");
});
