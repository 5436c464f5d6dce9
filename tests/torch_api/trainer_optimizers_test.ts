/**
 * The Trainer with optim.name "adam", "adadelta", "adagrad" and "rmsprop":
 * it builds that optimizer with the configured settings, saves its state in
 * the checkpoints, and a run stopped after 3 steps and resumed to 6 ends
 * with the same weights, bit for bit, as an uninterrupted 6-step run (so the
 * optimizer's state and step count came back).
 */
import assert from "node:assert/strict";
import { join } from "node:path";

const SCRIPT = new URL("./scripts/trainer_optim.ts", import.meta.url).pathname;
const DENO = Deno.execPath();

interface Out {
  optimizer: string;
  hyper: Record<string, unknown>;
  weights: string[];
}

function run(optim: string, steps: number, runDir: string, out: string): Out {
  const r = new Deno.Command(DENO, {
    args: ["run", "-A", SCRIPT],
    env: { OPTIM: optim, STEPS: String(steps), RUN_DIR: runDir, OUT: out, DTRAIN_NO_CHECK: "1" },
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  const dec = new TextDecoder();
  assert.equal(
    r.code,
    0,
    `${optim} ${steps} steps failed:\n${dec.decode(r.stdout)}\n${dec.decode(r.stderr)}`,
  );
  return JSON.parse(Deno.readTextFileSync(out));
}

const CLASSES: Record<string, string> = {
  adam: "Adam",
  adadelta: "Adadelta",
  adagrad: "Adagrad",
  rmsprop: "RMSprop",
};

Deno.test("Trainer: the optimizers named in optim.name train, checkpoint and resume bit-identically", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-optim-" });
  try {
    const finals = new Map<string, string[]>();
    for (const [name, cls] of Object.entries(CLASSES)) {
      const whole = run(name, 6, join(dir, `${name}-whole`), join(dir, `${name}-whole.json`));
      assert.equal(whole.optimizer, cls);
      if (name === "rmsprop") {
        assert.deepEqual([whole.hyper.momentum, whole.hyper.centered], [0.5, true]);
      }
      run(name, 3, join(dir, `${name}-split`), join(dir, `${name}-first.json`));
      const resumed = run(name, 6, join(dir, `${name}-split`), join(dir, `${name}-resumed.json`));
      assert.deepEqual(resumed.weights, whole.weights, `${name}: the resumed run's weights differ`);
      finals.set(name, whole.weights);
    }
    // each optimizer took its own path
    assert.equal(new Set([...finals.values()].map((w) => w.join())).size, 4);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
