/**
 * Tests of checkpoint rotation: the pure policy (keepLast, keepEvery, the
 * checkpoint just saved), and on disk that old checkpoints go only after the
 * new one is complete, never the only good one, and never unrelated files.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type CheckpointIO,
  CheckpointManager,
  denoCheckpointIO,
  FOLDER_LOCK_FILE,
} from "../../../train/checkpoint/manager.ts";
import { stepsToDelete } from "../../../train/checkpoint/rotation.ts";
import { FullDiskIO } from "../scripts/checkpoint_faulty_io.ts";
import { assertHoldsPayload, payloadForStep } from "../scripts/checkpoint_payloads.ts";

function withTempDir(fn: (dir: string) => void): void {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-rot-" });
  try {
    fn(dir);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

const steps = (m: CheckpointManager) => m.list().map((c) => c.step);
/** The folder's entries, without the lock file its writer holds (folder_lock.ts). */
const names = (dir: string) =>
  [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n !== FOLDER_LOCK_FILE).sort();

Deno.test("stepsToDelete() keeps the newest keepLast, every keepEvery-th and the one just saved", () => {
  assert.deepEqual(stepsToDelete([1, 2, 3, 4, 5], 5, { keepLast: 2 }), [1, 2, 3]);
  assert.deepEqual(
    stepsToDelete([5, 1, 4, 2, 3], 5, { keepLast: 2 }),
    [1, 2, 3],
    "input order does not matter",
  );
  assert.deepEqual(stepsToDelete([10, 20, 30, 40], 40, { keepLast: 2, keepEvery: 20 }), [10]);
  assert.deepEqual(
    stepsToDelete([0, 3, 6, 7, 8], 8, { keepLast: 1, keepEvery: 3 }),
    [7],
    "step 0 is a multiple too",
  );
  assert.deepEqual(stepsToDelete([1, 2], 2, { keepLast: 3 }), []);
  assert.deepEqual(
    stepsToDelete([10, 20, 30], 15, { keepLast: 1 }),
    [10, 20],
    "a resumed run's older save is kept",
  );
  assert.throws(
    () => stepsToDelete([1], 1, { keepLast: 0 }),
    /keepLast must be an integer >= 1, got 0/,
  );
});

Deno.test("CheckpointManager.save() rotates to the newest keepLast checkpoints", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, { rank: 0, keepLast: 2, fsync: false });
    for (let s = 1; s <= 5; s++) manager.save(payloadForStep(s));
    assert.deepEqual(steps(manager), [4, 5]);
    assert.deepEqual(names(root), ["latest", "step-00000004", "step-00000005"]);
    assertHoldsPayload(manager.load("step-00000004"), payloadForStep(4));
  });
});

Deno.test("CheckpointManager.save() also keeps every keepEvery-th step forever", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, {
      rank: 0,
      keepLast: 2,
      keepEvery: 3,
      fsync: false,
    });
    for (let s = 1; s <= 8; s++) manager.save(payloadForStep(s));
    assert.deepEqual(steps(manager), [3, 6, 7, 8]);
  });
});

Deno.test("CheckpointManager.save() deletes old checkpoints only after latest names the new one", () => {
  withTempDir((root) => {
    const log: string[] = [];
    const recording: CheckpointIO = {
      ...denoCheckpointIO,
      rename: (from, to) => {
        log.push(`rename ${from.slice(root.length + 1)} -> ${to.slice(root.length + 1)}`);
        denoCheckpointIO.rename(from, to);
      },
      remove: (path) => {
        log.push(`remove ${path.slice(root.length + 1)}`);
        denoCheckpointIO.remove(path);
      },
    };
    const manager = new CheckpointManager(root, {
      rank: 0,
      keepLast: 1,
      fsync: false,
      io: recording,
    });
    manager.save(payloadForStep(1));
    log.length = 0;
    manager.save(payloadForStep(2));
    const commit = log.findIndex((l) => /^rename \.tmp-latest-\S+ -> latest$/.test(l));
    const firstTouch = log.findIndex((l) => l.includes("step-00000001"));
    assert.ok(
      commit >= 0 && firstTouch > commit,
      `latest must be replaced before step 1 is touched: ${log.join(" | ")}`,
    );
    assert.match(
      log[firstTouch]!,
      /^rename step-00000001 -> \.tmp-deleting-step-00000001-\d+-[0-9a-f]{8}$/,
    );
    assert.match(log[firstTouch + 1]!, /^remove \.tmp-deleting-step-00000001-/);
    assert.deepEqual(steps(manager), [2]);
  });
});

Deno.test("CheckpointManager.save() never deletes the only good checkpoint when the new save fails", () => {
  withTempDir((root) => {
    new CheckpointManager(root, { rank: 0, keepLast: 1 }).save(payloadForStep(1));
    const failing = new CheckpointManager(root, {
      rank: 0,
      keepLast: 1,
      io: new FullDiskIO({ byteBudget: 500 }),
    });
    assert.throws(() => failing.save(payloadForStep(2)), /No space left on device/);
    const manager = new CheckpointManager(root, { rank: 0, keepLast: 1 });
    assert.deepEqual(steps(manager), [1]);
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(1));
  });
});

Deno.test("CheckpointManager.save() keeps a resumed run's older save next to the newer ones", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, { rank: 0, keepLast: 1, fsync: false });
    manager.save(payloadForStep(5));
    manager.save(payloadForStep(3)); // resumed from an earlier checkpoint: 3 is what latest names now
    assert.deepEqual(steps(manager), [3, 5]);
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(3));
  });
});

Deno.test("CheckpointManager.save() rotation leaves unrelated files and incomplete step dirs alone", () => {
  withTempDir((root) => {
    Deno.writeTextFileSync(join(root, "notes.txt"), "mine");
    Deno.mkdirSync(join(root, "step-00000001")); // no manifest: not a complete checkpoint
    Deno.mkdirSync(join(root, "step-1"));
    Deno.mkdirSync(join(root, ".tmp-my-own-things"));
    const manager = new CheckpointManager(root, {
      rank: 0,
      keepLast: 1,
      fsync: false,
      onWarning: () => {},
    });
    for (let s = 2; s <= 4; s++) manager.save(payloadForStep(s));
    assert.deepEqual(names(root), [
      ".tmp-my-own-things",
      "latest",
      "notes.txt",
      "step-00000001",
      "step-00000004",
      "step-1",
    ]);
  });
});
