/**
 * Two runs never share a run directory: a live launcher holds a lock on it
 * (an flock the OS drops when the launcher dies), a second launcher on the
 * same --run-dir refuses at once naming the holder's pid and touches
 * nothing, a lock left by a SIGKILLed launcher is taken over, and checkpoint
 * cleanup leaves temporary folders alone while their writer is alive.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, REPO, TestRun, waitUntil } from "../launch/launch_helpers.ts";
import { lockRunDir, RunDirBusy } from "../../launch/run_lock.ts";
import { CheckpointManager, FOLDER_LOCK_FILE } from "../../train/checkpoint/manager.ts";
import { payloadForStep } from "../train/scripts/checkpoint_payloads.ts";

const HOLD = join(REPO, "tests/faults/scripts/hold.ts");

function listing(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
}

Deno.test("a second launcher on a live run's directory refuses at once, naming the holder's pid", async () => {
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "shared-run");
    const first = t.launch(["--run-dir", runDir, "--nproc", "1", HOLD]);
    await t.ranksStarted(1);
    const before = listing(runDir);
    const launchJson = Deno.readTextFileSync(join(runDir, "launch.json"));
    const second = await t.finish(t.launch(["--run-dir", runDir, "--nproc", "1", HOLD]), 10_000);
    assert.equal(second.code, 2, second.stderr);
    assert.match(
      second.stderr,
      new RegExp(
        `dtrain: Run directory ${runDir} is in use by another dtrain launcher \\(pid ${first.pid} on [^,]+, run \\S+, since \\S+\\): wait for it to end, or choose another --run-dir`,
      ),
    );
    assert.ok(second.elapsedMs < 8000, `took ${second.elapsedMs} ms`);
    assert.deepEqual(listing(runDir), before, "the refused launcher created nothing");
    assert.equal(Deno.readTextFileSync(join(runDir, "launch.json")), launchJson);
    assert.equal(t.pids().size, 1, "the refused launcher started no rank");
    Deno.writeTextFileSync(join(t.pidDir, "release"), "");
    const r = await t.finish(first);
    assert.equal(r.code, 0, r.stderr);
    // After a clean end the directory is free, with nothing to take over.
    Deno.removeSync(join(t.pidDir, "release"));
    const again = t.launch(["--run-dir", runDir, "--nproc", "1", HOLD]);
    await waitUntil(() => /logs in/.test(again.stderr()), 15_000, "the next run started");
    Deno.writeTextFileSync(join(t.pidDir, "release"), "");
    const r2 = await t.finish(again);
    assert.equal(r2.code, 0, r2.stderr);
    assert.doesNotMatch(r2.stderr, /took over/);
  } finally {
    await t.cleanup();
  }
});

Deno.test("the lock of a SIGKILLed launcher is released by the OS and taken over, saying from whom", async () => {
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "crashed-run");
    const first = t.launch(["--run-dir", runDir, "--nproc", "1", HOLD]);
    const pids = await t.ranksStarted(1);
    Deno.kill(first.pid, "SIGKILL");
    await first.done;
    await waitUntil(() => !alive(pids.get(0)!), 5000, "the rank died with its launcher");
    Deno.removeSync(join(t.pidDir, "rank-0.pid"));
    Deno.writeTextFileSync(join(t.pidDir, "release"), "");
    const r = await t.finish(t.launch(["--run-dir", runDir, "--nproc", "1", HOLD]));
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(
        `took over the run directory's lock from run \\S+ \\(pid ${first.pid} on .*\\), which ended without releasing it`,
      ),
    );
  } finally {
    await t.cleanup();
  }
});

Deno.test("lockRunDir() in one process: a second holder is refused until the first releases", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-lock-" });
  try {
    const a = lockRunDir(dir, 0, "run-a");
    assert.throws(
      () => lockRunDir(dir, 0, "run-b"),
      (e: Error) => e instanceof RunDirBusy && e.message.includes(`pid ${Deno.pid}`),
    );
    const other = lockRunDir(dir, 1, "run-a"); // node 1 has a lock file of its own
    a.release();
    const b = lockRunDir(dir, 0, "run-b");
    assert.equal(b.previous, null, "a clean release leaves nothing to take over");
    b.release();
    other.release();
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("checkpoint cleanup removes temporary folders of dead writers only", async () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-writers-" });
  const live = new Deno.Command("sleep", { args: ["30"] }).spawn();
  try {
    const gone = new Deno.Command("true").spawn();
    await gone.status;
    const names = {
      live: `.tmp-step-00000007-${live.pid}-0badf00d`,
      liveAside: `.aside-step-00000002-${live.pid}-0badf00d`,
      dead: `.tmp-step-00000007-${gone.pid}-0badf00d`,
      own: `.tmp-latest-${Deno.pid}-0badf00d`,
    };
    const manager = new CheckpointManager(root, { rank: 0, fsync: false, onWarning: () => {} });
    manager.save(payloadForStep(2));
    for (const n of [names.live, names.liveAside, names.dead]) Deno.mkdirSync(join(root, n));
    Deno.writeTextFileSync(join(root, names.own), "step-00000001\n");
    manager.save(payloadForStep(3));
    assert.deepEqual(
      listing(root).filter((n) => n !== FOLDER_LOCK_FILE), // the writer's own lock (folder_lock.ts)
      [names.liveAside, names.live, "latest", "step-00000002", "step-00000003"].sort(),
      "a live writer's folders stay; a dead writer's and this process's own are removed",
    );
    live.kill("SIGKILL");
    await live.status;
    manager.save(payloadForStep(4));
    assert.ok(!listing(root).includes(names.live), "once its writer is gone, it is removed");
  } finally {
    try {
      live.kill("SIGKILL");
    } catch { /* already gone */ }
    await live.status;
    Deno.removeSync(root, { recursive: true });
  }
});
