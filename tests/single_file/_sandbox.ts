/**
 * Helpers of the single-file tests: a scratch folder holding a PATH of only
 * the tools the sfx header needs (no deno, node or npm), an empty HOME and a
 * cache, and a runner that starts a command with exactly that environment —
 * inside `unshare -n` (no network) when allowed — and kills its whole process
 * group if it runs past its limit.
 */
import { join } from "node:path";

/** What single_file/header.sh calls; nothing else is on PATH. */
export const HEADER_TOOLS = ["sh", "tail", "gzip", "tar", "mkdir", "mktemp", "mv", "rm"];

function findTool(name: string): string | null {
  for (const dir of ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]) {
    try {
      if (Deno.statSync(join(dir, name)).isFile) return join(dir, name);
    } catch { /* next */ }
  }
  return null;
}

/** Runs a command to completion, quietly; true when it exits 0. */
function succeeds(cmd: string, args: string[]): boolean {
  try {
    return new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).outputSync().success;
  } catch {
    return false;
  }
}

const UNSHARE = findTool("unshare");
const IP = findTool("ip");
const MOUNT = findTool("mount");

/** Whether a command can run without network (`unshare -n` with loopback up), else why not. */
export const NO_NETWORK: { ok: true } | { ok: false; why: string } = !UNSHARE || !IP
  ? { ok: false, why: `${UNSHARE ? "ip" : "unshare"} not found` }
  : succeeds(UNSHARE, ["-n", IP, "link", "set", "lo", "up"])
  ? { ok: true }
  : { ok: false, why: "unshare -n is not permitted here" };

/** Whether mount namespaces (unshare -m) with tmpfs mounts are allowed. */
export const MOUNTS_OK = UNSHARE !== null && MOUNT !== null &&
  succeeds(UNSHARE, ["-m", MOUNT, "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/mnt"]);

/**
 * Why the single file cannot be built on this machine (esbuild not installed,
 * no tar or gzip, no gcc and no built CPU library), or null when it can.
 */
export function buildBlocker(repo: string): string | null {
  try {
    Deno.statSync(join(repo, "node_modules", "esbuild"));
  } catch {
    return "npm package esbuild is not installed (npm ci)";
  }
  for (const tool of ["tar", "gzip"]) {
    if (!succeeds(tool, ["--version"])) return `${tool} is not installed`;
  }
  let built = false;
  try {
    built = Deno.statSync(join(repo, "build", "libdtrain_cpu.so")).isFile;
  } catch { /* not built */ }
  if (!built && !succeeds("gcc", ["--version"])) return "no gcc to build libdtrain_cpu.so";
  return null;
}

/** A scratch folder laid out like a bare cluster node. */
export class Sandbox {
  readonly dir = Deno.makeTempDirSync({ prefix: "dtrain-single-test-" });
  /** the only folder on PATH */
  readonly tools = join(this.dir, "tools");
  /** HOME: empty, and must stay so */
  readonly home = join(this.dir, "home");
  /** where the user works: the single file alone, then its script */
  readonly work = join(this.dir, "work");

  constructor() {
    for (const d of [this.tools, this.home, this.work]) Deno.mkdirSync(d);
    for (const name of HEADER_TOOLS) {
      const path = findTool(name);
      if (!path) {
        throw new Error(`Cannot set up the sandbox: ${name} not found in /usr/bin or /bin`);
      }
      Deno.symlinkSync(path, join(this.tools, name));
    }
  }

  /** The whole environment of a run with `cache` as DTRAIN_CACHE. */
  env(cache: string): Record<string, string> {
    return { PATH: this.tools, HOME: this.home, DTRAIN_CACHE: cache };
  }

  remove(): void {
    Deno.removeSync(this.dir, { recursive: true });
  }
}

/** How a run ended. */
export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
  /** Date.now() when it was started */
  startedAt: number;
  elapsedMs: number;
}

/**
 * Runs `argv` in `cwd` with exactly `env` (nothing inherited), without
 * network when `isolate` and NO_NETWORK allow, or inside a mount namespace
 * with a tmpfs (of the given mount options) on each folder of `tmpfs` and
 * /dev/null over each file of `hide` (a library this machine must seem to lack).
 * Kills its process group after `timeoutMs`.
 */
export async function runIn(
  cwd: string,
  argv: string[],
  env: Record<string, string>,
  opts: {
    isolate?: boolean;
    tmpfs?: Record<string, string>;
    hide?: string[];
    timeoutMs?: number;
  } = {},
): Promise<RunResult> {
  const mounts = [
    ...Object.entries(opts.tmpfs ?? {}).map(([dir, options]) =>
      `${MOUNT} -t tmpfs -o ${options} tmpfs '${dir}'`
    ),
    ...(opts.hide ?? []).map((file) => `${MOUNT} --bind /dev/null '${file}'`),
  ];
  const setup = [
    ...mounts,
    ...(opts.isolate && NO_NETWORK.ok ? [`${IP} link set lo up`] : []),
  ];
  const flags = [
    ...(opts.isolate && NO_NETWORK.ok ? ["-n"] : []),
    ...(mounts.length ? ["-m"] : []),
  ];
  const [cmd, args] = flags.length
    ? [UNSHARE!, [...flags, "/bin/sh", "-c", `${setup.join(" && ")} && exec "$@"`, "sh", ...argv]]
    : [argv[0]!, argv.slice(1)];
  const startedAt = Date.now();
  const child = await spawnRetryingBusy(
    new Deno.Command(cmd, {
      args,
      cwd,
      env,
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      detached: true,
    }),
  );
  const timer = setTimeout(() => {
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch { /* gone */ }
  }, opts.timeoutMs ?? 120_000);
  try {
    const out = await child.output();
    const decode = (b: Uint8Array) => new TextDecoder().decode(b);
    return {
      code: out.signal ? 128 : out.code,
      stdout: decode(out.stdout),
      stderr: decode(out.stderr),
      startedAt,
      elapsedMs: Date.now() - startedAt,
    };
  } finally {
    clearTimeout(timer);
    try {
      Deno.kill(-child.pid, "SIGKILL"); // anything it left behind in its group
    } catch { /* gone */ }
  }
}

/** The folders in a cache folder (hidden ones included). */
export function cacheEntries(cache: string): string[] {
  try {
    return [...Deno.readDirSync(cache)].map((e) => e.name).sort();
  } catch {
    return [];
  }
}

/**
 * Spawns `command`, retrying while exec fails with ETXTBSY. A file this process has just
 * written (the single file copied into a sandbox) can still be open for writing in a child
 * that another test forked at that moment and that has not reached its exec yet (the
 * descriptor is close-on-exec, but the fork copies it); the kernel then refuses to execute
 * the file until that child execs. The window is microseconds; the bound is generous.
 */
async function spawnRetryingBusy(command: Deno.Command): Promise<Deno.ChildProcess> {
  for (let attempt = 0;; attempt++) {
    try {
      return command.spawn();
    } catch (e) {
      if (attempt >= 50 || !String((e as Error).message).includes("os error 26")) throw e;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}
