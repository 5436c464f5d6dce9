/**
 * The shell's convention for a process killed by a signal: exit status 128 +
 * the signal's number. Shared by everything that reports a child's end (the
 * launcher, `dtrain check`, the single file's compiled program).
 */

const SIGNAL_NUMBERS: Partial<Record<Deno.Signal, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGSTKFLT: 16,
  SIGCHLD: 17,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGTSTP: 20,
  SIGTTIN: 21,
  SIGTTOU: 22,
  SIGURG: 23,
  SIGXCPU: 24,
  SIGXFSZ: 25,
  SIGVTALRM: 26,
  SIGPROF: 27,
  SIGWINCH: 28,
  SIGIO: 29,
  SIGPWR: 30,
  SIGSYS: 31,
};

/**
 * 128 + the signal's number (the shell's convention for "killed by").
 *
 * @example
 * ```ts
 * signalExitCode("SIGTERM"); // 143
 * ```
 */
export function signalExitCode(signal: Deno.Signal): number {
  return 128 + (SIGNAL_NUMBERS[signal] ?? 0);
}

/** The signal's number on Linux, or null for a name this table lacks. */
export function signalNumber(signal: Deno.Signal): number | null {
  return SIGNAL_NUMBERS[signal] ?? null;
}
