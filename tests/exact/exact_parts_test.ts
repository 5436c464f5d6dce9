/**
 * Exact mode's parts in one process: the canonical shard plan and its
 * refusals, the fixed tree's association, dropout masks keyed by shard, the
 * switch (DDP option, numerics policy, Trainer config), which forwards are
 * sharded, a forward returning a tuple, and the errors for what would sum
 * shards in an order that depends on the world size.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { fromArray, full, scope, type Tensor } from "../../tensor/tensor.ts";
import { add } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";
import { memoryStats } from "../../tensor/allocator.ts";
import { inShard } from "../../tensor/exact_shards.ts";
import { Dropout, Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { BatchNorm1d } from "../../nn/batchnorm.ts";
import { ExactPlan, exactShardCount, treeSum } from "../../distributed/exact.ts";
import { DistributedDataParallel } from "../../distributed/ddp.ts";
import { initProcessGroup } from "../../distributed/init_process_group.ts";
import { crossEntropy } from "../../nn/losses.ts";
import { checkpoint } from "../../nn/checkpoint.ts";
import { backward, noGrad } from "../../tensor/autograd.ts";
import {
  numericsPolicy,
  resolveNumericsPolicy,
  setNumericsPolicy,
} from "../../tensor/numerics_policy.ts";
import { resolveConfig } from "../../train/config.ts";
import { checkExactRun, resolveExactShards } from "../../train/exact_config.ts";
import { Trainer } from "../../train/engine.ts";
import { TensorDataset } from "../../data/dataset.ts";

buildNative({ quiet: true });

Deno.test("the plan: rank r holds shards r + kW, row j of its batch is in local shard j mod S/W; bad sizes are refused", () => {
  const p = new ExactPlan(8, 2, 1);
  assert.deepEqual(p.local, [1, 3, 5, 7]);
  const { split, back } = p.rows(8);
  assert.deepEqual(split.map((t) => [...t.toArray()]), [[0, 4], [1, 5], [2, 6], [3, 7]]);
  // shards' outputs joined in shard order are rows 0,4,1,5,…: back puts row j where it was
  assert.deepEqual([...back!.toArray()], [0, 2, 4, 6, 1, 3, 5, 7]);
  assert.equal(new ExactPlan(8, 8, 3).rows(5).back, null, "one shard per rank: nothing to permute");
  p.dispose();
  assert.throws(
    () => new ExactPlan(8, 3, 0),
    /world size 3 does not divide the 8 canonical shards/,
  );
  assert.throws(() => new ExactPlan(8, 16, 0), /world size 16 does not divide/);
  assert.throws(() => new ExactPlan(6, 2, 0), /power of two ≥ 1, got 6/);
  assert.throws(
    () => new ExactPlan(8, 2, 0).rows(6),
    /local batch of 6 rows does not split into this rank's 4/,
  );
  assert.equal(exactShardCount(undefined, false), null);
  assert.equal(exactShardCount(true, false), 8);
  assert.equal(exactShardCount(true, 4), 4);
  assert.equal(exactShardCount(undefined, 16), 16);
  assert.equal(exactShardCount(false, 16), null, "the option overrides the policy");
  assert.throws(() => exactShardCount(12, false), /power of two/);
});

Deno.test("the fixed tree: value(c mod 2^d) = value(c mod 2^(d+1)) + value(c + 2^d mod 2^(d+1)), every level rounded in f32", () => {
  // Values whose sum depends on the association: a wrong pairing gives other bits.
  const vals = [1e8, 3, -1e8, 5, 7, 1e-3, 11, -7];
  const leaves = vals.map((v) => fromArray(new Float32Array([v]), [1]).keep());
  const f = Math.fround;
  const pair = (a: number, b: number) => f(f(a) + f(b));
  const expected = pair(
    pair(pair(vals[0]!, vals[4]!), pair(vals[2]!, vals[6]!)),
    pair(pair(vals[1]!, vals[5]!), pair(vals[3]!, vals[7]!)),
  );
  const root = treeSum(0, 0, 3, (c) => leaves[c]!);
  assert.equal(root.value.toArray()[0], expected);
  // A rank's subtree at W = 2 (class 1: shards 1, 3, 5, 7) is the root's right child.
  const right = treeSum(1, 1, 3, (c) => leaves[c]!);
  assert.equal(right.value.toArray()[0], pair(pair(vals[1]!, vals[5]!), pair(vals[3]!, vals[7]!)));
  // the association matters for these values: a left-to-right sum differs
  assert.notEqual(vals.reduce((a, b) => f(a + b), 0), expected);
  for (const t of [...leaves, root.value, right.value]) t.dispose();
});

Deno.test("dropout in exact mode: a shard's mask is the same whichever shards a process draws before it", () => {
  const draw = (order: number[], gen: number) => {
    const d = new Dropout(0.5, 123n);
    const out = new Map<number, number[]>();
    for (const s of order) {
      inShard({ shard: s, count: 8, generation: gen }, () => {
        out.set(s, [...(d.forward(full([4, 4], 1)).toArray() as Float32Array)]);
      });
    }
    return { out, offset: d.offset };
  };
  const all = draw([0, 1, 2, 3, 4, 5, 6, 7], 1001), odd = draw([1, 3, 5, 7], 1002);
  for (const s of [1, 3, 5, 7]) assert.deepEqual(odd.out.get(s), all.out.get(s), `shard ${s}`);
  assert.notDeepEqual(all.out.get(1), all.out.get(3), "shards draw different masks");
  assert.equal(all.offset, 8n * 16n, "the stream stands past every shard's draws");
  assert.equal(odd.offset, all.offset, "whatever shards this process drew");
});

Deno.test("the switch: DDP's exact option, else the numerics policy's exact field; the Trainer's config and its refusals", () => {
  assert.equal(resolveNumericsPolicy({ exact: 4 }).exact, 4);
  assert.throws(() => resolveNumericsPolicy({ exact: 3 }), /exact must be false or a power of two/);
  const pg = initProcessGroup();
  const prev = setNumericsPolicy({ exact: 4 }, "the test");
  try {
    const fromPolicy = new DistributedDataParallel(new Linear(2, 2), pg);
    assert.equal(fromPolicy.exactShards, 4);
    fromPolicy.close();
    const off = new DistributedDataParallel(new Linear(2, 2), pg, { exact: false });
    assert.equal(off.exactShards, null);
    assert.equal(numericsPolicy().exact, false, "the option is recorded in the process's policy");
    off.close();
    new DistributedDataParallel(new Linear(2, 2), pg, { exact: 16 }).close();
    assert.equal(numericsPolicy().exact, 16);
  } finally {
    setNumericsPolicy(prev, "the test");
  }
  const cfg = (c: Record<string, unknown>) => resolveConfig(c);
  const a = cfg({ exact: true });
  assert.equal(resolveExactShards(a), 8);
  assert.equal(a.numerics.exact, 8, "the policy carries the shard count into the records");
  assert.equal(resolveExactShards(cfg({ numerics: { exact: 16 } })), 16);
  assert.equal(resolveExactShards(cfg({})), null);
  assert.throws(
    () => resolveExactShards(cfg({ exact: 4, numerics: { exact: 8 } })),
    /different shard counts/,
  );
  assert.throws(() => resolveExactShards(cfg({ exact: 6 })), /power of two/);
  const ok = cfg({ exact: 8, data: { globalBatchSize: 32, gradAccumulation: 2 } });
  checkExactRun(ok, 8, 64, 4);
  assert.throws(() => checkExactRun(ok, 8, 64, 3), /world size 3 does not divide/);
  assert.throws(() => checkExactRun(ok, 8, 60, 2), /60 samples are not a multiple of 8/);
  assert.throws(
    () => checkExactRun(cfg({ data: { globalBatchSize: 24, gradAccumulation: 2 } }), 8, 64, 1),
    /globalBatchSize 24 \/ data.gradAccumulation 2 is not a multiple of 8/,
  );
  assert.throws(
    () => checkExactRun(cfg({ ddp: { shard: "optimizer" } }), 8, 64, 1),
    /ddp.shard = "optimizer" \(ZeRO\) is refused/,
  );
});

Deno.test("batch norm in exact mode: each shard's statistics, running ones updated once per forward from their mean", () => {
  const pg = initProcessGroup();
  const bn = new BatchNorm1d(2);
  const ddp = new DistributedDataParallel(bn, pg, { exact: 4 });
  // 8 rows: shard k holds rows k and k + 4; channel 0 is the row index, channel 1 its square
  const rows = Array.from({ length: 8 }, (_, j) => [j, j * j]);
  const x = fromArray(Float32Array.from(rows.flat()), [8, 2]).keep();
  const out = scope(() => [...(ddp.forward(x).toArray() as Float32Array)]);
  // Shard 0's rows 0 and 4 normalise to -1 and 1 by their own statistics (not the batch's).
  assert.ok(Math.abs(out[0]! + 1) < 1e-3 && Math.abs(out[8]! - 1) < 1e-3, String(out));
  const nbt = () => Number((bn.numBatchesTracked!.toArray() as BigInt64Array)[0]);
  assert.equal(nbt(), 1);
  // The mean over shards of each shard's mean, and of each shard's unbiased variance.
  const mean = (c: number) => rows.reduce((a, r) => a + r[c]!, 0) / 8;
  const varOf = (c: number) => {
    let v = 0;
    for (let k = 0; k < 4; k++) {
      const a = rows[k]![c]!, b = rows[k + 4]![c]!;
      v += (a - b) ** 2 / 2; // two rows: unbiased variance (a - m)² + (b - m)² = (a - b)² / 2
    }
    return v / 4;
  };
  const rm = bn.runningMean!.toArray() as Float32Array,
    rv = bn.runningVar!.toArray() as Float32Array;
  for (const c of [0, 1]) {
    assert.ok(Math.abs(rm[c]! - 0.1 * mean(c)) < 1e-5, `running mean ${c}: ${rm[c]}`);
    assert.ok(Math.abs(rv[c]! - (0.9 + 0.1 * varOf(c))) < 1e-4, `running var ${c}: ${rv[c]}`);
  }
  scope(() => ddp.forward(x));
  assert.equal(nbt(), 2);
  bn.numBatchesTracked!.copyFrom(fromArray(BigInt64Array.of(10n), [])); // as a loaded state would
  scope(() => ddp.forward(x));
  assert.equal(nbt(), 11, "a count written by someone else is read back, not overwritten");
  ddp.close();
  x.dispose();
});

Deno.test("an exact DDP's slots, row indices and gradients are freed by close()", () => {
  const pg = initProcessGroup();
  const model = new Sequential(new Linear(4, 4), new ReLU(), new Linear(4, 2));
  const x = fromArray(new Float32Array(32).map((_, i) => i / 32), [8, 4]).keep();
  const y = fromArray(new Int32Array(8).map((_, i) => i % 2), [8]).keep();
  const before = memoryStats().liveBytes;
  const ddp = new DistributedDataParallel(model, pg, { exact: 4 });
  scope(() => ddp.backward(crossEntropy(ddp.forward(x), y)));
  ddp.close();
  for (const p of model.parameters()) {
    p.grad!.dispose();
    p.grad = null;
  }
  assert.equal(memoryStats().liveBytes, before);
  x.dispose();
  y.dispose();
});

Deno.test("the Trainer refuses an exact run it cannot make exact before building anything", () => {
  const data = (n: number) =>
    new TensorDataset(
      { data: new Float32Array(n * 4), sampleShape: [4] },
      { data: new Int32Array(n), sampleShape: [] },
    );
  const make = (n: number, config: Record<string, unknown>) => () =>
    new Trainer({
      model: () => new Linear(4, 2),
      data: data(n),
      loss: (m, [x, y]) => crossEntropy(m.forward(x!), y!),
      config: { exact: true, data: { globalBatchSize: 16 }, ...config },
      runDir: null,
    });
  assert.throws(make(60, {}), /exact mode \(8 canonical shards\): the dataset's 60 samples/);
  assert.throws(make(64, { ddp: { shard: "optimizer" } }), /ddp.shard = "optimizer" \(ZeRO\)/);
  assert.throws(make(64, { data: { globalBatchSize: 12 } }), /globalBatchSize 12/);
  try {
    const ok = make(64, {})();
    assert.equal(ok.ddp?.exactShards, 8, "exact mode runs through DDP on one rank too");
    assert.equal(ok.numerics.exact, 8);
    ok.ddp!.close();
  } finally {
    setNumericsPolicy({}, "the test"); // the Trainer set its config's policy for the process
  }
});

Deno.test("exact mode refuses, naming it, what would sum shards in an order that depends on the world size", () => {
  const pg = initProcessGroup();
  const model = new Sequential(new Linear(4, 4), new ReLU(), new Linear(4, 2));
  const ddp = new DistributedDataParallel(model, pg, { exact: 4 });
  const x = fromArray(new Float32Array(32).map((_, i) => i / 32), [8, 4]);
  const y = fromArray(new Int32Array(8).map((_, i) => i % 2), [8]);
  try {
    // A step that reads the parameters only inside the forward works.
    scope(() => ddp.backward(crossEntropy(ddp.forward(x), y)));
    // A parameter used outside the model's forward (a penalty in the loss).
    assert.throws(
      () =>
        scope(() => {
          const w = model.parameters()[0]!;
          backward(add(crossEntropy(ddp.forward(x), y), sum(w)));
        }),
      /a parameter of shape \[4,4\] gets a gradient from .* outside the model's sharded forward/,
    );
    // A forward that returns something other than per-row outputs.
    const m2 = new (class extends Sequential {
      override forward(t: Tensor): Tensor {
        return sum(super.forward(t));
      }
    })(new Linear(4, 2));
    const d2 = new DistributedDataParallel(m2, pg, { exact: 4 });
    assert.throws(() => scope(() => d2.forward(x)), /can only return per-row outputs/);
    d2.close();
    // Activation checkpointing (its recomputation would run outside the shard).
    const m3 = new (class extends Sequential {
      override forward(t: Tensor): Tensor {
        return checkpoint((u) => super.forward(u), t);
      }
    })(new Linear(4, 2));
    const d3 = new DistributedDataParallel(m3, pg, { exact: 4 });
    assert.throws(
      () => scope(() => d3.forward(x)),
      /activation checkpointing is not available \(shard 0's forward called checkpoint\(\)\)/,
    );
    d3.close();
    // A batch that does not split into the shards.
    assert.throws(
      () => scope(() => ddp.forward(fromArray(new Float32Array(24), [6, 4]))),
      /local batch of 6 rows does not split into this rank's 4 canonical shards/,
    );
  } finally {
    ddp.close();
    x.dispose();
    y.dispose();
  }
});

Deno.test("which forwards are sharded: training mode (under noGrad too) and any forward that records gradients; an eval-mode noGrad forward runs whole", () => {
  const pg = initProcessGroup();
  const model = new Sequential(new Linear(4, 4), new ReLU(), new Linear(4, 2));
  const ddp = new DistributedDataParallel(model, pg, { exact: 4 });
  const x = fromArray(new Float32Array(32).map((_, i) => i / 32), [8, 4]);
  const y = fromArray(new Int32Array(8).map((_, i) => i % 2), [8]);
  const odd = fromArray(new Float32Array(24), [6, 4]); // 6 rows: no split into 4 shards
  const unsplit = /local batch of 6 rows does not split into this rank's 4 canonical shards/;
  const grads = () => model.parameters().map((p) => [...(p.grad!.toArray() as Float32Array)]);
  try {
    // Evaluation (eval mode, no gradients) may take any batch: it runs whole.
    model.eval();
    scope(() => noGrad(() => ddp.forward(odd)));
    // Eval mode with gradients recorded is trained through: sharded, and its gradients are the
    // training-mode ones (this model has no dropout or batch norm).
    assert.throws(() => scope(() => ddp.forward(odd)), unsplit);
    scope(() => ddp.backward(crossEntropy(ddp.forward(x), y)));
    const inEval = grads();
    model.train();
    for (const p of model.parameters()) p.grad!.fill(0);
    scope(() => ddp.backward(crossEntropy(ddp.forward(x), y)));
    assert.deepEqual(grads(), inEval);
    // Training mode under noGrad still moves dropout streams and running statistics: sharded.
    assert.throws(
      () => scope(() => noGrad(() => ddp.forward(odd))),
      /a training-mode forward under noGrad got a local batch of 6 rows, which does not split into this rank's 4 canonical shards.*call model\.eval\(\) first/,
    );
  } finally {
    ddp.close();
    for (const t of [x, y, odd]) t.dispose();
  }
});

Deno.test("a forward that returns a tuple: each element is joined back in the caller's row order; a per-shard scalar in it is refused", () => {
  const pg = initProcessGroup();
  class TwoHeads extends Sequential {
    constructor(readonly scalarToo: boolean) {
      super(new Linear(4, 6), new ReLU());
      this.head = this.registerModule("head", new Linear(6, 2));
    }
    readonly head: Linear;
    // deno-lint-ignore no-explicit-any
    override forward(t: Tensor): any {
      const h = super.forward(t);
      const out = [this.head.forward(h), h];
      return this.scalarToo ? [...out, sum(h)] : out;
    }
  }
  const model = new TwoHeads(false);
  const ddp = new DistributedDataParallel(model, pg, { exact: 4 });
  // Rows that differ from each other, so a row put back in the wrong place shows.
  const x = fromArray(new Float32Array(32).map((_, i) => Math.sin(i * 0.7)), [8, 4]);
  try {
    const rows = (ts: Tensor[]) => ts.map((t) => [...(t.toArray() as Float32Array)]);
    const sharded = scope(() => rows(ddp.forward(x) as Tensor[]));
    model.eval(); // an eval-mode no-grad forward runs whole: the reference row order
    const whole = scope(() => noGrad(() => rows(ddp.forward(x) as Tensor[])));
    model.train();
    assert.equal(sharded.length, 2);
    for (const [i, got] of sharded.entries()) {
      const want = whole[i]!;
      assert.equal(got.length, want.length);
      for (let j = 0; j < got.length; j++) {
        assert.ok(Math.abs(got[j]! - want[j]!) <= 1e-6, `output ${i}, element ${j}`);
      }
    }
    const d2 = new DistributedDataParallel(new TwoHeads(true), pg, { exact: 4 });
    assert.throws(
      () => scope(() => d2.forward(x)),
      /returned a tensor of shape \[\] for a shard of 2 rows; a forward run shard by shard can only return per-row outputs/,
    );
    d2.close();
  } finally {
    ddp.close();
    x.dispose();
  }
});
