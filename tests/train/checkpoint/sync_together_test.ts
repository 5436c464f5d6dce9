/**
 * A save whose IO can flush many paths at once (CheckpointIO.syncAll, the real file system's
 * default): the new files, their folder and the new pointer are all flushed, together, before the
 * first rename; a failure there is a clear error that keeps the previous checkpoint; and the
 * parallel fsync itself (ffi/cpu_files.ts) flushes what it is given and names a path it cannot.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type CheckpointIO,
  CheckpointManager,
  denoCheckpointIO,
} from "../../../train/checkpoint/manager.ts";
import { canFsyncPaths, FSYNC_MAX_PATHS, fsyncPaths } from "../../../ffi/cpu_files.ts";
import { assertHoldsPayload, payloadForStep } from "../scripts/checkpoint_payloads.ts";

/** The real file system, recording writes, renames and syncs in order; syncAll fails when asked. */
class RecordingIO implements CheckpointIO {
  readonly log: string[] = [];
  failSync = false;
  writeFile(path: string, bytes: Uint8Array, sync: boolean): void {
    this.log.push(`write${sync ? "+sync" : ""} ${path}`);
    denoCheckpointIO.writeFile(path, bytes, sync);
  }
  readFile = denoCheckpointIO.readFile;
  mkdir = denoCheckpointIO.mkdir;
  rename(from: string, to: string): void {
    this.log.push(`rename ${from}`);
    denoCheckpointIO.rename(from, to);
  }
  remove = denoCheckpointIO.remove;
  readDir = denoCheckpointIO.readDir;
  fsyncDir(path: string): void {
    this.log.push(`fsyncDir ${path}`);
    denoCheckpointIO.fsyncDir(path);
  }
  syncAll(paths: string[]): void {
    this.log.push(...paths.map((p) => `syncAll ${p}`));
    if (this.failSync) {
      throw Object.assign(new Error("Input/output error (os error 5)"), { code: "EIO" });
    }
    denoCheckpointIO.syncAll!(paths);
  }
  exists = denoCheckpointIO.exists;
}

Deno.test("a save flushes every new file, its folder and the new pointer together before the first rename", () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-sync-" });
  try {
    const io = new RecordingIO();
    const manager = new CheckpointManager(root, { rank: 0, io });
    manager.save(payloadForStep(1));
    const firstRename = io.log.findIndex((l) => l.startsWith("rename "));
    const before = io.log.slice(0, firstRename);
    const written = before.filter((l) => l.startsWith("write")).map((l) => l.split(" ")[1]!);
    assert.ok(written.length >= 4, io.log.join("\n")); // the payload's files, manifest, pointer
    // written without a sync of their own, each flushed by the one syncAll, with the folder
    assert.ok(before.every((l) => !l.startsWith("write+sync")), io.log.join("\n"));
    const synced = new Set(before.filter((l) => l.startsWith("syncAll ")).map((l) => l.slice(8)));
    for (const w of written) assert.ok(synced.has(w), `${w} not synced before the rename`);
    const tmpDir = written.find((w) => w.endsWith("manifest.json"))!.replace(
      /\/manifest\.json$/,
      "",
    );
    assert.ok(synced.has(tmpDir), `the folder ${tmpDir} was not synced before the rename`);
    // after the renames, the root as before: twice
    assert.deepEqual(io.log.filter((l) => l.startsWith("fsyncDir")), [
      `fsyncDir ${root}`,
      `fsyncDir ${root}`,
    ]);
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(1));
    // without fsync nothing is flushed at all
    const quiet = new RecordingIO();
    new CheckpointManager(root, { rank: 0, io: quiet, fsync: false }).save(payloadForStep(2));
    assert.deepEqual(quiet.log.filter((l) => /^(syncAll|fsyncDir|write\+sync) /.test(l)), []);
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("a failed flush of the new files is a clear error that keeps the previous checkpoint", () => {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-sync-" });
  try {
    new CheckpointManager(root, { rank: 0 }).save(payloadForStep(1));
    const io = new RecordingIO();
    io.failSync = true;
    const manager = new CheckpointManager(root, { rank: 0, io, onWarning: () => {} });
    assert.throws(
      () => manager.save(payloadForStep(2)),
      new RegExp(
        `^Error: Cannot save checkpoint step-00000002 in ${root}: syncing \\.tmp-step-00000002-.*, ` +
          "its files and the new latest pointer failed: Input/output error \\(os error 5\\)\\. " +
          "The previous checkpoint step-00000001 is intact and latest still names it",
      ),
    );
    assert.equal(io.log.filter((l) => l.startsWith("rename ")).length, 0);
    assertHoldsPayload(new CheckpointManager(root, { rank: 0 }).loadLatest()!, payloadForStep(1));
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("fsyncPaths flushes files and folders in parallel, and names a path it cannot open", () => {
  assert.ok(canFsyncPaths(), "libdtrain_cpu.so should open in the test environment");
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-fsync-" });
  try {
    // more paths than one native call takes: the wrapper splits them
    const files = Array.from({ length: FSYNC_MAX_PATHS + 3 }, (_, i) => join(dir, `f${i}`));
    for (const f of files) Deno.writeFileSync(f, new Uint8Array([1, 2, 3]));
    fsyncPaths([...files, dir]);
    fsyncPaths([]);
    const missing = join(dir, "missing");
    assert.throws(
      () => fsyncPaths([files[0]!, missing, join(dir, "also-missing")]),
      new RegExp(
        `dt_cpu_fsync_paths failed .*: open of ${missing} failed: No such file or directory`,
      ),
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
