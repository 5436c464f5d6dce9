/**
 * Helpers for the launcher's multi-process tests: start cli.ts as a launcher
 * in its own process group, collect its output, read the pids the test rank
 * scripts record, and clean up every process a test started, also when the
 * test fails.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const REPO = fileURLToPath(new URL("../../", import.meta.url));
/** The test rank scripts. */
export const SCRIPTS = join(REPO, "tests/launch/scripts");
const CLI = join(REPO, "cli.ts");
const CONFIG = join(REPO, "deno.json");

/** A launcher started by a test. */
export interface Launched {
  pid: number;
  /** resolves when the launcher has exited and its output is complete */
  done: Promise<LaunchResult>;
  /** output so far */
  stdout(): string;
  stderr(): string;
  /** signals the launcher's process group */
  kill(sig: Deno.Signal): void;
}

/** How a launcher ended. */
export interface LaunchResult {
  code: number;
  signal: Deno.Signal | null;
  stdout: string;
  stderr: string;
  /** ms from start to exit */
  elapsedMs: number;
}

async function collect(stream: ReadableStream<Uint8Array>, into: { text: string }): Promise<void> {
  const decoder = new TextDecoder();
  for await (const chunk of stream) into.text += decoder.decode(chunk, { stream: true });
}

/** Is `pid` a live process (not gone, not a zombie waiting to be reaped)? */
export function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** Polls `cond` every 50 ms until it holds; throws after `timeoutMs`. */
export async function waitUntil(
  cond: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<number> {
  const t0 = performance.now();
  while (!(await cond())) {
    if (performance.now() - t0 > timeoutMs) {
      throw new Error(`Timed out after ${timeoutMs} ms waiting until ${what}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return performance.now() - t0;
}

/** Whether this process may make a mount namespace with a tmpfs of its own (unshare -m; a
 *  test of a small /dev/shm needs it). */
export function mountsAllowed(): boolean {
  try {
    return new Deno.Command("unshare", {
      args: ["-m", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/mnt"],
      stdout: "null",
      stderr: "null",
    }).outputSync().success;
  } catch {
    return false;
  }
}

/** A free TCP port on loopback (closed again, so a launcher can take it). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/**
 * One test's processes and scratch space: a temp directory (the launchers'
 * working directory), a pid directory the rank scripts write to
 * ($TEST_PID_DIR), and cleanup that kills whatever is still alive.
 */
export class TestRun {
  readonly dir = Deno.makeTempDirSync({ prefix: "dtrain-launch-test-" });
  readonly pidDir = join(this.dir, "pids");
  readonly #launched: Launched[] = [];

  constructor() {
    Deno.mkdirSync(this.pidDir);
  }

  /**
   * Starts `dtrain <args>` (cli.ts) with cwd = the temp dir; `prefix` is a
   * command that execs the launcher in the end (e.g. a mount namespace).
   */
  launch(
    args: string[],
    opts: { env?: Record<string, string>; cwd?: string; prefix?: string[] } = {},
  ): Launched {
    const t0 = performance.now();
    const command = [Deno.execPath(), "run", "-A", "--config", CONFIG, CLI, ...args];
    const [program, ...rest] = [...(opts.prefix ?? []), ...command];
    const child = new Deno.Command(program!, {
      args: rest,
      cwd: opts.cwd ?? this.dir,
      env: { TEST_PID_DIR: this.pidDir, NO_COLOR: "1", ...opts.env },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      detached: true,
    }).spawn();
    const out = { text: "" }, err = { text: "" };
    const pumped = Promise.all([collect(child.stdout, out), collect(child.stderr, err)]);
    const done = (async () => {
      const status = await child.status;
      const elapsedMs = performance.now() - t0;
      await pumped;
      return {
        code: status.code,
        signal: status.signal,
        stdout: out.text,
        stderr: err.text,
        elapsedMs,
      };
    })();
    const launched: Launched = {
      pid: child.pid,
      done,
      stdout: () => out.text,
      stderr: () => err.text,
      kill: (sig) => {
        try {
          Deno.kill(-child.pid, sig);
        } catch { /* already gone */ }
      },
    };
    this.#launched.push(launched);
    return launched;
  }

  /** Waits for a launcher to exit, killing it (and failing) after `timeoutMs`. */
  async finish(l: Launched, timeoutMs = 60_000): Promise<LaunchResult> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((r) =>
      timer = setTimeout(() => r("timeout"), timeoutMs)
    );
    const r = await Promise.race([l.done, timeout]);
    clearTimeout(timer);
    if (r === "timeout") {
      l.kill("SIGKILL");
      const late = await l.done;
      throw new Error(
        `The launcher did not exit within ${timeoutMs} ms.\nstdout:\n${late.stdout}\nstderr:\n${late.stderr}`,
      );
    }
    return r;
  }

  /** Pids recorded by rank scripts, by rank. */
  pids(): Map<number, number> {
    const out = new Map<number, number>();
    for (const e of Deno.readDirSync(this.pidDir)) {
      const m = /^rank-(\d+)\.pid$/.exec(e.name);
      if (!m) continue;
      // A rank writes its file with writeTextFileSync: read between its creation and its write,
      // the file is empty — and Number("") is 0, whose signal (kill(0, …)) would reach this test
      // process's own group. Only a whole pid counts.
      const text = Deno.readTextFileSync(join(this.pidDir, e.name)).trim();
      if (/^[1-9]\d*$/.test(text)) out.set(Number(m[1]), Number(text));
    }
    return out;
  }

  /** Waits until `n` ranks recorded their pids. */
  async ranksStarted(n: number, timeoutMs = 60_000): Promise<Map<number, number>> {
    await waitUntil(() => this.pids().size >= n, timeoutMs, `${n} ranks recorded their pids`);
    return this.pids();
  }

  /**
   * Whether `pid` is still a process this run started: it inherited this run's TEST_PID_DIR. The
   * suite starts thousands of processes and Linux reuses pids (32768 by default), so a rank that
   * exited long ago may have left its pid to another test's process.
   */
  #ours(pid: number): boolean {
    try {
      return Deno.readTextFileSync(`/proc/${pid}/environ`).split("\0")
        .includes(`TEST_PID_DIR=${this.pidDir}`);
    } catch {
      return false; // gone, or not ours to read
    }
  }

  /** Kills every launcher group and recorded rank still alive, removes the temp dir. */
  async cleanup(): Promise<void> {
    for (const l of this.#launched) l.kill("SIGKILL");
    for (const pid of this.pids().values()) {
      if (alive(pid) && this.#ours(pid)) {
        try {
          Deno.kill(-pid, "SIGKILL");
        } catch { /* not a group leader any more */ }
        try {
          Deno.kill(pid, "SIGKILL");
        } catch { /* gone */ }
      }
    }
    await Promise.all(this.#launched.map((l) => l.done.catch(() => {})));
    Deno.removeSync(this.dir, { recursive: true });
  }
}

/** The run directory a launcher created under `cwd/runs` (the only one). */
export function onlyRunDir(cwd: string): string {
  const dirs = [...Deno.readDirSync(join(cwd, "runs"))].filter((e) => e.isDirectory).map((e) =>
    e.name
  );
  if (dirs.length !== 1) {
    throw new Error(`Expected one run directory in ${cwd}/runs, found ${JSON.stringify(dirs)}`);
  }
  return join(cwd, "runs", dirs[0]!);
}

/** A token file in the test's directory with the given mode. */
export function tokenFile(
  t: TestRun,
  name: string,
  mode: number,
  token = "0123456789abcdef0123456789abcdef",
): string {
  const path = join(t.dir, name);
  Deno.writeTextFileSync(path, token + "\n");
  Deno.chmodSync(path, mode);
  return path;
}

/** Starts two launchers as nodes 1 and 0 on loopback (node 1 first: it must wait for node 0's store). */
export async function twoNodes(t: TestRun, port: number, token: string, rest: string[]) {
  const common = [
    "--nnodes",
    "2",
    "--nproc",
    "2",
    "--master-port",
    String(port),
    "--rdzv-token-file",
    token,
  ];
  const node1 = t.launch([...common, "--node-rank", "1", ...rest]);
  await new Promise((r) => setTimeout(r, 300));
  const node0 = t.launch([...common, "--node-rank", "0", ...rest]);
  return { node0, node1 };
}
