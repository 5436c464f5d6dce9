/**
 * The checkpoint folder's lock: a process that saved into a folder holds it
 * while it lives, so a save (or rotation) from another live process is
 * refused naming the holder's run, and nothing of the holder's is touched;
 * once the holder is gone (even SIGKILLed) the folder is free, and the lock
 * file still says who held it last. Managers of one process share the lock.
 */
import assert from "node:assert/strict";
import {
  CheckpointFolderBusy,
  CheckpointManager,
  FOLDER_LOCK_FILE,
} from "../../../train/checkpoint/manager.ts";
import { lastHolder, liveHolder } from "../../../train/checkpoint/folder_lock.ts";
import { payloadForStep } from "../scripts/checkpoint_payloads.ts";

const MANAGER = new URL("../../../train/checkpoint/manager.ts", import.meta.url).href;
const PAYLOADS = new URL("../scripts/checkpoint_payloads.ts", import.meta.url).href;

/** A process that saves step 1 into `dir` as run "run-A", prints "saved", and lives until killed. */
function holder(dir: string): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      "--ext=ts",
      `import { CheckpointManager } from ${JSON.stringify(MANAGER)};
import { payloadForStep } from ${JSON.stringify(PAYLOADS)};
const m = new CheckpointManager(${JSON.stringify(dir)}, { rank: 0, owner: "run-A", fsync: false });
m.save(payloadForStep(1));
console.log("saved");
setInterval(() => {}, 1000);`,
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
}

async function firstLine(child: Deno.ChildProcess): Promise<string> {
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  reader.releaseLock();
  return text.trim();
}

Deno.test("a live process's checkpoint folder refuses another process's save; free again once it is killed", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-folder-lock-" });
  const child = holder(dir);
  try {
    assert.equal(await firstLine(child), "saved");
    const before = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
    assert.ok(before.includes(FOLDER_LOCK_FILE));
    assert.equal(liveHolder(dir)?.owner, "run-A");
    const mine = new CheckpointManager(dir, { rank: 0, owner: "run-B", fsync: false });
    assert.equal(mine.liveWriter()?.owner, "run-A");
    assert.throws(
      () => mine.save(payloadForStep(2)),
      (e: Error) =>
        e instanceof CheckpointFolderBusy &&
        new RegExp(
          `Checkpoint folder ${dir} is being written by another live run \\(run run-A, pid ${child.pid} on `,
        )
          .test(e.message),
    );
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), before);

    child.kill("SIGKILL");
    await child.status;
    assert.equal(liveHolder(dir), null, "the OS released the dead holder's lock");
    assert.equal(lastHolder(dir)?.owner, "run-A");
    assert.equal(mine.claim()?.owner, "run-A", "claim() says whose folder it took over");
    mine.save(payloadForStep(2));
    assert.equal(mine.loadLatest()?.step, 2);
    // A second manager of the same process shares the lock.
    new CheckpointManager(dir, { rank: 0, fsync: false }).save(payloadForStep(3));
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
    await child.status;
    await child.stdout.cancel().catch(() => {});
    Deno.removeSync(dir, { recursive: true });
  }
});
