/**
 * A hand-written loop stops like the Trainer: the launcher's SIGTERM (a
 * preemption) or SIGINT reaches every rank, stopRequested(pg) turns true on
 * all of them at the same step, rank 0 saves a checkpoint, and every rank
 * exits 0 well within --grace; the launcher exits 128+N as documented.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { onlyRunDir, REPO, TestRun, waitUntil } from "../launch/launch_helpers.ts";

const SCRIPT = join(REPO, "tests/train/scripts/own_loop_stop.ts");

for (const sig of ["SIGTERM", "SIGINT"] as const) {
  Deno.test(`a launched own loop polling stopRequested() saves and exits 0 on ${sig}`, async () => {
    const t = new TestRun();
    try {
      const l = t.launch(["--nproc", "2", "--grace", "60", "--log-ranks", "all", SCRIPT]);
      await t.ranksStarted(2, 120_000); // both ranks are past step 3, polling every step
      const sentAt = performance.now();
      Deno.kill(l.pid, sig);
      const r = await t.finish(l, 120_000);
      const took = performance.now() - sentAt;
      assert.equal(r.code, sig === "SIGTERM" ? 143 : 130, r.stderr);
      assert.match(r.stderr, /node 0's ranks ended: rank 0 exit code 0, rank 1 exit code 0/);
      assert.ok(took < 60_000, `stopped after ${took} ms; the grace is 60 s`);
      const steps = [...r.stdout.matchAll(/rank (\d) stopped on request at step (\d+)/g)]
        .map((m) => Number(m[2]));
      assert.equal(steps.length, 2, r.stdout);
      assert.equal(steps[0], steps[1], "every rank stopped at the same step");
      const ck = join(onlyRunDir(t.dir), "checkpoints");
      assert.equal(
        Deno.readTextFileSync(join(ck, "latest")).trim(),
        `step-${String(steps[0]).padStart(8, "0")}`,
      );
      const rec = JSON.parse(Deno.readTextFileSync(join(onlyRunDir(t.dir), "run.json")));
      assert.equal(rec.status, "interrupted");
    } finally {
      await t.cleanup();
    }
  });
}

const TUTORIAL = join(REPO, "examples/ddp_tutorial.ts");

function hasFashionMnist(): boolean {
  try {
    return Deno.statSync("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").isFile;
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "the DDP tutorial stops on SIGTERM mid-epoch, saves, and the next launch resumes at that batch",
  ignore: !hasFashionMnist(),
  async fn() {
    const t = new TestRun();
    try {
      const runDir = join(t.dir, "tutorial");
      const args = ["--nproc", "2", "--grace", "60", "--run-dir", runDir, TUTORIAL];
      const l = t.launch([...args, "1000", "32", "--limit", "512"]);
      await waitUntil(() => /Epoch 1 \| Batchsize/.test(l.stdout()), 180_000, "epoch 1 began");
      Deno.kill(l.pid, "SIGTERM");
      const r = await t.finish(l, 120_000);
      assert.equal(r.code, 143, r.stderr);
      assert.match(r.stderr, /node 0's ranks ended: rank 0 exit code 0, rank 1 exit code 0/);
      const m = /stopped on request at epoch (\d+), batch (\d+); checkpoint saved/.exec(r.stdout);
      assert.ok(m, r.stdout);
      const [epoch, batch] = [Number(m[1]), Number(m[2])];
      // One more epoch than the stopped one: it resumes inside it, after the saved batch.
      const again = await t.finish(
        t.launch([...args, String(epoch + 1), "32", "--limit", "512"]),
        180_000,
      );
      assert.equal(again.code, 0, again.stderr);
      assert.match(
        again.stdout,
        new RegExp(`resuming training in epoch ${epoch} after batch ${batch}`),
      );
    } finally {
      await t.cleanup();
    }
  },
});
