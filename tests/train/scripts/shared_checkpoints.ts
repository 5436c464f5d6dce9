/**
 * Test rank script: a Trainer whose checkpoint folder is $TEST_CK_DIR (so two
 * runs can be pointed at one folder), saving every step. With TEST_HOLD=1 it
 * records its pid after the first epoch's checkpoints and waits (holding the
 * run live) until $TEST_PID_DIR/release exists. TEST_EPOCHS, TEST_BATCH and
 * TEST_LR change the config a resume is compared with.
 */
import { crossEntropy, Linear, TensorDataset, TorchGenerator, Trainer } from "dtrain";

const gen = new TorchGenerator(3);
const x = gen.normal_(new Float32Array(64 * 4), 0, 1);
const y = Int32Array.from({ length: 64 }, () => gen.randint(0, 2));
const pidDir = Deno.env.get("TEST_PID_DIR")!;
await new Trainer({
  model: () => new Linear(4, 2),
  data: new TensorDataset({ data: x, sampleShape: [4] }, { data: y, sampleShape: [] }),
  loss: (m, [a, b]) => crossEntropy(m.forward(a!), b!),
  evaluate: async (_m, epoch) => {
    if (epoch === 0 && Deno.env.get("TEST_HOLD") === "1") {
      Deno.writeTextFileSync(`${pidDir}/rank-0.pid`, String(Deno.pid));
      for (;;) {
        try {
          Deno.statSync(`${pidDir}/release`);
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    }
    return { zero: 0 };
  },
  config: {
    epochs: Number(Deno.env.get("TEST_EPOCHS") ?? 2),
    data: { globalBatchSize: Number(Deno.env.get("TEST_BATCH") ?? 16) },
    optim: { lr: Number(Deno.env.get("TEST_LR") ?? 1e-3) },
    checkpoint: { dir: Deno.env.get("TEST_CK_DIR")!, everySteps: 1, keepLast: 2, async: false },
    logEvery: 1000,
  },
}).fit();
