/**
 * DDP behaviours under the launcher, chosen by CASE:
 * - "mismatch": rank 1 builds a wider hidden layer → construction must fail naming the difference;
 * - "unused": a parameter gets no gradient → backward must fail naming it;
 * - "broadcast": ranks init with different seeds → after DDP construction all hold rank 0's weights
 *   (and a bf16 autocast forward uses them, not a cast of its own weights cached before), and after
 *   a step with different data per rank the weights are still identical (and it prints the
 *   digest of the synced gradients and how many buckets lie in the group's shared region);
 * - "zero2": a model of 256 KiB of gradients in a bucket in the shared region, one step, then
 *   ZeRO-2 shards the gradients: prints the resident bytes of this rank's region before and after
 *   (the bucket's pages given back), whether the bucket is still shared, and a step's weights;
 * - "api": the ways of writing the step (ddp.backward in one call, a deferred sync finished by
 *   finishGradSync, backward with ddp.gradReady, noSync accumulation, one bucket per parameter
 *   with an unused one allowed) print their weights' digests, whether ddp.backward returned with
 *   the gradients already equal on every rank, and the misuses (a plain backward, a forward before
 *   a deferred sync's finishGradSync) print their errors.
 */
import {
  AdamW,
  autocast,
  backward,
  crossEntropy,
  DistributedDataParallel,
  fromArray,
  initProcessGroup,
  Linear,
  manualSeed,
  ReLU,
  scope,
  Sequential,
  type Tensor,
  ZeroRedundancyOptimizer,
} from "dtrain";
import { createHash } from "node:crypto";

const pg = initProcessGroup();
const mode = Deno.env.get("CASE");
if (mode === "api") {
  apiCases();
  pg.close();
  Deno.exit(0);
}
if (mode === "zero2") {
  zero2Case();
  pg.close();
  Deno.exit(0);
}
manualSeed(pg.rank + 1);
const hidden = mode === "mismatch" && pg.rank === 1 ? 16 : 8;
const model = new Sequential(new Linear(4, hidden), new ReLU(), new Linear(hidden, 2));
const extra = new Linear(2, 2);
if (mode === "unused") {
  (model as unknown as { registerModule(n: string, m: unknown): void }).registerModule("3", extra);
}
/** The digest of a bf16 autocast forward of a fixed input (the same on every rank). */
const forwardBf16 = () =>
  scope(() => {
    const x = fromArray(new Float32Array(12).map((_, i) => i * 0.25 - 1), [3, 4]);
    return createHash("sha256").update(autocast("bf16", () => model.forward(x)).toBytes()).digest(
      "hex",
    );
  });
forwardBf16(); // caches this rank's own weights' bf16 copies
const ddp = new DistributedDataParallel(model, pg);
const digest = () => {
  const h = createHash("sha256");
  for (const p of model.parameters()) h.update(p.toBytes());
  return h.digest("hex");
};
const atStart = digest();
const bf16AtStart = forwardBf16();
const opt = new AdamW(ddp.parameters());
let grads = "";
scope(() => {
  const x = fromArray(new Float32Array(12).map((_, i) => (i + 1) * (pg.rank + 1) * 0.1), [3, 4]);
  const y = fromArray(new Int32Array([0, 1, pg.rank % 2]), [3]);
  ddp.backward(crossEntropy(ddp.forward(x), y));
  const h = createHash("sha256");
  for (const p of model.parameters()) h.update(p.grad!.toBytes());
  grads = h.digest("hex");
  opt.step();
});
const sharedBuckets = ddp.buckets.filter((b) => b.shared).length;
console.log(
  JSON.stringify({
    rank: pg.rank,
    atStart,
    bf16AtStart,
    grads,
    afterStep: digest(),
    sharedBuckets,
  }),
);
pg.close();

/** One step of each way of writing it, on fresh copies of the same model; prints a JSON line. */
function apiCases(): void {
  const batch = (): [Tensor, Tensor] => [
    fromArray(new Float32Array(12).map((_, i) => (i + 1) * (pg.rank + 1) * 0.1), [3, 4]),
    fromArray(new Int32Array([0, 1, pg.rank % 2]), [3]),
  ];
  const fresh = (extra = false, bucketCapMb = 25) => {
    manualSeed(pg.rank + 1);
    const m = new Sequential(new Linear(4, 8), new ReLU(), new Linear(8, 2));
    if (extra) {
      (m as unknown as { registerModule(n: string, m: unknown): void }).registerModule(
        "3",
        new Linear(2, 2),
      );
    }
    const ddp = new DistributedDataParallel(m, pg, {
      bucketCapMb,
      findUnusedParameters: extra,
    });
    return { m, ddp, opt: new AdamW(ddp.parameters()) };
  };
  const digestOf = (m: Sequential) => {
    const h = createHash("sha256");
    for (const p of m.parameters().slice(0, 4)) h.update(p.toBytes()); // the shared layers
    return h.digest("hex");
  };
  const out: Record<string, string> = { rank: String(pg.rank) };
  const run = (
    name: string,
    step: (r: ReturnType<typeof fresh>) => void,
    extra = false,
    cap = 25,
  ) => {
    const r = fresh(extra, cap);
    try {
      scope(() => step(r));
      out[name] = digestOf(r.m);
    } catch (e) {
      out[name] = `error: ${(e as Error).message}`;
    } finally {
      r.ddp.close();
    }
  };
  const gradDigest = (m: Sequential) => {
    const h = createHash("sha256");
    for (const p of m.parameters().slice(0, 4)) h.update(p.grad!.toBytes());
    return h.digest("hex");
  };
  run("ddpBackward", ({ m, ddp, opt }) => {
    const [x, y] = batch();
    ddp.backward(crossEntropy(ddp.forward(x), y));
    out.gradsAfterOneCall = gradDigest(m); // averaged already: the same on every rank
    opt.step();
  });
  run("twoStepsOneCallEach", ({ ddp, opt }) => {
    for (let i = 0; i < 2; i++) {
      const [x, y] = batch();
      opt.zeroGrad();
      ddp.backward(crossEntropy(ddp.forward(x), y)); // the sync is complete: the next forward may run
      opt.step();
    }
  });
  run("deferred", ({ ddp, opt }) => {
    const [x, y] = batch();
    ddp.backward(crossEntropy(ddp.forward(x), y), { deferGradSync: true });
    ddp.finishGradSync();
    opt.step();
  });
  run("finishAfterOneCall", ({ ddp, opt }) => {
    const [x, y] = batch();
    ddp.backward(crossEntropy(ddp.forward(x), y));
    ddp.finishGradSync(); // the two-call form of older scripts: a no-op now
    opt.step();
  });
  run("gradReady", ({ ddp, opt }) => {
    const [x, y] = batch();
    backward(crossEntropy(ddp.forward(x), y), { onLeafGrad: ddp.gradReady });
    ddp.finishGradSync();
    opt.step();
  });
  run(
    "bucketPerParamUnusedAllowed",
    ({ ddp, opt }) => {
      const [x, y] = batch();
      ddp.backward(crossEntropy(ddp.forward(x), y));
      opt.step();
    },
    true,
    1e-6,
  );
  run("accumulated", ({ ddp, opt }) => {
    const [x, y] = batch();
    ddp.noSync(() => ddp.backward(crossEntropy(ddp.forward(x), y)));
    ddp.backward(crossEntropy(ddp.forward(x), y));
    opt.step();
  });
  run("plainBackward", ({ ddp, opt }) => {
    const [x, y] = batch();
    backward(crossEntropy(ddp.forward(x), y));
    opt.step();
  });
  run("unfinished", ({ ddp }) => {
    const [x, y] = batch();
    ddp.backward(crossEntropy(ddp.forward(x), y), { deferGradSync: true });
    try {
      ddp.forward(x);
    } finally {
      ddp.finishGradSync();
    }
  });
  console.log(JSON.stringify(out));
}

/** Resident bytes of this rank's reserved shared region (its mapping, from /proc/self/smaps). */
function regionRss(): number {
  let inside = false, rss = 0;
  for (const line of Deno.readTextFileSync("/proc/self/smaps").split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inside = line.includes(`-pg-sh${pg.rank}-`);
    const m = /^Rss:\s+(\d+) kB/.exec(line);
    if (inside && m) rss += Number(m[1]) * 1024;
  }
  return rss;
}

function zero2Case(): void {
  manualSeed(7);
  const model = new Sequential(new Linear(256, 256), new ReLU(), new Linear(256, 2));
  const ddp = new DistributedDataParallel(model, pg);
  const stepOnce = (opt: { step(): void; zeroGrad(): void }) =>
    scope(() => {
      const x = fromArray(
        new Float32Array(3 * 256).map((_, i) => ((i * 7) % 13) * 0.01 * (pg.rank + 1)),
        [3, 256],
      );
      const y = fromArray(new Int32Array([0, 1, pg.rank % 2]), [3]);
      ddp.backward(crossEntropy(ddp.forward(x), y));
      opt.step();
      opt.zeroGrad();
    });
  const sharedBefore = ddp.buckets.filter((b) => b.shared).length;
  stepOnce(new AdamW(ddp.parameters(), { lr: 1e-2 }));
  const rssBefore = regionRss();
  const zero = new ZeroRedundancyOptimizer(ddp.parameters(), {
    optimizerClass: AdamW,
    ddp,
    shard: "gradients",
    lr: 1e-2,
  });
  const rssAfter = regionRss();
  const sharedAfter = ddp.buckets.filter((b) => b.shared).length;
  stepOnce(zero);
  const h = createHash("sha256");
  for (const p of model.parameters()) h.update(p.toBytes());
  console.log(JSON.stringify({
    rank: pg.rank,
    sharedBefore,
    sharedAfter,
    rssBefore,
    rssAfter,
    weights: h.digest("hex"),
  }));
}
