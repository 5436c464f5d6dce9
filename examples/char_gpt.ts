/**
 * A character-level GPT on the fortunes corpus (Debian package fortunes),
 * written as a loop of its own and built to be PyTorch's twin: the model,
 * its init (torch.manual_seed(1337)), the random windows (a generator seeded
 * 1000 + rank) and AdamW 3e-4 are those of the peer
 * scripts/peers/char_gpt.py, so the loss curves can be laid side by side.
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
  scope,
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
const lossBuf = new Float64Array(1);

try {
  const t0 = performance.now();
  let tWarm = t0;
  for (let step = 1; step <= steps; step++) {
    const loss = scope(() => {
      const [x, y] = train.randomWindowBatch(gen, BATCH);
      optimizer.zeroGrad();
      const l = autocast(precision === "bf16" ? "bf16" : "f32", () => model.loss(x!, y!));
      ddp.backward(l); // each gradient bucket's allReduce starts as soon as it is complete
      ddp.finishGradSync();
      optimizer.step();
      return l.item();
    });
    lossBuf[0] = loss;
    pg.allReduce(lossBuf, "avg");
    if (step === 10) tWarm = performance.now();
    if (pg.rank === 0 && (step === 1 || step % 10 === 0)) {
      console.log(`step ${step}: loss ${lossBuf[0]!.toFixed(4)}`);
    }
  }
  const tokensPerS = ((steps - 10) * BATCH * BLOCK * pg.size) /
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
      `held-out loss ${evalLoss.toFixed(4)}, ${
        Math.round(tokensPerS)
      } tokens/s (steps 11..${steps})`,
    );
    new CheckpointManager(`${world.runDir ?? "runs/char_gpt"}/checkpoints`, { rank: 0 })
      .save({ step: steps, files: [tensorFile("model", ddp.stateDict())], state: { steps } });
  }
  pg.barrier("done");
} finally {
  pg.close();
}
