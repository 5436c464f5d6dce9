/**
 * A character-level GPT on the fortunes corpus (Debian package fortunes),
 * written as a loop of its own and built to be PyTorch's twin: the model,
 * its init (torch.manual_seed(1337)), the random windows (a generator seeded
 * 1000 + rank) and AdamW 3e-4 are those of the peer
 * scripts/peers/char_gpt.py, so the loss curves can be laid side by side.
 * A RunLog records each step (and the drawn window offsets) and the
 * held-out loss in the run directory, for `dtrain report` and `dtrain diff`.
 *
 *   ./dtrain --nproc 2 examples/char_gpt.ts [steps=200] [--precision bf16]
 */
import {
  AdamW,
  autocast,
  CharWindows,
  CheckpointManager,
  DistributedDataParallel,
  getWorld,
  GPT,
  initProcessGroup,
  loadCharCorpus,
  manualSeed,
  noGrad,
  RunLog,
  scope,
  stopRequested,
  tensorFile,
  TorchGenerator,
} from "dtrain";

const args = Deno.args.filter((a) => !a.startsWith("--"));
const steps = Number(args[0] ?? 200);
const precision = Deno.args.includes("--precision")
  ? Deno.args[Deno.args.indexOf("--precision") + 1]
  : "f32";
const BATCH = 16, BLOCK = 128;

const world = getWorld();
const pg = initProcessGroup();
const corpus = loadCharCorpus();
const train = new CharWindows(corpus.train, BLOCK), val = new CharWindows(corpus.val, BLOCK);
manualSeed(1337);
const model = new GPT({
  vocabSize: 256,
  blockSize: BLOCK,
  nLayer: 4,
  nHead: 4,
  nEmbd: 128,
  maskBuffer: false,
});
const ddp = new DistributedDataParallel(model, pg);
const optimizer = new AdamW(ddp.parameters(), { lr: 3e-4 });
const gen = new TorchGenerator(1000 + pg.rank);
const log = new RunLog({
  config: {
    batch: BATCH,
    block: BLOCK,
    nLayer: 4,
    nHead: 4,
    nEmbd: 128,
    lr: 3e-4,
    steps,
    precision,
  },
  seed: 1337,
  processGroup: pg,
  optimizer,
  totalSteps: steps,
  tokensPerSample: BLOCK,
});
// scripts/bench_ddp.ts times this script side by side with PyTorch's w2_gpt.py: the same stamps.
const bench = Deno.env.get("DTRAIN_BENCH") === "1";
let tFirst = 0;

let heldOut = NaN;
try {
  const t0 = performance.now();
  let tWarm = t0;
  let ran = steps;
  for (let step = 1; step <= steps; step++) {
    const offsets = train.randomOffsets(gen, BATCH);
    const loss = scope(() => {
      const [x, y] = train.getBatch(offsets);
      optimizer.zeroGrad();
      const l = autocast(precision === "bf16" ? "bf16" : "f32", () => model.loss(x!, y!));
      ddp.backward(l); // buckets reduce as they complete; returns with the gradients averaged
      optimizer.step();
      return l.item();
    });
    log.step({ loss, samples: BATCH, indices: offsets }); // prints the mean over ranks every 10 steps
    if (step === 1) tFirst = Date.now() / 1000;
    if (step === 10) tWarm = performance.now();
    // Ctrl-C or a preemption's SIGTERM: every rank stops here, at the same step; the held-out
    // loss and the checkpoint below are written as at the end.
    if (await stopRequested(pg)) {
      log.print(`stopped on request after step ${step}`);
      ran = step;
      break;
    }
  }
  const tokensPerS = ((ran - 10) * BATCH * BLOCK * pg.size) /
    ((performance.now() - tWarm) / 1000);
  if (pg.rank === 0) {
    // The peer's held-out figure: 64 fixed windows (generator 4242), evaluated 16 at a time.
    const g = new TorchGenerator(4242);
    const [xs, ys] = val.randomWindowBatch(g, 64);
    const evalLoss = noGrad(() =>
      scope(() => {
        let s = 0;
        for (let i = 0; i < 64; i += 16) {
          const [xb, yb] = [xs!, ys!].map((t) =>
            t.view([64, BLOCK]).subview(i * BLOCK, [16, BLOCK])
          );
          s += model.loss(xb!, yb!).item();
        }
        return s / 4;
      })
    );
    console.log(
      `held-out loss ${evalLoss.toFixed(4)}, ${Math.round(tokensPerS)} tokens/s (steps 11..${ran})`,
    );
    if (bench) {
      // llm.c's count of a training step's arithmetic: 6 per parameter and 6·L·C·T for attention.
      const params = model.parameters().reduce((n, p) => n + p.numel, 0);
      const flopsPerToken = 6 * params + 6 * 4 * 128 * BLOCK;
      console.log(
        "BENCH " +
          JSON.stringify({
            t_first_step: tFirst,
            tokens_per_s: tokensPerS,
            flops_per_token: flopsPerToken,
          }),
      );
    }
    heldOut = evalLoss;
    new CheckpointManager(`${world.runDir ?? "runs/char_gpt"}/checkpoints`, { rank: 0 })
      .save({ step: ran, files: [tensorFile("model", ddp.stateDict())], state: { steps: ran } });
  }
  // Rank 0 computed the peer's figure; every rank takes part in recording it.
  const shared = Float64Array.of(heldOut);
  pg.broadcast(shared, 0);
  log.eval({ "held-out loss": shared[0]! });
  log.close();
  pg.barrier("done");
} finally {
  pg.close();
}
