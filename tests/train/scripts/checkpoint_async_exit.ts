/**
 * Child of async_test.ts: one asynchronous save, then the process ends
 * without waiting for it, in the way --mode says: "return" (the script just
 * ends), "exit" (Deno.exit(0) at once), "fail" (the save's commit fails
 * and nobody asks: the exit must report it), or "signal" (goes on "training"
 * until the parent's SIGTERM ends it). Prints "saved <dir>" first.
 *
 *   deno run -A checkpoint_async_exit.ts <dir> <return|exit|fail|signal>
 */
import { addCheckpointSavedHook, CheckpointManager } from "../../../train/checkpoint/manager.ts";
import { payloadForStep } from "./checkpoint_payloads.ts";

const [dir, mode] = Deno.args;
if (dir === undefined || !["return", "exit", "fail", "signal"].includes(mode ?? "")) {
  throw new Error("usage: checkpoint_async_exit.ts <dir> <return|exit|fail|signal>");
}
addCheckpointSavedHook(({ step }) => console.log(`hook ${step}`));
if (mode === "fail") Deno.writeTextFileSync(dir + "/blocker", "a file where the root must go");
const root = mode === "fail" ? dir + "/blocker" : dir;
const manager = new CheckpointManager(root, { rank: 0, async: true, onWarning: console.error });
const scale = mode === "signal" ? 512 : 64;
console.log(`saved ${manager.save(payloadForStep(3, { scale }))}`);
if (mode === "exit") Deno.exit(0);
if (mode === "signal") await new Promise((resolve) => setTimeout(resolve, 60_000));
