/**
 * The signals that ask a process to stop: every signal whose default action
 * ends a process and that can be caught, other than the faults a process
 * raises on itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS).
 * A terminal's hang-up (SIGHUP: an ssh disconnect), Ctrl-C and Ctrl-\, `kill`,
 * a batch scheduler's warning (SIGUSR1/2, SIGXCPU at a CPU limit) and a
 * power-failure notice all mean the same to dtrain: save and stop.
 */

/** Every catchable stop signal, the common ones first. */
export const STOP_SIGNALS: readonly Deno.Signal[] = [
  "SIGINT",
  "SIGTERM",
  "SIGHUP",
  "SIGQUIT",
  "SIGUSR1",
  "SIGUSR2",
  "SIGALRM",
  "SIGVTALRM",
  "SIGPROF",
  "SIGXCPU",
  "SIGXFSZ",
  "SIGPWR",
  "SIGSTKFLT",
  "SIGIO",
];

/**
 * Calls `handler` with the signal for every stop signal this platform lets a
 * process listen to; returns the function that removes the listeners.
 */
export function onStopSignals(handler: (sig: Deno.Signal) => void): () => void {
  const removers: (() => void)[] = [];
  for (const sig of STOP_SIGNALS) {
    const listener = () => handler(sig);
    try {
      Deno.addSignalListener(sig, listener);
    } catch {
      continue; // not a signal of this platform
    }
    removers.push(() => Deno.removeSignalListener(sig, listener));
  }
  return () => {
    for (const remove of removers.splice(0)) remove();
  };
}
