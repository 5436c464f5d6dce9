/**
 * One rank process as the launcher sees it: spawned in its own process group
 * (so stopping it also stops anything it started), its output pumped to the
 * terminal and its log file, its exit awaited, and a stop that sends SIGTERM,
 * then SIGKILL after a grace period.
 */
import { LogFile, pumpLines, showsStdout } from "./output.ts";
import { installLayout } from "../os/install_layout.ts";
import { signalExitCode } from "../os/exit_status.ts";
import { rankV8Args } from "./rank_v8_flags.ts";

// The rank bootstrap and config: launch/rank_main.ts and deno.json in a
// checkout, their bundled copies in the single file's extraction folder.
const RUNTIME = installLayout();
/** stderr lines kept for the failure summary when a rank leaves no notice */
const TAIL_LINES = 40;

/** How a rank process ended. */
export interface RankExit {
  /** the exit code, or 128 + signal number when killed by a signal */
  code: number;
  signal: Deno.Signal | null;
}

/** What spawnRank() needs. */
export interface RankSpawnOptions {
  rank: number;
  script: string;
  scriptArgs: readonly string[];
  /** variables added to the launcher's environment */
  env: Record<string, string>;
  logPath: string;
  logRanks: string;
  /** the launcher's V8 flags for it (the user's DENO_V8_FLAGS win) */
  v8Flags: readonly string[];
}

/** A running (or finished) rank. */
export class RankProcess {
  readonly rank: number;
  readonly pid: number;
  /** Resolves when the process has exited. */
  readonly exited: Promise<RankExit>;
  /** Resolves when its stdout and stderr have been fully copied. */
  readonly outputDone: Promise<void>;
  #exit: RankExit | null = null;
  readonly #tail: string[] = [];
  readonly #log: LogFile;

  constructor(opts: RankSpawnOptions) {
    this.rank = opts.rank;
    this.#log = new LogFile(opts.logPath);
    let child: Deno.ChildProcess;
    try {
      child = this.#spawn(opts);
    } catch (e) {
      this.#log.close();
      throw e;
    }
    this.pid = child.pid;
    this.exited = child.status.then((s) => {
      this.#exit = s.signal
        ? { code: signalExitCode(s.signal), signal: s.signal }
        : { code: s.code, signal: null };
      return this.#exit;
    });
    this.outputDone = Promise.all([
      pumpLines(child.stdout, {
        rank: opts.rank,
        stream: "stdout",
        show: showsStdout(opts.logRanks, opts.rank),
        log: this.#log,
      }),
      pumpLines(child.stderr, {
        rank: opts.rank,
        stream: "stderr",
        show: true,
        log: this.#log,
        onLine: (line) => {
          this.#tail.push(line);
          if (this.#tail.length > TAIL_LINES) this.#tail.shift();
        },
      }),
    ]).then(() => this.#log.close());
  }

  #spawn(opts: RankSpawnOptions): Deno.ChildProcess {
    if (!RUNTIME) throw new Error("Cannot start ranks: dtrain was not loaded from files on disk");
    return new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        ...rankV8Args(opts.env.DENO_V8_FLAGS ?? Deno.env.get("DENO_V8_FLAGS"), opts.v8Flags),
        "--config",
        RUNTIME.config,
        "--preload",
        RUNTIME.rankMain,
        opts.script,
        ...opts.scriptArgs,
      ],
      env: opts.env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      // Its own process group, so a stop reaches whatever the rank started too.
      detached: true,
    }).spawn();
  }

  /** The exit, or null while it runs. */
  get exit(): RankExit | null {
    return this.#exit;
  }

  /** The last lines the rank wrote to stderr. */
  stderrTail(): string[] {
    return [...this.#tail];
  }

  /** Sends a signal to the rank's whole process group (ignored once it is gone). */
  signal(sig: Deno.Signal): void {
    try {
      Deno.kill(-this.pid, sig);
    } catch { /* the group no longer exists */ }
  }

  /**
   * Stops the rank: SIGTERM to its group (unless the launcher already
   * forwarded a signal to it), SIGKILL after `graceMs`, and a final SIGKILL
   * for anything it started that is still alive.
   */
  async stop(graceMs: number, opts: { alreadySignalled?: boolean } = {}): Promise<RankExit> {
    if (!this.#exit) {
      if (!opts.alreadySignalled) this.signal("SIGTERM");
      let timer: ReturnType<typeof setTimeout> | undefined;
      const graceOver = new Promise<"grace">((r) => timer = setTimeout(() => r("grace"), graceMs));
      if (await Promise.race([this.exited, graceOver]) === "grace") this.signal("SIGKILL");
      clearTimeout(timer);
    }
    const exit = await this.exited;
    this.signal("SIGKILL");
    return exit;
  }
}
