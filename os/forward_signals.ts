/**
 * Waiting for a child that stands in for this process (`dtrain exec`, the
 * single file's compiled program): the signals a user or a scheduler sends us
 * go on to the child, and its end becomes our exit status.
 */

import { signalExitCode } from "./exit_status.ts";
import { onStopSignals } from "./stop_signals.ts";

/**
 * Resolves with the child's exit status (128 + the signal's number when a
 * signal ended it), forwarding every stop signal (STOP_SIGNALS: SIGINT,
 * SIGTERM, SIGHUP, SIGQUIT, …) to it meanwhile.
 */
export async function waitForwardingSignals(child: Deno.ChildProcess): Promise<number> {
  const stop = onStopSignals((sig) => {
    try {
      child.kill(sig);
    } catch { /* it has exited */ }
  });
  try {
    const status = await child.status;
    return status.signal ? signalExitCode(status.signal) : status.code;
  } finally {
    stop();
  }
}
