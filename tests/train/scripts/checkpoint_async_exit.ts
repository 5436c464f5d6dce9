/**
 * Child of async_test.ts: one asynchronous save, then the process ends
 * without waiting for it, in the way --mode says: "return" (the script just
 * ends), "exit" (Deno.exit(0) at once), or "fail" (the save's commit fails
 * and nobody asks: the exit must report it). Prints "saved <dir>" first.
 *
 *   deno run -A checkpoint_async_exit.ts <dir> <return|exit|fail>
 */
import { addCheckpointSavedHook, CheckpointManager } from "../../../train/checkpoint/manager.ts";
import { payloadForStep } from "./checkpoint_payloads.ts";

const [dir, mode] = Deno.args;
if (dir === undefined || !["return", "exit", "fail"].includes(mode ?? "")) {
  throw new Error("usage: checkpoint_async_exit.ts <dir> <return|exit|fail>");
}
addCheckpointSavedHook(({ step }) => console.log(`hook ${step}`));
if (mode === "fail") Deno.writeTextFileSync(dir + "/blocker", "a file where the root must go");
const root = mode === "fail" ? dir + "/blocker" : dir;
const manager = new CheckpointManager(root, { rank: 0, async: true, onWarning: console.error });
console.log(`saved ${manager.save(payloadForStep(3, { scale: 64 }))}`);
if (mode === "exit") Deno.exit(0);
