/**
 * Waiting for a child that stands in for this process (`dtrain exec`, the
 * single file's compiled program): the signals a user or a scheduler sends us
 * go on to the child, and its end becomes our exit status.
 */

import { signalExitCode } from "./exit_status.ts";

/** What a terminal, `kill` or a batch scheduler sends to stop a job. */
const FORWARDED: Deno.Signal[] = ["SIGINT", "SIGTERM", "SIGHUP"];

/**
 * Resolves with the child's exit status (128 + the signal's number when a
 * signal ended it), forwarding SIGINT, SIGTERM and SIGHUP to it meanwhile.
 */
export async function waitForwardingSignals(child: Deno.ChildProcess): Promise<number> {
  const stops = FORWARDED.map((sig) => {
    const forward = () => {
      try {
        child.kill(sig);
      } catch { /* it has exited */ }
    };
    Deno.addSignalListener(sig, forward);
    return () => Deno.removeSignalListener(sig, forward);
  });
  try {
    const status = await child.status;
    return status.signal ? signalExitCode(status.signal) : status.code;
  } finally {
    for (const stop of stops) stop();
  }
}
