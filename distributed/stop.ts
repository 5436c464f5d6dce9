/**
 * A graceful stop for hand-written training loops, as the Trainer has one:
 * stopRequested() says whether this process was asked to stop (the launcher
 * forwards Ctrl-C, SIGTERM, an ssh hang-up and other stop signals to every
 * rank, then gives them --grace seconds before SIGKILL). A loop polls it at
 * step boundaries, saves a checkpoint and returns. Given the process group,
 * every rank gets the same answer at the same step, so no rank leaves the
 * loop while another waits for it in a collective.
 *
 * It is async for a reason: Deno hands a signal to its listener only when
 * the event loop runs, and a training step may never yield to it (no
 * `await` in the loop). stopRequested() yields one turn of the event loop
 * (setImmediate: microseconds) so that a signal that came during the step
 * is seen at this step boundary, in any loop.
 */
import { setImmediate } from "node:timers";
import type { ProcessGroup } from "./process_group.ts";
import { onStopSignals } from "../os/stop_signals.ts";

let requested: Deno.Signal | null = null;
let listening = false;
const flag = new Float32Array(1);

/**
 * Starts listening for stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, …)
 * without stopping the process at one: from then on a signal only sets the
 * flag that stopRequested() reads. Idempotent; stopRequested() calls it, so
 * calling it yourself only matters to catch a signal that comes before the
 * loop's first poll.
 *
 * @example
 * ```ts
 * watchStopSignals(); // before slow set-up: a Ctrl-C during it stops the loop at step 0
 * ```
 */
export function watchStopSignals(): void {
  if (listening) return;
  listening = true;
  onStopSignals((sig) => {
    requested ??= sig;
  });
}

/**
 * Resolves to true once this process was asked to stop. The first call starts listening
 * (watchStopSignals()): from then on Ctrl-C or a forwarded SIGTERM no longer
 * ends the process, the loop does — check it every step, save, and return
 * within the launcher's `--grace` (default 30 s); a second Ctrl-C still
 * kills at once. PyTorch has no counterpart (torchrun forwards the signal and
 * leaves its handling to the script); this is the Trainer's own stop.
 *
 * With `pg` (a collective: every rank must call it at the same step), the
 * answer is the same on every rank: true as soon as any rank was asked.
 * Without it, only this process's signals count.
 *
 * @example
 * ```ts
 * for (let step = start; step < steps; step++) {
 *   trainStep(step);
 *   if (await stopRequested(pg)) {
 *     if (pg.rank === 0) checkpoints.save({ step: step + 1, files, state: {} });
 *     await checkpoints.wait();
 *     break; // exit 0: the launcher reports the stop
 *   }
 * }
 * ```
 */
export async function stopRequested(pg?: ProcessGroup): Promise<boolean> {
  watchStopSignals();
  await new Promise((resolve) => setImmediate(resolve)); // a pending signal reaches its listener
  if (pg === undefined || pg.size === 1) return requested !== null;
  flag[0] = requested !== null ? 1 : 0;
  pg.allReduce(flag, "max");
  return flag[0]! > 0;
}

/** The first stop signal this process received since watchStopSignals(), or null. */
export function stopSignal(): Deno.Signal | null {
  return requested;
}
