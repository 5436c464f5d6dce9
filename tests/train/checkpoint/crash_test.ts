/**
 * Every crash point of a save, exhaustively: the disk freezes at the n-th
 * changing file operation (as a kill -9 there would leave it), for every n.
 * After each, the latest checkpoint must verify and hold exactly the old or
 * the new content (the new one once `latest` was replaced), and the next save
 * must clean up and succeed. Real SIGKILLs are in checkpoint_kill_test.ts.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { CheckpointManager } from "../../../train/checkpoint/manager.ts";
import { FrozenDiskIO } from "../scripts/checkpoint_faulty_io.ts";
import { assertHoldsPayload, payloadForStep } from "../scripts/checkpoint_payloads.ts";

/** The pid of a process that has exited: leftovers named after it are an interrupted save's. */
async function deadPid(): Promise<number> {
  const child = new Deno.Command("true").spawn();
  await child.status;
  return child.pid;
}
const DEAD = await deadPid();

interface Scenario {
  /** Saves made before the crashing one. */
  before: number[];
  /** The save that crashes: step and variant. */
  step: number;
  variant: number;
}

interface CrashPoint {
  op: string;
  loadedStep: number;
  loadedVariant: number;
}

/**
 * Runs `scenario` once per crash point until a save completes; returns what
 * loaded after each crash. Each run gets a fresh directory that also holds a
 * leftover of an earlier interrupted save, so cleanup is crashed into too.
 */
function crashAtEveryPoint(scenario: Scenario): CrashPoint[] {
  const points: CrashPoint[] = [];
  for (let n = 1;; n++) {
    const root = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-crash-" });
    try {
      const setup = new CheckpointManager(root, { rank: 0, keepLast: 2, fsync: false });
      for (const s of scenario.before) setup.save(payloadForStep(s));
      Deno.mkdirSync(join(root, `.tmp-step-00000099-${DEAD}-00c0ffee`));
      const io = new FrozenDiskIO(n);
      const crashing = new CheckpointManager(root, {
        rank: 0,
        keepLast: 2,
        io,
        onWarning: () => {},
      });
      const payload = payloadForStep(scenario.step, { variant: scenario.variant });
      try {
        crashing.save(payload);
      } catch (e) {
        if (io.crashedAt === null) throw e;
      }
      if (io.crashedAt === null) {
        assert.equal(
          io.count,
          n - 1,
          "a save without a crash used fewer operations than the crash point",
        );
        return points;
      }
      const op = io.crashedAt.replaceAll(root + "/", "");
      points.push({ op, ...checkAfterCrash(root, scenario, op) });
    } finally {
      Deno.removeSync(root, { recursive: true });
    }
  }
}

/** The latest checkpoint verifies and holds one whole save; then the next save cleans up and succeeds. */
function checkAfterCrash(
  root: string,
  scenario: Scenario,
  op: string,
): { loadedStep: number; loadedVariant: number } {
  const manager = new CheckpointManager(root, {
    rank: 0,
    keepLast: 2,
    fsync: false,
    onWarning: () => {},
  });
  const loaded = manager.loadLatest();
  assert.ok(loaded !== null, `after a crash at ${op}: no checkpoint loads`);
  const variant = loaded.state.variant as number;
  assertHoldsPayload(loaded, payloadForStep(loaded.step, { variant }));
  const next = Math.max(...scenario.before, scenario.step) + 1;
  manager.save(payloadForStep(next));
  const names = [...Deno.readDirSync(root)].map((e) => e.name);
  assert.deepEqual(
    names.filter((n) => n.startsWith(".")),
    [],
    `after a crash at ${op}: leftovers remain after the next save`,
  );
  for (const c of manager.list()) {
    assert.ok(c.complete, `after a crash at ${op}: ${c.dir} is incomplete`);
    const again = manager.load(c.dir);
    assertHoldsPayload(again, payloadForStep(c.step, { variant: again.state.variant as number }));
  }
  assertHoldsPayload(manager.loadLatest()!, payloadForStep(next));
  return { loadedStep: loaded.step, loadedVariant: variant };
}

/** Index of the first crash point whose operation matches `pattern` (it must exist). */
function indexOf(points: CrashPoint[], pattern: RegExp): number {
  const i = points.findIndex((p) => pattern.test(p.op));
  assert.ok(i >= 0, `no crash point matches ${pattern}: ${points.map((p) => p.op).join(" | ")}`);
  return i;
}

Deno.test("CheckpointManager.save() killed at any file operation leaves the old or the new checkpoint, whole", () => {
  const points = crashAtEveryPoint({ before: [1, 2], step: 3, variant: 0 });
  const commit = indexOf(points, /^rename \.tmp-latest-\S+ -> latest$/);
  indexOf(points, /^remove \.tmp-step-00000099-/); // cleanup of the old leftover
  indexOf(points, /^writeFile \.tmp-step-00000003-\S+\/manifest\.json$/);
  indexOf(points, /^rename \.tmp-step-00000003-\S+ -> step-00000003$/);
  const rotation = indexOf(points, /^rename step-00000001 -> \.tmp-deleting-step-00000001-/);
  assert.ok(rotation > commit, "rotation must come after the commit");
  points.forEach((p, i) => {
    // A crash "at" an operation stops before it: up to the commit the previous checkpoint loads, after it the new one.
    assert.equal(p.loadedStep, i <= commit ? 2 : 3, `crash at ${p.op}`);
  });
  assert.ok(points.length >= 12, `only ${points.length} crash points`);
});

Deno.test("CheckpointManager.save() replacing a step, killed at any file operation, keeps that step loadable", () => {
  const points = crashAtEveryPoint({ before: [1, 2], step: 2, variant: 1 });
  const aside = indexOf(points, /^rename step-00000002 -> \.aside-step-00000002-/);
  const into = indexOf(points, /^rename \.tmp-step-00000002-\S+ -> step-00000002$/);
  const commit = indexOf(points, /^rename \.tmp-latest-\S+ -> latest$/);
  indexOf(points, /^remove \.aside-step-00000002-/);
  assert.ok(aside < into && into < commit);
  points.forEach((p, i) => {
    assert.equal(p.loadedStep, 2, `crash at ${p.op}`);
    // The old content until the new directory is in place (latest already names step 2), the new one after.
    assert.equal(p.loadedVariant, i <= into ? 0 : 1, `crash at ${p.op}`);
  });
});
