/**
 * Starting rank processes for the process-group tests: each runs pg_rank.ts
 * under `Deno.execPath()` with the launcher's environment contract, its
 * stdout is read as JSON lines, and withRanks() kills every process it
 * started when the test body ends, also when it throws.
 */
import { fileURLToPath } from "node:url";

const RANK_SCRIPT = fileURLToPath(new URL("./pg_rank.ts", import.meta.url));
let runCounter = 0;

/** A run id no other test process uses. */
export function uniqueRunId(tag: string): string {
  runCounter++;
  return `t-${tag}-${Deno.pid}-${runCounter}-${Math.random().toString(36).slice(2, 8)}`;
}

/** The variables the launcher sets for one rank of a one-machine job. */
export function launcherEnv(rank: number, world: number, runId: string): Record<string, string> {
  return {
    RANK: String(rank),
    LOCAL_RANK: String(rank),
    WORLD_SIZE: String(world),
    LOCAL_WORLD_SIZE: String(world),
    GROUP_RANK: "0",
    DTRAIN_NNODES: "1",
    DTRAIN_RUN_ID: runId,
    MASTER_ADDR: "127.0.0.1",
    MASTER_PORT: "29500",
    DTRAIN_NUM_THREADS: "1",
  };
}

/** Settings of every test rank unless a test overrides them: a bounded
 *  timeout (a broken collective fails the test instead of hanging it), and
 *  the library defaults whatever the environment running the tests says. */
export const TEST_DEFAULTS = {
  DTRAIN_TIMEOUT: "60",
  DTRAIN_DISTRIBUTED_DEBUG: "OFF",
  DTRAIN_SHM_CHUNK_BYTES: "",
  DTRAIN_SHM_SPIN_US: "",
};

/** How long next() waits for a record: well past a test rank's collective timeout (TEST_DEFAULTS). */
const NEXT_LIMIT_MS = 180_000;

/** One started rank. */
export class RankProcess {
  readonly rank: number;
  readonly child: Deno.ChildProcess;
  #lines: Record<string, unknown>[] = [];
  #waiters: (() => void)[] = [];
  #stdoutDone: Promise<void>;
  #stderr: Promise<string>;
  #stdin: WritableStreamDefaultWriter<Uint8Array>;
  #exited = false;
  #stdoutEnded = false;
  readonly status: Promise<Deno.CommandStatus>;

  constructor(rank: number, args: string[], env: Record<string, string>) {
    this.rank = rank;
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", RANK_SCRIPT, ...args],
      env,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#stdin = this.child.stdin.getWriter();
    this.#stderr = new Response(this.child.stderr).text();
    this.#stdoutDone = this.#readLines();
    this.status = this.child.status.then((s) => {
      this.#exited = true;
      return s;
    });
  }

  async #readLines(): Promise<void> {
    let pending = "";
    for await (const text of this.child.stdout.pipeThrough(new TextDecoderStream())) {
      pending += text;
      let nl;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        try {
          this.#lines.push(JSON.parse(line));
        } catch {
          this.#lines.push({ event: "text", line });
        }
        for (const w of this.#waiters.splice(0)) w();
      }
    }
    this.#stdoutEnded = true;
    for (const w of this.#waiters.splice(0)) w();
  }

  /** Resolves with the next stdout record whose `event` is in `events`
   *  (records before it are consumed); throws if stdout ends first, or if
   *  none comes within NEXT_LIMIT_MS (a hung rank fails its test, naming
   *  the rank and what it never printed, instead of holding up the suite). */
  next(...events: string[]): Promise<Record<string, unknown>> {
    return this.nextWithin(NEXT_LIMIT_MS, ...events);
  }

  /** next() with its own limit. */
  async nextWithin(limitMs: number, ...events: string[]): Promise<Record<string, unknown>> {
    const deadline = performance.now() + limitMs;
    for (;;) {
      const i = this.#lines.findIndex((l) => events.includes(String(l.event)));
      if (i >= 0) return this.#lines.splice(0, i + 1)[i]!;
      if (this.#stdoutEnded) {
        const rest = JSON.stringify(this.#lines);
        throw new Error(
          `rank ${this.rank} ended before printing ${
            events.join("|")
          }: stdout ${rest}, stderr ${await this.#stderr}`,
        );
      }
      const left = deadline - performance.now();
      if (left <= 0) {
        throw new Error(
          `rank ${this.rank} printed no ${events.join("|")} record within ${limitMs} ms ` +
            `(every collective of a test rank times out within ${TEST_DEFAULTS.DTRAIN_TIMEOUT} s); ` +
            `records since the last one taken: ${JSON.stringify(this.#lines)}`,
        );
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
  }

  /** Whether a record with this `event` has been printed and not consumed yet. */
  has(event: string): boolean {
    return this.#lines.some((l) => l.event === event);
  }

  /** Sends one command line to the rank's stdin. */
  async send(line: string): Promise<void> {
    await this.#stdin.write(new TextEncoder().encode(line + "\n"));
  }

  /** The rank's stderr, once it has exited. */
  stderr(): Promise<string> {
    return this.#stderr;
  }

  /** SIGKILLs the rank (if still running) and waits until it is reaped. */
  async kill(): Promise<void> {
    if (!this.#exited) {
      try {
        this.child.kill("SIGKILL");
      } catch { /* it exited in the meantime */ }
    }
    await this.status;
    await this.#stdin.close().catch(() => {});
    await this.#stdoutDone;
    await this.#stderr;
  }
}

/** Starts ranks `ranks` of a `world`-rank job running pg_rank.ts `args`,
 *  runs `body`, then kills and reaps every one of them. */
export async function withRanks<T>(
  opts: {
    world: number;
    runId: string;
    /** pg_rank.ts arguments, or a function of the rank giving them */
    args: string[] | ((rank: number) => string[]);
    /** which ranks to start (default all) */
    ranks?: number[];
    /** extra environment of each rank */
    env?: (rank: number) => Record<string, string>;
  },
  body: (procs: RankProcess[]) => Promise<T>,
): Promise<T> {
  const ranks = opts.ranks ?? Array.from({ length: opts.world }, (_, r) => r);
  const procs: RankProcess[] = [];
  try {
    for (const r of ranks) {
      const args = typeof opts.args === "function" ? opts.args(r) : opts.args;
      procs.push(
        new RankProcess(r, args, {
          ...launcherEnv(r, opts.world, opts.runId),
          ...TEST_DEFAULTS,
          ...opts.env?.(r),
        }),
      );
    }
    return await body(procs);
  } finally {
    await Promise.all(procs.map((p) => p.kill()));
  }
}

/** Names in /dev/shm that belong to run `runId`. */
export function shmEntries(runId: string): string[] {
  const out: string[] = [];
  for (const e of Deno.readDirSync("/dev/shm")) if (e.name.includes(runId)) out.push(e.name);
  return out;
}
