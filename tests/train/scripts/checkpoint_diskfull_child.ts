/**
 * Child of checkpoint_diskfull_test.ts, run inside a private mount namespace
 * on a small tmpfs at --dir: saves a small checkpoint, then one too big for
 * the disk (a real ENOSPC), then a small one again; prints one JSON line.
 * With a second argument "async" the saves are asynchronous: the failure
 * must come out of the wait() that follows the oversized save.
 */
import { CheckpointManager } from "../../../train/checkpoint/manager.ts";
import { assertHoldsPayload, payloadForStep } from "./checkpoint_payloads.ts";

const dir = Deno.args[0];
if (dir === undefined) {
  throw new Error("checkpoint_diskfull_child.ts needs the tmpfs directory as its argument");
}
const warnings: string[] = [];
const async = Deno.args[1] === "async";
const manager = new CheckpointManager(dir, {
  rank: 0,
  onWarning: (m) => warnings.push(m),
  async,
});
manager.save(payloadForStep(1));
await manager.wait();

let error: { message: string; code: string | undefined } | null = null;
try {
  manager.save(payloadForStep(2, { scale: 256 })); // about 600 KiB
  if (async) await manager.wait();
} catch (e) {
  error = {
    message: (e as Error).message,
    code: ((e as Error).cause as { code?: string } | undefined)?.code,
  };
}
// The folder's lock file (its writer's, folder_lock.ts) is not a checkpoint file.
const afterFailure = [...Deno.readDirSync(dir)].map((e) => e.name)
  .filter((n) => n !== "dtrain-checkpoints.lock").sort();
assertHoldsPayload(manager.loadLatest()!, payloadForStep(1));

manager.save(payloadForStep(2)); // small enough once the failed save has cleaned up
manager.close();
assertHoldsPayload(manager.loadLatest()!, payloadForStep(2));
console.log(JSON.stringify({ error, afterFailure, warnings }));
