/**
 * Builders of the run record, called by the launcher and the trainer: the
 * behaviour-changing environment, versions, machine facts, the script hash,
 * run.json's attempt bookkeeping, and atomic writes.
 */
import { basename, dirname, join } from "node:path";
import pkg from "../package.json" with { type: "json" };
import {
  type LibraryVersion,
  type NativeVersions,
  nativeVersions,
} from "../ffi/native_versions.ts";
import { envRule } from "./env_rules.ts";
import {
  type Attempt,
  type ConfigRecord,
  ConfigRecordSchema,
  dataOrderLine,
  type DataOrderRecord,
  evalLine,
  type EvalRecord,
  jsonFileText,
  type Launch,
  type Machine,
  metricsLine,
  type MetricsRecord,
  parseJsonFile,
  RUN_FILES,
  RUN_FORMAT,
  type RunRecord,
  RunRecordSchema,
  type Versions,
} from "./format.ts";

/**
 * The variables of `env` that change behaviour (the table in
 * env_rules.ts), sorted by name; secrets and per-run identity variables
 * are never included. Pass the environment the ranks see, i.e. including
 * the DTRAIN_* settings the launcher adds (DTRAIN_NUM_THREADS).
 *
 * @example
 * ```ts
 * behaviourEnv({ DTRAIN_NUM_THREADS: "4", DTRAIN_STORE_TOKEN: "s3cr3t", HOME: "/root" });
 * // → { DTRAIN_NUM_THREADS: "4" }
 * ```
 */
export function behaviourEnv(
  env: Record<string, string> = Deno.env.toObject(),
): Record<string, string> {
  const names = Object.keys(env).filter((n) => envRule(n) !== null).sort();
  return Object.fromEntries(names.map((n) => [n, env[n]!]));
}

/** `unavailable: <why>` for a library whose version is not known. */
function versionOrWhy(lib: LibraryVersion): string {
  return lib.version ?? `unavailable: ${lib.error}`;
}

/**
 * run.json's `versions`: dtrain (package.json), Deno, V8, TypeScript, and the native side as
 * `nativeVersions()` (ffi/native_versions.ts) found it — the CPU library's build hash
 * (`unavailable: <why>` when it does not load); when a usable GPU stack was described, the CUDA
 * library's build hash, the runtime, the driver, `gpus` (the GPUs' names) and NCCL's version,
 * marked as the emulated device's where they are; Gloo's build hash and version when described.
 *
 * @example
 * ```ts
 * versions(nativeVersions({ gpu: "cuda" }), ["NVIDIA H200"]).cuda; // { runtime: "12.8", driver: "570.86", gpus: [...] }
 * ```
 */
export function versions(
  native: NativeVersions = nativeVersions(),
  gpus: readonly string[] = [],
): Versions {
  const v: Versions = {
    dtrain: pkg.version,
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    typescript: Deno.version.typescript,
    native: { cpu: versionOrWhy(native.cpu) },
  };
  const gpu = native.gpu;
  if (gpu && gpu.runtime !== null && gpu.driver !== null) {
    const emulated = gpu.flavor === "cuda-emu";
    v.cuda = {
      runtime: emulated ? `${gpu.runtime} (emulated)` : gpu.runtime,
      driver: emulated ? "none (emulated device)" : gpu.driver,
      gpus: [...gpus],
    };
    if (gpu.kernels.version !== null) v.native.cuda = gpu.kernels.version;
    const nccl = native.nccl?.version; // none: a one-rank GPU run needs no NCCL
    if (nccl) v.nccl = emulated ? `${nccl} (stand-in)` : nccl;
  }
  if (native.gloo) {
    v.native.gloo = versionOrWhy(native.gloo);
    if (native.gloo.glooVersion !== null) v.gloo = native.gloo.glooVersion;
  }
  return v;
}

/** The CPU model from /proc/cpuinfo (Linux), else "unknown". */
function cpuModel(): string {
  try {
    const info = Deno.readTextFileSync("/proc/cpuinfo");
    return /^model name\s*:\s*(.+)$/m.exec(info)?.[1]?.trim() ?? "unknown";
  } catch {
    return "unknown";
  }
}

/** Facts about this machine that change results or speed (run.json's `machine`). */
export function machineFacts(): Machine {
  return {
    hostname: Deno.hostname(),
    os: `${Deno.build.os} ${Deno.osRelease()}`,
    arch: Deno.build.arch,
    cpuModel: cpuModel(),
    cpus: navigator.hardwareConcurrency,
    memBytes: Deno.systemMemoryInfo().total,
  };
}

/**
 * The sha256 of a file's bytes, in hex (a script: read whole, hashed with WebCrypto, which costs
 * the launcher no node:crypto loading).
 */
export async function sha256File(path: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", await Deno.readFile(path));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Options whose value run.json must not store: the rendezvous secret. */
const SECRET_OPTIONS = ["--rdzv-token"];

/** Replaces the value of every secret option in a command line by "<redacted>". */
export function redactArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const opt = SECRET_OPTIONS.find((o) => a === o || a.startsWith(`${o}=`));
    if (opt === undefined) out.push(a);
    else if (a !== opt) out.push(`${opt}=<redacted>`);
    else {
      out.push(a);
      if (i + 1 < argv.length) {
        out.push("<redacted>");
        i++;
      }
    }
  }
  return out;
}

/** What the launcher knows when a run starts. */
export interface NewRunInput {
  runId: string;
  name: string;
  /** the full launch command; secret option values are redacted */
  argv: readonly string[];
  cwd: string;
  script: { path: string; sha256: string; args: readonly string[] };
  world: {
    nnodes: number;
    nprocPerNode: number;
    hosts: readonly string[];
    /** the process group the ranks will use (plannedCpuBackend, or "nccl" on GPUs) */
    backend?: "single" | "shm" | "gloo" | "nccl";
    /** where ranks compute, as the launcher resolved --device */
    device?: string;
  };
  /** --resume's folder */
  resume?: string;
  versions: Versions;
  /** behaviourEnv() of the ranks' environment */
  env: Record<string, string>;
  machine?: Machine;
  /** defaults to now */
  createdAt?: Date;
}

/**
 * A new run.json record: status "running", no attempts yet.
 *
 * @example
 * ```ts
 * let record = newRunRecord({ runId, name, argv: ["dtrain", ...Deno.args], cwd: Deno.cwd(), script, world, versions: versions(), env: behaviourEnv() });
 * record = beginAttempt(record);
 * writeRunRecord(runDir, record);
 * ```
 */
export function newRunRecord(input: NewRunInput): RunRecord {
  const { nnodes, nprocPerNode, hosts, backend } = input.world;
  const record: RunRecord = {
    format: RUN_FORMAT,
    runId: input.runId,
    name: input.name,
    createdAt: (input.createdAt ?? new Date()).toISOString(),
    endedAt: null,
    command: { argv: redactArgv(input.argv), cwd: input.cwd },
    script: { path: input.script.path, sha256: input.script.sha256, args: [...input.script.args] },
    world: {
      nnodes,
      nprocPerNode,
      worldSize: nnodes * nprocPerNode,
      hosts: [...hosts],
      ...(backend ? { backend } : {}),
      ...(input.world.device !== undefined ? { device: input.world.device } : {}),
    },
    ...(input.resume !== undefined ? { resume: input.resume } : {}),
    versions: structuredClone(input.versions),
    env: behaviourEnv(input.env),
    attempts: [],
    status: "running",
  };
  if (input.machine !== undefined) record.machine = { ...input.machine };
  return RunRecordSchema.parse(record);
}

/** This launch's facts as a `launches` entry of run.json. */
function launchOf(r: RunRecord, firstAttempt: number, startedAt: string): Launch {
  return {
    firstAttempt,
    startedAt,
    command: structuredClone(r.command),
    script: structuredClone(r.script),
    world: structuredClone(r.world),
  };
}

/**
 * The run.json of a launch into a directory that already holds one (a
 * resume with --run-dir): the run keeps its id, creation time and every
 * earlier attempt, attempts continue from the next number, and `launches`
 * records each launch's command, script and world (the top level becomes
 * this launch's). An attempt the earlier launcher never closed (it was
 * killed) is closed first, saying so.
 */
export function continueRunRecord(previous: RunRecord, input: NewRunInput): RunRecord {
  const now = (input.createdAt ?? new Date()).toISOString();
  const fresh = newRunRecord({ ...input, runId: previous.runId, name: previous.name });
  const attempts = previous.attempts.map((a) =>
    a.endedAt !== null ? a : {
      ...a,
      endedAt: now,
      reason: a.reason ?? "its launcher ended without recording how this attempt ended (killed?)",
    }
  );
  const launches = previous.launches ?? [launchOf(previous, 0, previous.createdAt)];
  const record: RunRecord = {
    ...fresh,
    createdAt: previous.createdAt,
    attempts,
    launches: [...launches, launchOf(fresh, attempts.length, now)],
  };
  return RunRecordSchema.parse(record);
}

/**
 * The run.json already in `runDir`, or null when there is none. A file that
 * does not parse is an error naming it: the launcher will not overwrite the
 * record of an earlier run it cannot read.
 */
export function readRunRecord(runDir: string): RunRecord | null {
  const path = join(runDir, RUN_FILES.run);
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
    throw new Error(`Cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
  try {
    return parseJsonFile(RunRecordSchema, text, path);
  } catch (e) {
    throw new Error(
      `The run directory ${runDir} holds a run.json that cannot be continued (${
        (e as Error).message
      }): move it away, or choose another --run-dir`,
      { cause: e },
    );
  }
}

/** Starts the next attempt (numbered 0, 1, …); the previous one must have ended. */
export function beginAttempt(record: RunRecord, now = new Date()): RunRecord {
  const last = record.attempts.at(-1);
  if (last !== undefined && last.endedAt === null) {
    throw new RangeError(
      `Cannot begin attempt ${record.attempts.length} of run ${record.runId}: attempt ${last.attempt} has not ended`,
    );
  }
  const attempt: Attempt = {
    attempt: record.attempts.length,
    startedAt: now.toISOString(),
    endedAt: null,
    exitCode: null,
    signal: null,
    failingRank: null,
    reason: null,
  };
  return { ...record, endedAt: null, status: "running", attempts: [...record.attempts, attempt] };
}

/** How an attempt ended. */
export interface AttemptEnd {
  exitCode: number | null;
  /** the signal that ended it, e.g. "SIGTERM" */
  signal?: string | null;
  failingRank?: number | null;
  /** one line saying what happened */
  reason?: string | null;
  /** the launcher was stopped by SIGINT/SIGTERM (preemption, Ctrl-C) */
  interrupted?: boolean;
  /** defaults to now */
  endedAt?: Date;
  /** the process group rank 0 reported (distributed/control/rank_runtime.ts reportProcessGroup) */
  processGroup?: Attempt["processGroup"];
  /** the numerics policy rank 0 reported last (distributed/control/rank_runtime.ts reportNumerics) */
  numerics?: Attempt["numerics"];
  /** what rank 0's Trainer resumed from (rank_runtime.ts reportResume) */
  resumed?: Attempt["resumed"];
}

/**
 * Ends the open attempt and sets the run's status and end time: succeeded
 * (exit 0, no signal), interrupted, or failed. Earlier attempts are never
 * touched, so a failed first attempt stays recorded after a restart.
 */
export function finishAttempt(record: RunRecord, end: AttemptEnd): RunRecord {
  const last = record.attempts.at(-1);
  if (last === undefined || last.endedAt !== null) {
    throw new RangeError(
      `Cannot finish an attempt of run ${record.runId}: no attempt is open (call beginAttempt first)`,
    );
  }
  const endedAt = (end.endedAt ?? new Date()).toISOString();
  const signal = end.signal ?? null;
  const done: Attempt = {
    ...last,
    endedAt,
    exitCode: end.exitCode,
    signal,
    failingRank: end.failingRank ?? null,
    reason: end.reason ?? null,
    ...(end.processGroup !== undefined ? { processGroup: end.processGroup } : {}),
    ...(end.numerics !== undefined ? { numerics: end.numerics } : {}),
    ...(end.resumed !== undefined ? { resumed: end.resumed } : {}),
  };
  const status = end.interrupted
    ? "interrupted"
    : end.exitCode === 0 && signal === null
    ? "succeeded"
    : "failed";
  return { ...record, endedAt, status, attempts: [...record.attempts.slice(0, -1), done] };
}

/**
 * Writes `value` as JSON so that readers see the old file or the new one,
 * never a mix, even after a power cut: a temp file in the same folder,
 * fsync, rename over `path`, then fsync of the folder.
 */
export function writeJsonAtomic(path: string, value: unknown): void {
  writeTextAtomic(path, JSON.stringify(value, null, 2) + "\n");
}

/** The temp file writeTextAtomic() writes before renaming it over `path`. */
function tempPathFor(path: string): string {
  return join(
    dirname(path),
    `.${basename(path)}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`,
  );
}

function writeTextAtomic(path: string, text: string): void {
  const dir = dirname(path);
  const tmp = tempPathFor(path);
  try {
    {
      using file = Deno.openSync(tmp, { write: true, createNew: true });
      const bytes = new TextEncoder().encode(text);
      for (let done = 0; done < bytes.length;) done += file.writeSync(bytes.subarray(done));
      file.syncSync();
    }
    Deno.renameSync(tmp, path);
  } catch (e) {
    try {
      Deno.removeSync(tmp);
    } catch { /* it may not exist */ }
    throw new Error(`Cannot write ${path}: ${(e as Error).message}`, { cause: e });
  }
  using folder = Deno.openSync(dir, { read: true });
  folder.syncSync();
}

/**
 * Writes config.json once: when it already exists (a restarted attempt),
 * the first one is kept and false is returned.
 */
export function writeConfigRecord(runDir: string, record: ConfigRecord): boolean {
  const path = join(runDir, RUN_FILES.config);
  const text = jsonFileText(ConfigRecordSchema, record, RUN_FILES.config);
  try {
    Deno.statSync(path);
    return false;
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  writeTextAtomic(path, text);
  return true;
}

/**
 * Appends one line to metrics.jsonl (rank 0, once per optimizer step) as a
 * single append write, so a crash leaves at worst a truncated last line.
 */
export function appendMetrics(runDir: string, m: MetricsRecord): void {
  Deno.writeTextFileSync(join(runDir, RUN_FILES.metrics), metricsLine(m), { append: true });
}

/** Appends one evaluation line to metrics.jsonl (rank 0, after each evaluation). */
export function appendEval(runDir: string, e: EvalRecord): void {
  Deno.writeTextFileSync(join(runDir, RUN_FILES.metrics), evalLine(e), { append: true });
}

/** Appends one line to data_order.jsonl (rank 0, for every rank's digest). */
export function appendDataOrder(runDir: string, d: DataOrderRecord): void {
  Deno.writeTextFileSync(join(runDir, RUN_FILES.dataOrder), dataOrderLine(d), { append: true });
}

/** Validates `record` and writes it atomically as `<runDir>/run.json`. */
export function writeRunRecord(runDir: string, record: RunRecord): void {
  writeTextAtomic(
    join(runDir, RUN_FILES.run),
    jsonFileText(RunRecordSchema, record, RUN_FILES.run),
  );
}

/**
 * writeRunRecord() with asynchronous writes and fsyncs: the launcher, which serves the control
 * store from the same thread, keeps answering its ranks while the disk syncs.
 */
export async function writeRunRecordAsync(runDir: string, record: RunRecord): Promise<void> {
  const path = join(runDir, RUN_FILES.run);
  const text = jsonFileText(RunRecordSchema, record, RUN_FILES.run);
  const tmp = tempPathFor(path);
  try {
    {
      using file = await Deno.open(tmp, { write: true, createNew: true });
      const bytes = new TextEncoder().encode(text);
      for (let done = 0; done < bytes.length;) done += await file.write(bytes.subarray(done));
      await file.sync();
    }
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw new Error(`Cannot write ${path}: ${(e as Error).message}`, { cause: e });
  }
  using folder = await Deno.open(runDir, { read: true });
  await folder.sync();
}
