/**
 * Tests of checkpoints under damage and failure: a corrupt or partial latest
 * checkpoint is reported and the previous good one loads; a full disk at any
 * point of a save is a clear error that leaves the previous checkpoint intact;
 * leftovers of interrupted saves are cleaned up or restored.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { CheckpointManager, FOLDER_LOCK_FILE } from "../../../train/checkpoint/manager.ts";
import { FullDiskIO, type FullDiskOptions } from "../scripts/checkpoint_faulty_io.ts";
import { assertHoldsPayload, payloadForStep } from "../scripts/checkpoint_payloads.ts";

/** The pid of a process that has exited: leftovers named after it are an interrupted save's. */
async function deadPid(): Promise<number> {
  const child = new Deno.Command("true").spawn();
  await child.status;
  return child.pid;
}
const DEAD = await deadPid();

/** A directory holding checkpoints for steps 1, 2 and 3 (latest = 3), removed after `fn`. */
function withCheckpoints(fn: (root: string) => void): void {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-faults-" });
  try {
    const manager = new CheckpointManager(root, { rank: 0, fsync: false });
    for (const s of [1, 2, 3]) manager.save(payloadForStep(s));
    fn(root);
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
}

/** A manager that records its warnings. */
function watched(root: string): { manager: CheckpointManager; warnings: string[] } {
  const warnings: string[] = [];
  return {
    manager: new CheckpointManager(root, { rank: 0, onWarning: (m) => warnings.push(m) }),
    warnings,
  };
}

/** The folder's entries, without the lock file its writer holds (folder_lock.ts). */
const names = (dir: string) =>
  [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n !== FOLDER_LOCK_FILE).sort();
const step3 = (root: string, file = "") => join(root, "step-00000003", file);

/** Each way the latest checkpoint can be damaged, and the reason the warning must give. */
const DAMAGE: [string, (root: string) => void, RegExp][] = [
  [
    "a flipped byte in a tensor file",
    (root) => {
      const path = step3(root, "model.safetensors");
      const bytes = Deno.readFileSync(path);
      bytes[bytes.length - 5]! ^= 0x40;
      Deno.writeFileSync(path, bytes);
    },
    /model\.safetensors has sha256 [0-9a-f]{16}… but manifest\.json records [0-9a-f]{16}… \(its content changed after the save\)/,
  ],
  ["a truncated tensor file", (root) => {
    const path = step3(root, "optimizer.safetensors");
    Deno.truncateSync(path, Deno.statSync(path).size - 100);
  }, /optimizer\.safetensors is \d+ bytes but manifest\.json records \d+ \(truncated/],
  [
    "a deleted manifest",
    (root) => Deno.removeSync(step3(root, "manifest.json")),
    /it has no manifest\.json: the save did not finish/,
  ],
  [
    "a garbled manifest",
    (root) => Deno.writeTextFileSync(step3(root, "manifest.json"), '{"format": '),
    /manifest\.json is not valid JSON/,
  ],
  [
    "a manifest from a newer format",
    (root) => {
      const m = JSON.parse(Deno.readTextFileSync(step3(root, "manifest.json")));
      Deno.writeTextFileSync(step3(root, "manifest.json"), JSON.stringify({ ...m, version: 2 }));
    },
    /manifest\.json has version 2, but this dtrain reads version 1: load it with the dtrain that wrote it/,
  ],
  [
    "a missing state.json",
    (root) => Deno.removeSync(step3(root, "state.json")),
    /state\.json, listed in manifest\.json, is missing/,
  ],
  [
    "a deleted checkpoint directory",
    (root) => Deno.removeSync(step3(root), { recursive: true }),
    /the directory does not exist/,
  ],
];

for (const [what, damage, reason] of DAMAGE) {
  Deno.test(`CheckpointManager.loadLatest() reports ${what} and loads the previous good checkpoint`, () => {
    withCheckpoints((root) => {
      damage(root);
      const { manager, warnings } = watched(root);
      const loaded = manager.loadLatest()!;
      assertHoldsPayload(loaded, payloadForStep(2));
      assert.equal(loaded.skipped.length, 1);
      assert.equal(loaded.skipped[0]!.dir, step3(root));
      assert.match(loaded.skipped[0]!.reason, reason);
      assert.equal(warnings.length, 2, warnings.join("\n"));
      assert.ok(warnings[0]!.startsWith(`Checkpoint ${step3(root)} is unusable: `), warnings[0]);
      assert.match(warnings[0]!, reason);
      assert.equal(
        warnings[1],
        `Resuming from checkpoint ${join(root, "step-00000002")} (step 2) instead`,
      );
    });
  });
}

Deno.test("CheckpointManager.load() names the checkpoint, the file and the problem", () => {
  withCheckpoints((root) => {
    DAMAGE[0]![1](root);
    const { manager } = watched(root);
    assert.throws(
      () => manager.load("step-00000003"),
      new RegExp(`^Error: Cannot load checkpoint ${step3(root)}: model\\.safetensors has sha256 `),
    );
    assert.throws(
      () => manager.load(join(root, "nope")),
      /Cannot load checkpoint .*nope: the directory does not exist/,
    );
  });
});

Deno.test("CheckpointManager.loadLatest() warns about a garbage or missing latest pointer and uses the newest good checkpoint", () => {
  withCheckpoints((root) => {
    Deno.writeFileSync(join(root, "latest"), new Uint8Array([0xff, 0x00, 0x41]));
    const { manager, warnings } = watched(root);
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(3));
    assert.equal(warnings.length, 1);
    assert.match(
      warnings[0]!,
      /^Checkpoint pointer .*latest does not name a checkpoint: it holds ".*", expected a line like "step-00000042"; using the newest checkpoint that verifies$/,
    );
    Deno.removeSync(join(root, "latest"));
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(3));
    assert.match(warnings[1]!, /latest is missing; using the newest checkpoint that verifies/);
  });
});

Deno.test("CheckpointManager.loadLatest() falls back past several bad checkpoints, and throws when none verifies", () => {
  withCheckpoints((root) => {
    DAMAGE[0]![1](root);
    Deno.removeSync(join(root, "step-00000002", "manifest.json"));
    const { manager } = watched(root);
    const loaded = manager.loadLatest()!;
    assertHoldsPayload(loaded, payloadForStep(1));
    assert.deepEqual(loaded.skipped.map((s) => s.dir), [step3(root), join(root, "step-00000002")]);
    Deno.removeSync(join(root, "step-00000001", "state.json"));
    assert.throws(
      () => manager.loadLatest(),
      /No checkpoint in .* verifies \(3 tried\): step-00000003: .*; step-00000002: .*; step-00000001: state\.json, listed in manifest\.json, is missing\. Move the directory away/,
    );
  });
  const empty = Deno.makeTempDirSync();
  try {
    assert.equal(watched(empty).manager.loadLatest(), null);
    assert.equal(watched(join(empty, "does-not-exist")).manager.loadLatest(), null);
  } finally {
    Deno.removeSync(empty, { recursive: true });
  }
});

/** Points in a save of step 4 (after steps 1-3) where the disk is full, and the stage the error must name. */
const FULL_DISK: [FullDiskOptions, string][] = [
  [{ byteBudget: 0 }, "writing model.safetensors"],
  [{ byteBudget: 700 }, "writing model.safetensors"],
  [{ failOn: { op: "writeFile", nth: 2 } }, "writing optimizer.safetensors"],
  [{ failOn: { op: "writeFile", nth: 3 } }, "writing state.json"],
  [{ failOn: { op: "writeFile", nth: 4 } }, "writing manifest.json"],
  [{ failOn: { op: "writeFile", nth: 5 } }, "writing the new latest pointer"],
  [{ failOn: { op: "mkdir", nth: 2 } }, "creating .tmp-step-00000004-"],
  [{ failOn: { op: "fsyncDir", nth: 1 } }, "syncing .tmp-step-00000004-"],
  [{ failOn: { op: "rename", nth: 1 } }, "renaming .tmp-step-00000004-"],
  [{ failOn: { op: "fsyncDir", nth: 2 } }, "syncing /"],
  [{ failOn: { op: "rename", nth: 2 } }, "replacing latest"],
];

Deno.test("CheckpointManager.save() on a full disk names the checkpoint, file and cause, and keeps the previous checkpoint", () => {
  for (const [fault, stage] of FULL_DISK) {
    withCheckpoints((root) => {
      const label = JSON.stringify(fault);
      const failing = new CheckpointManager(root, {
        rank: 0,
        io: new FullDiskIO(fault),
        onWarning: () => {},
      });
      assert.throws(() => failing.save(payloadForStep(4)), (e: unknown) => {
        assert.ok(e instanceof Error, label);
        assert.ok(
          e.message.startsWith(`Cannot save checkpoint step-00000004 in ${root}: ${stage}`),
          `${label}: ${e.message}`,
        );
        assert.match(
          e.message,
          /failed: No space left on device \(os error 28\)\. The previous checkpoint step-00000003 is intact and latest still names it; the training state in memory is unchanged/,
          label,
        );
        assert.equal((e.cause as { code?: string }).code, "ENOSPC", label);
        return true;
      });
      assert.deepEqual(
        names(root),
        ["latest", "step-00000001", "step-00000002", "step-00000003"],
        `${label}: the failed save left something`,
      );
      const { manager, warnings } = watched(root);
      const loaded = manager.loadLatest()!;
      assertHoldsPayload(loaded, payloadForStep(3));
      assert.deepEqual(loaded.skipped, [], label);
      manager.save(payloadForStep(4));
      assertHoldsPayload(manager.loadLatest()!, payloadForStep(4));
      assert.deepEqual(warnings, [], label);
    });
  }
});

Deno.test("CheckpointManager.save() that fails while replacing a step puts the old one back", () => {
  withCheckpoints((root) => {
    // rename 1 moves the old step-3 aside, rename 2 (the new directory into place) fails.
    const failing = new CheckpointManager(root, {
      rank: 0,
      io: new FullDiskIO({ failOn: { op: "rename", nth: 2 } }),
    });
    assert.throws(
      () => failing.save(payloadForStep(3, { variant: 1 })),
      /Cannot save checkpoint step-00000003 in .*: renaming \.tmp-step-00000003-\S+ to step-00000003 failed: No space left on device/,
    );
    assert.deepEqual(names(root), ["latest", "step-00000001", "step-00000002", "step-00000003"]);
    assertHoldsPayload(watched(root).manager.loadLatest()!, payloadForStep(3));
  });
});

Deno.test("CheckpointManager.save() removes the leftovers of interrupted saves, and only those", () => {
  withCheckpoints((root) => {
    for (
      const leftover of [
        `.tmp-step-00000004-${DEAD}-0badf00d`,
        `.tmp-deleting-step-00000001-${DEAD}-01234567`,
      ]
    ) {
      Deno.mkdirSync(join(root, leftover));
      Deno.writeTextFileSync(join(root, leftover, "model.safetensors"), "partial");
    }
    Deno.writeTextFileSync(join(root, `.tmp-latest-${DEAD}-0badf00d`), "step-00000004\n");
    Deno.mkdirSync(join(root, ".tmp-not-ours"));
    const { manager, warnings } = watched(root);
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(3));
    assert.deepEqual(warnings, [], "loading ignores .tmp entries");
    assert.ok(
      names(root).includes(`.tmp-step-00000004-${DEAD}-0badf00d`),
      "loading must not delete anything",
    );
    manager.save(payloadForStep(4));
    assert.deepEqual(names(root), [
      ".tmp-not-ours",
      "latest",
      "step-00000002",
      "step-00000003",
      "step-00000004",
    ]);
    assert.equal(
      warnings.filter((w) =>
        /^Removing .*\.tmp-.*, left by an interrupted checkpoint save$/.test(w)
      ).length,
      3,
      warnings.join("\n"),
    );
  });
});

Deno.test("CheckpointManager loads the aside copy of a step whose replacement was interrupted, and the next save restores it", () => {
  withCheckpoints((root) => {
    // The state a kill leaves between moving step 3 aside and renaming its replacement into place.
    const aside = `.aside-step-00000003-${DEAD}-0badf00d`;
    Deno.renameSync(step3(root), join(root, aside));
    const { manager, warnings } = watched(root);
    const loaded = manager.loadLatest()!;
    assertHoldsPayload(loaded, payloadForStep(3));
    assert.equal(loaded.dir, join(root, aside));
    assert.match(loaded.skipped[0]!.reason, /the directory does not exist/);
    assert.deepEqual(
      manager.list().map((c) => c.step),
      [1, 2],
      "list() shows step directories only",
    );
    manager.save(payloadForStep(4));
    assert.ok(
      warnings.some((w) =>
        w === `Restoring step-00000003 from ${aside}: a save replacing it was interrupted`
      ),
      warnings.join("\n"),
    );
    assert.deepEqual(names(root), ["latest", "step-00000002", "step-00000003", "step-00000004"]);
    assertHoldsPayload(manager.load("step-00000003"), payloadForStep(3));
  });
});

Deno.test("CheckpointManager.save() reports a failed sync after the commit without undoing the save", () => {
  withCheckpoints((root) => {
    // fsyncDir 3 is the one that makes the new latest durable; the save already counts.
    const io = new FullDiskIO({ failOn: { op: "fsyncDir", nth: 3 } });
    const failing = new CheckpointManager(root, { rank: 0, io });
    assert.throws(
      () => failing.save(payloadForStep(4)),
      /^Error: Checkpoint step-00000004 was written in .* and latest names it, but syncing the directory failed: No space left on device \(os error 28\)\. A power loss could still undo this save/,
    );
    assertHoldsPayload(watched(root).manager.loadLatest()!, payloadForStep(4));
  });
});
