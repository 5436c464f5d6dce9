/**
 * The DDP tutorial's loop of its own (examples/ddp_tutorial.ts) leaves the
 * records a Trainer run leaves: on 2 ranks and on 1 rank its losses, data
 * order and config are compared by `dtrain diff`, `dtrain report` plots its
 * losses and evaluations, and launched again into its run directory it
 * resumes from its checkpoint with the step numbers and attempts continuing.
 * Skipped without Debian's dataset-fashion-mnist.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { readRunDir } from "../../run_record/format.ts";
import { compareRuns } from "../../record_tools/compare.ts";
import { reportMain } from "../../record_tools/report.ts";
import { DEFAULT_LOSS_TOL } from "../../record_tools/diff.ts";
import { TestRun } from "../launch/launch_helpers.ts";
import { FASHION_MNIST_DIR } from "../../data/fashion_mnist.ts";

const EXAMPLE = fileURLToPath(new URL("../../examples/ddp_tutorial.ts", import.meta.url));
const LIMIT = "512"; // training images: 8 steps per epoch of 2 x 32

function hasFashionMnist(): boolean {
  try {
    return Deno.statSync(join(FASHION_MNIST_DIR, "train-images-idx3-ubyte.gz")).isFile;
  } catch {
    return false;
  }
}

if (!hasFashionMnist()) {
  console.warn(
    `tests/train/own_loop_records_test.ts: skipped, no Fashion-MNIST in ${FASHION_MNIST_DIR} (Debian package dataset-fashion-mnist)`,
  );
}

Deno.test({
  name: "a hand-written DDP loop with a RunLog gets report, diff and resume like the Trainer",
  ignore: !hasFashionMnist(),
  async fn() {
    const t = new TestRun();
    try {
      const two = join(t.dir, "two"), one = join(t.dir, "one");
      const launch = async (dir: string, nproc: number, args: string[]) => {
        const r = await t.finish(
          t.launch(["--nproc", String(nproc), "--run-dir", dir, EXAMPLE, ...args]),
          180_000,
        );
        assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
        return r;
      };
      // The tutorial's batch is per rank: 2 x 32 and 1 x 64 train on the same global batches.
      const first = await launch(two, 2, ["2", "32", "--limit", LIMIT]);
      assert.match(first.stdout, /\[rank 0\] Epoch 1 \| Batchsize: 32 \| Steps: 8/);
      assert.doesNotMatch(first.stderr, /DistributedSampler.*again/, "the peek is not a pass");
      await launch(one, 1, ["2", "64", "--limit", LIMIT]);

      const a = readRunDir(two), b = readRunDir(one);
      assert.deepEqual(a.missing, []);
      assert.equal(a.metrics.length, 16);
      assert.deepEqual(a.evals.map((e) => [e.step, Object.keys(e.metrics)]), [
        [8, ["test accuracy", "test loss"]],
        [16, ["test accuracy", "test loss"]],
      ]);
      assert.deepEqual(a.dataOrder.map((d) => [d.epoch, d.rank, d.count]), [
        [0, 0, 256],
        [0, 1, 256],
        [1, 0, 256],
        [1, 1, 256],
      ]);
      const c = compareRuns(a, b, { lossTol: DEFAULT_LOSS_TOL });
      assert.ok(
        c.compared.some((x) => x.startsWith("losses (16 steps")),
        `losses are compared: ${JSON.stringify(c)}`,
      );
      assert.ok(!c.findings.some((f) => f.topic === "loss"), "the same global batches");
      assert.ok(c.findings.some((f) => /batchSize 32 vs 64/.test(f.headline)));

      const out: string[] = [];
      assert.equal(await reportMain([two], (l) => out.push(l), (l) => out.push(l)), 0, out.join());
      const html = Deno.readTextFileSync(join(two, "report.html"));
      assert.match(html, /test accuracy/);

      // Launched again into its directory with one more epoch: resumes after epoch 1.
      const again = await launch(two, 2, ["3", "32", "--limit", LIMIT]);
      assert.match(again.stdout, /resuming training from the checkpoint of epoch 1/);
      const resumed = readRunDir(two);
      assert.deepEqual(resumed.run.attempts.map((x) => x.exitCode), [0, 0]);
      assert.deepEqual(
        resumed.metrics.map((m) => [m.step, m.attempt]).filter(([s]) => s! % 8 === 0),
        [[8, 0], [16, 0], [24, 1]],
      );
      assert.deepEqual(resumed.evals.map((e) => [e.step, e.epoch, e.attempt]), [
        [8, 0, 0],
        [16, 1, 0],
        [24, 2, 1],
      ]);
    } finally {
      await t.cleanup();
    }
  },
});
