/**
 * The convolutional-network layers: PyTorch's default initialisation bit for
 * bit (Conv2d after manualSeed), state-dict names and order, strict loading
 * of a torch-saved CNN, batch-norm modes and options, convertSyncBatchNorm
 * (parents' entries and fields replaced, tensors shared), and the
 * constructor checks.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { FixtureDir, repoFixtureDir, toFloat32 } from "../../parity/fixtures.ts";
import { smallCnn } from "../../parity/cnn.ts";
import { manualSeed } from "../../nn/init.ts";
import { Conv2d } from "../../nn/conv.ts";
import { AdaptiveAvgPool2d, AvgPool2d, MaxPool2d } from "../../nn/pooling.ts";
import {
  BatchNorm1d,
  BatchNorm2d,
  convertSyncBatchNorm,
  SyncBatchNorm,
} from "../../nn/batchnorm.ts";
import { Flatten, Identity, Layer, Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { loadWeights } from "../../nn/load.ts";
import { StateDictError } from "../../nn/module.ts";
import { fromArray, scope, type Tensor, zeros } from "../../tensor/tensor.ts";
import { rand } from "../tensor/_gradcheck.ts";
import { backward } from "../../tensor/autograd.ts";
import { mul } from "../../tensor/ops/elementwise.ts";
import { sum } from "../../tensor/ops/reduce.ts";

buildNative({ quiet: true });
const fx = new FixtureDir(repoFixtureDir());
const meta = fx.json("cnn.json");

Deno.test("a CNN built after manualSeed(s) has PyTorch's initial weights, bit for bit, under torch's names", () => {
  manualSeed(meta.seed);
  const model = smallCnn(meta.model.c1, meta.model.c2);
  const st = fx.tensors("cnn.safetensors");
  assert.deepEqual([...model.stateDict().keys()], meta.state_names);
  for (const [name, t] of model.stateDict()) {
    if (t.dtype === "i64") {
      assert.equal((t.toArray() as BigInt64Array)[0], 0n, name);
      continue;
    }
    const want = toFloat32(st.get(`init/${name}`)!, name), got = t.toArray() as Float32Array;
    for (let i = 0; i < got.length; i++) {
      if (!Object.is(got[i], want[i])) assert.fail(`${name}[${i}]: ${got[i]} != ${want[i]}`);
    }
  }
  model.dispose();
});

Deno.test("a torch-saved CNN loads strictly; a wrong model names what differs", () => {
  const model = smallCnn(meta.model.c1, meta.model.c2);
  loadWeights(model, join(fx.dir, "cnn_init.pt"));
  const nbt = model.stateDict().get("1.num_batches_tracked")!;
  assert.equal(nbt.dtype, "i64");
  const wider = smallCnn(meta.model.c1 + 1, meta.model.c2);
  assert.throws(() => loadWeights(wider, join(fx.dir, "cnn_init.pt")), (e: unknown) => {
    assert.ok(e instanceof StateDictError);
    assert.match(e.message, /0\.weight: expected shape \[\d+,1,3,3\], got \[\d+,1,3,3\]/);
    return true;
  });
  const noTracking = new Sequential(
    new Conv2d(1, meta.model.c1, 3, { padding: 1 }),
    new BatchNorm2d(meta.model.c1, { trackRunningStats: false }),
  );
  assert.deepEqual([...noTracking.stateDict().keys()], [
    "0.weight",
    "0.bias",
    "1.weight",
    "1.bias",
  ]);
  for (const m of [model, wider, noTracking]) m.dispose();
});

function tensorOf(shape: number[], seed: number, scale = 1): Tensor {
  return fromArray(rand(shape.reduce((a, b) => a * b, 1), seed).map((v) => v * scale), shape);
}

Deno.test("BatchNorm2d normalises with batch statistics in training and running ones in eval", () => {
  scope(() => {
    const bn = new BatchNorm2d(3, { momentum: 0.2 });
    const x = tensorOf([4, 3, 2, 2], 1, 5);
    const y = bn.forward(x).toArray() as Float32Array;
    const xs = x.toArray() as Float32Array;
    for (let c = 0; c < 3; c++) {
      const v: number[] = [];
      for (let n = 0; n < 4; n++) for (let i = 0; i < 4; i++) v.push(y[(n * 3 + c) * 4 + i]!);
      const m = v.reduce((a, b) => a + b) / 16, s = v.reduce((a, b) => a + (b - m) ** 2, 0) / 16;
      assert.ok(Math.abs(m) < 1e-6 && Math.abs(s - 1) < 1e-4, `channel ${c}: mean ${m}, var ${s}`);
    }
    assert.equal((bn.numBatchesTracked!.toArray() as BigInt64Array)[0], 1n);
    bn.eval();
    const rm = bn.runningMean!.toArray() as Float32Array,
      rv = bn.runningVar!.toArray() as Float32Array;
    const e = bn.forward(x).toArray() as Float32Array;
    for (let k = 0; k < 48; k++) {
      const c = Math.floor(k / 4) % 3;
      const want = (xs[k]! - rm[c]!) / Math.sqrt(rv[c]! + 1e-5);
      assert.ok(Math.abs(e[k]! - want) < 1e-5 * (1 + Math.abs(want)), `eval ${k}`);
    }
    assert.equal((bn.numBatchesTracked!.toArray() as BigInt64Array)[0], 1n, "eval does not count");
    assert.throws(
      () => bn.forward(zeros([2, 3, 4])),
      /BatchNorm2d: expected 4D input \(got 3D input \[2,3,4\]\)/,
    );
    assert.throws(
      () => bn.forward(zeros([2, 4, 1, 1])),
      /BatchNorm2d\(3\): the input \[2,4,1,1\] has 4 channels/,
    );
    bn.dispose();
  });
});

Deno.test("BatchNorm1d takes (N, C) and (N, C, L); without running statistics it uses the batch's in eval too", () => {
  scope(() => {
    const bn = new BatchNorm1d(4, { affine: false, trackRunningStats: false });
    assert.equal(bn.stateDict().size, 0);
    const x = tensorOf([5, 4], 2, 3);
    const train = bn.forward(x).toArray();
    bn.eval();
    assert.deepEqual(bn.forward(x).toArray(), train, "eval = batch statistics");
    assert.deepEqual(new BatchNorm1d(4).forward(tensorOf([2, 4, 7], 3)).shape, [2, 4, 7]);
    assert.throws(
      () => new BatchNorm1d(4).forward(zeros([2, 4, 1, 1])),
      /expected 2D or 3D input \(got 4D input/,
    );
    assert.throws(() => new BatchNorm1d(0), /numFeatures must be a positive integer, got 0/);
    assert.throws(
      () => new BatchNorm1d(4, { momentum: -0.1 }),
      /momentum must be in \[0, 1\] or null/,
    );
  });
});

class Block extends Layer {
  readonly conv: Conv2d;
  readonly bn: BatchNorm2d;
  readonly extras: Layer[];
  constructor() {
    super();
    this.conv = this.registerModule("conv", new Conv2d(2, 4, 3, { padding: 1 }));
    this.bn = this.registerModule("bn", new BatchNorm2d(4));
    this.extras = [this.bn];
  }
  forward(x: Tensor): Tensor {
    return this.bn.forward(this.conv.forward(x));
  }
}

Deno.test("convertSyncBatchNorm replaces every batch norm — child entries, fields and arrays — sharing its tensors", () => {
  const model = new Sequential(
    new Block(),
    new ReLU(),
    new BatchNorm2d(4),
    new Flatten(),
    new Linear(4 * 9, 2),
  );
  const before = model.stateDict();
  const bn0 = (model.layers[0] as Block).bn;
  const opt = model.parameters();
  const converted = convertSyncBatchNorm(model, null);
  assert.equal(converted, model);
  const block = model.layers[0] as Block;
  assert.ok(block.bn instanceof SyncBatchNorm, "field replaced");
  assert.ok(block.extras[0] instanceof SyncBatchNorm, "array element replaced");
  assert.ok(model.layers[2] instanceof SyncBatchNorm, "Sequential layer replaced");
  assert.ok(
    block.children().find(([n]) => n === "bn")![1] instanceof SyncBatchNorm,
    "child entry replaced",
  );
  assert.equal(block.bn.weight, bn0.weight, "parameters shared");
  assert.equal(block.bn.runningMean, bn0.runningMean, "buffers shared");
  assert.deepEqual([...model.stateDict().keys()], [...before.keys()]);
  assert.deepEqual(model.parameters(), opt, "an optimizer built before still holds the parameters");
  scope(() => {
    const x = tensorOf([3, 2, 3, 3], 4);
    // without a process group (or with one rank) it is batch norm of this process's batch
    const ref = new Sequential(
      new Block(),
      new ReLU(),
      new BatchNorm2d(4),
      new Flatten(),
      new Linear(4 * 9, 2),
    );
    ref.loadStateDict(
      new Map(
        [...model.stateDict()].map(([k, t]) => [k, {
          shape: t.shape,
          dtype: t.dtype,
          bytes: () => t.toBytes(),
        }]),
      ),
    );
    assert.deepEqual(model.forward(x).toArray(), ref.forward(x).toArray());
    ref.dispose();
  });
  assert.ok(
    convertSyncBatchNorm(new BatchNorm1d(3)) instanceof SyncBatchNorm,
    "a batch norm at the root is returned converted",
  );
  model.dispose();
});

Deno.test("Conv2d, pooling, Flatten and Identity are constructed as PyTorch's", () => {
  scope(() => {
    const conv = new Conv2d(4, 6, [3, 1], { stride: 2, padding: [1, 0], groups: 2, bias: false });
    assert.deepEqual(conv.weight.shape, [6, 2, 3, 1]);
    assert.equal(conv.bias, null);
    assert.deepEqual([...conv.stateDict().keys()], ["weight"]);
    const x = zeros([2, 4, 8, 8]);
    assert.deepEqual(conv.forward(x).shape, [2, 6, 4, 4]);
    assert.deepEqual(new MaxPool2d(2).forward(x).shape, [2, 4, 4, 4]);
    assert.deepEqual(new AvgPool2d(3, { stride: 1, padding: 1 }).forward(x).shape, [2, 4, 8, 8]);
    assert.deepEqual(new AdaptiveAvgPool2d([2, 1]).forward(x).shape, [2, 4, 2, 1]);
    assert.deepEqual(new Flatten().forward(x).shape, [2, 256]);
    assert.deepEqual(new Flatten(0, 2).forward(x).shape, [64, 8]);
    assert.equal(new Identity().forward(x), x);
    assert.throws(
      () => new Conv2d(4, 6, 3, { groups: 4 }),
      /groups=4 must divide inChannels=4 and outChannels=6/,
    );
    assert.throws(() => new Conv2d(4, 6, 0), /kernelSize must be an integer >= 1/);
    assert.throws(() => new MaxPool2d([2, 2, 2]), /kernelSize must be an integer >= 1 or a pair/);
    conv.dispose();
  });
});

Deno.test("Sequential runs batch norm, ReLU and MaxPool2d(2) as one op with the layers' bits, and only then", () => {
  /** Whether the model's forward fused, and what it produced, from the same data. */
  const run = (
    make: () => Layer[],
    fused: boolean,
    training: boolean,
  ): { fusions: number; arrays: ArrayLike<number | bigint>[] } => {
    manualSeed(3);
    const layers = make();
    const model = new Sequential(...layers);
    model.train(training);
    let fusions = 0;
    for (const l of layers) {
      const bn = l as Partial<{ forwardReluMaxPool2d: (x: Tensor) => Tensor }>;
      const f = bn.forwardReluMaxPool2d;
      if (f) bn.forwardReluMaxPool2d = (x) => (fusions++, f.call(l, x));
    }
    return scope(() => {
      const x = fromArray(rand(3 * 2 * 10 * 9, 5), [3, 2, 10, 9]);
      x.requiresGrad = true;
      let y = x;
      if (fused) y = model.forward(x);
      else for (const l of layers) y = l.forward(y); // each layer on its own
      backward(sum(mul(y, fromArray(rand(y.numel, 6), [...y.shape]))));
      const arrays = [y.toArray(), x.grad!.toArray()];
      for (const [, t] of model.namedParameters()) arrays.push(t.grad!.toArray());
      for (const [, t] of model.stateDict()) arrays.push(t.toArray());
      return { fusions, arrays };
    });
  };
  const block = (pool: () => Layer, relu: () => Layer = () => new ReLU()) => () => [
    new Conv2d(2, 4, 3, { padding: 1 }),
    new BatchNorm2d(4),
    relu(),
    pool(),
    new Flatten(),
  ];
  const same = (a: ArrayLike<number | bigint>[], b: ArrayLike<number | bigint>[], what: string) =>
    a.forEach((arr, i) =>
      assert.ok(Array.from(arr).every((e, k) => Object.is(e, b[i]![k])), `${what}: tensor ${i}`)
    );
  for (const training of [true, false]) {
    const make = block(() => new MaxPool2d(2));
    const fused = run(make, true, training), plain = run(make, false, training);
    assert.equal(fused.fusions, 1);
    assert.equal(plain.fusions, 0);
    same(fused.arrays, plain.arrays, `training=${training}`);
    const sync = () => [new SyncBatchNorm(2), new ReLU(), new MaxPool2d([2, 2], { stride: 2 })];
    assert.equal(run(sync, true, training).fusions, 1, "SyncBatchNorm, explicit stride");
  }
  // anything else runs layer by layer
  class LeakyReLU extends ReLU {
    override forward(x: Tensor): Tensor {
      return x;
    }
  }
  for (
    const [what, make] of [
      ["MaxPool2d(3)", block(() => new MaxPool2d(3))],
      ["stride 1", block(() => new MaxPool2d(2, { stride: 1 }))],
      ["padding", block(() => new MaxPool2d(2, { padding: 1 }))],
      ["ceil mode", block(() => new MaxPool2d(2, { ceilMode: true }))],
      ["a ReLU subclass", block(() => new MaxPool2d(2), () => new LeakyReLU())],
    ] as const
  ) {
    assert.equal(run(make, true, true).fusions, 0, what);
  }
});
