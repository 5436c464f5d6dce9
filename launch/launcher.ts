/**
 * The launcher of one node: hosts the control store (node 0), meets the other nodes' launchers
 * (rendezvous), creates the run directory, runs attempts (restarting up to --max-restarts),
 * forwards every stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, …: os/stop_signals.ts), records
 * launch.json, and returns 0 only when every rank exited 0.
 */
import { resolveDevice } from "../tensor/device_choice.ts";
import type { DeviceKind } from "../tensor/backend.ts";
import { type CudaAvailability, cudaAvailability, gpuSharing } from "../ffi/cuda_discovery.ts";
import { cudaKernels, CudaRuntime } from "../ffi/cuda.ts";
import { describePlan, type DevicePlan, planDevices } from "./device_plan.ts";
import { basename } from "node:path";
import type { AttemptEnd } from "../run_record/record.ts";
import { join, resolve } from "node:path";
import { nativeVersions } from "../ffi/native_versions.ts";
import { plannedCpuBackend } from "../distributed/pg_config.ts";
import { StoreClient, StoreError } from "../distributed/control/store.ts";
import { StoreServer } from "../distributed/control/store_server.ts";
import { attemptKeys, runKeys } from "../distributed/control/store_keys.ts";
import { type AttemptHandle, type RunContext, startAttempt } from "./attempt.ts";
import { type LaunchOptions, UsageError } from "./options.ts";
import { LauncherLog } from "./output.ts";
import { signalExitCode } from "../os/exit_status.ts";
import { onStopSignals } from "../os/stop_signals.ts";
import { LaunchTimeout } from "./failure_report.ts";
import {
  createRunDir,
  type LaunchRecord,
  launchRecordPath,
  makeRunId,
  redactToken,
  removeEmptyRunDir,
  writeLaunchRecord,
} from "./run_dir.ts";
import { resolveToken } from "./token.ts";
import { checkScriptTypes } from "../check/type_check.ts";
import { installLayout } from "../os/install_layout.ts";
import type { RunRecord } from "../run_record/format.ts";
import { RUN_FILES } from "../run_record/files.ts";
import { checkNproc, type NodeCapacity } from "./nproc_limit.ts";
import { lockRunDir, type RunLock } from "./run_lock.ts";

/** Default store port with several nodes (torchrun's). */
const MULTI_NODE_PORT = 29500;
/** How often a launcher refreshes its heartbeat in the store. */
const BEAT_MS = 1000;
/** Node 0 waits at most this long (plus the grace period) for other launchers to leave. */
const EXIT_WAIT_MS = 10_000;
/** Node 0's launcher reaching the store it serves itself: anything slower is a local fault. */
const OWN_STORE_CONNECT_MS = 10_000;

/** Run facts node 0 publishes and every node checks against its own options. */
interface RunInfo {
  runId: string;
  nnodes: number;
  nproc: number;
  maxRestarts: number;
  /** attempts that earlier launches into the run directory made (node 0 reads run.json) */
  attemptBase?: number;
}

/** The GPU setup of the resolved device (null on the CPU). */
function gpuAvailability(device: string): CudaAvailability | null {
  if (device === "cuda") return cudaAvailability();
  if (device === "cuda-emu") return cudaAvailability(undefined, "cuda-emu");
  return null;
}

/** What bounds --nproc on this machine for the resolved device. */
function nodeCapacity(opts: LaunchOptions): NodeCapacity {
  const device = opts.device === "cuda" || opts.device === "cuda-emu" ? opts.device : "cpu";
  const cap: NodeCapacity = {
    device,
    cores: navigator.hardwareConcurrency || 1,
    oversubscribe: opts.oversubscribe,
    shareGpus: gpuSharing(),
  };
  const a = gpuAvailability(device);
  if (a) cap.gpus = a.ok ? a.deviceCount : 0;
  return cap;
}

/** The GPU of each local rank, with the GPUs' names (the driver's; "" when it cannot say). */
function devicePlan(opts: LaunchOptions): DevicePlan {
  const kind = opts.device as DeviceKind;
  const a = gpuAvailability(kind);
  return planDevices(kind, opts.nproc, a, gpuSharing(), (gpu) => {
    try {
      return new CudaRuntime(cudaKernels()).deviceInfo(gpu).name;
    } catch {
      return "";
    }
  });
}

/**
 * The absolute path of --resume's folder: a run directory (its checkpoints/
 * are used) or a checkpoint folder. Refused at once when it holds neither.
 */
function checkResume(dir: string): string {
  const path = resolve(dir);
  const isDir = (p: string) => {
    try {
      return Deno.statSync(p).isDirectory;
    } catch {
      return false;
    }
  };
  if (!isDir(path)) throw new UsageError(`--resume ${dir}: no such folder (looked at ${path})`);
  return path;
}

function checkScript(script: string): string {
  const path = resolve(script);
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch {
    throw new UsageError(`Cannot launch ${script}: no such file (looked at ${path})`);
  }
  if (!info.isFile) throw new UsageError(`Cannot launch ${script}: ${path} is not a file`);
  return path;
}

/** `dtrain rerun`: the script must still be the file it verified, as the ranks are about to start. */
async function checkScriptHash(script: string, expected: string): Promise<void> {
  const { sha256File } = await import("../run_record/record.ts");
  const now = await sha256File(script);
  if (now !== expected) {
    throw new UsageError(
      `${script} changed after \`dtrain rerun\` verified it (sha256 ${expected.slice(0, 12)}… ` +
        `then, ${now.slice(0, 12)}… now); nothing was started`,
    );
  }
}

function startStore(
  opts: LaunchOptions,
  token: string,
  log: LauncherLog,
  lost: (node: number, why: string) => void,
): StoreServer {
  const hostname = opts.nnodes > 1 ? "0.0.0.0" : "127.0.0.1";
  const port = opts.masterPort ?? (opts.nnodes > 1 ? MULTI_NODE_PORT : 0);
  try {
    return StoreServer.listen({
      hostname,
      port,
      token,
      log: (line) => log.info(line),
      onDisconnect: (identity) => {
        const m = /^launcher node (\d+)$/.exec(identity);
        if (m && m[1] !== "0") lost(Number(m[1]), "its launcher disconnected from the store");
      },
    });
  } catch (e) {
    const hint = e instanceof Deno.errors.AddrInUse ? "; choose another --master-port" : "";
    throw new Error(
      `Cannot start the control store on ${hostname}:${port}: ${(e as Error).message}${hint}`,
    );
  }
}

/**
 * `deno check` of the script with the config the ranks run with, before
 * anything starts (a checkout only: the single file carries dtrain as
 * JavaScript, without its types). Throws after printing the type errors.
 */
async function typeCheck(given: string, script: string, log: LauncherLog): Promise<void> {
  const layout = installLayout();
  if (layout?.kind !== "checkout") return;
  const r = await checkScriptTypes(script, {
    config: layout.config,
    onCheck: () =>
      log.info(`type-checking ${given} (once per change of its files; --no-check skips it)`),
  });
  if (r.ok) return;
  console.error(r.output);
  throw new Error(
    `${given} does not type-check (the errors are above): fix them, or start it unchecked with --no-check`,
  );
}

/** Run facts every node must share: a difference is a refusal of the launch. */
const SHARED_FIELDS = ["nnodes", "nproc", "maxRestarts"] as const;
/** How long a launcher that refused the launch keeps node 0's store up for the others to read why. */
const REFUSAL_LINGER_MS = 5000;

/** A launch refused at rendezvous because the nodes were started with different options. */
export class RendezvousRefused extends UsageError {
  override name = "RendezvousRefused";
}

/** The first field in which `other` (node n) differs from `mine`, said as a sentence, or null. */
function mismatch(other: RunInfo & { host?: string }, n: number, mine: RunInfo, me: number) {
  for (const field of SHARED_FIELDS) {
    if (other[field] !== mine[field]) {
      return `node ${n}${other.host ? ` (${other.host})` : ""} runs with ${field}=${
        other[field]
      } but node ${me} with ${field}=${mine[field]}; ` +
        `every node must be given the same --nnodes, --nproc and --max-restarts`;
    }
  }
  return null;
}

/** Meets every node's launcher in the store; returns node 0's run facts (its run id, attempt base). */
async function rendezvous(
  client: StoreClient,
  opts: LaunchOptions,
  runId: string | null,
  attemptBase = 0,
): Promise<RunInfo> {
  const me = opts.nodeRank;
  const claims = await client.add(runKeys.nodeClaim(me), 1);
  if (claims > 1) {
    throw new Error(
      `Node rank ${me} was already claimed by another launcher of this run: give each node its own --node-rank`,
    );
  }
  const mine: RunInfo = {
    runId: runId ?? "",
    nnodes: opts.nnodes,
    nproc: opts.nproc,
    maxRestarts: opts.maxRestarts,
    attemptBase,
  };
  if (me === 0) await client.set(runKeys.info, JSON.stringify(mine));
  await client.set(
    runKeys.nodeInfo(me),
    JSON.stringify({ ...mine, host: Deno.hostname(), pid: Deno.pid }),
  );
  const timeoutMs = opts.rdzvTimeoutS * 1000;
  /** Says why in the store (for every other launcher), then refuses here. */
  const refuse = async (why: string): Promise<never> => {
    await client.set(runKeys.refused, JSON.stringify({ node: me, host: Deno.hostname(), why }))
      .catch(() => {});
    if (me === 0) {
      // This store is about to close: the nodes that joined read the refusal and say goodbye first.
      const others = Array.from({ length: opts.nnodes - 1 }, (_, i) => runKeys.nodeExit(i + 1));
      await client.wait(others, REFUSAL_LINGER_MS).catch(() => {});
    }
    throw new RendezvousRefused(`Rendezvous failed: ${why}`);
  };
  /** Another launcher refused: say so, and why, and leave. */
  const refusedElsewhere = async (): Promise<never> => {
    const raw = await client.getText(runKeys.refused).catch(() => null);
    const r = raw ? JSON.parse(raw) as { node: number; host: string; why: string } : null;
    await client.set(runKeys.nodeExit(me), "refused").catch(() => {});
    throw new RendezvousRefused(
      r
        ? `Rendezvous failed: node ${r.node} (${r.host}) refused the launch: ${r.why}`
        : "Rendezvous failed: another node refused the launch",
    );
  };
  if (me !== 0) {
    // Node 0's facts are in the store before its own node key: compared at once, not after a wait
    // for nodes that will never come (a different --nnodes).
    await client.wait([runKeys.info], timeoutMs).catch(() => {});
    const info0 = await client.getText(runKeys.info).catch(() => null);
    const why = info0 ? mismatch(JSON.parse(info0) as RunInfo, 0, mine, me) : null;
    if (why) await refuse(why);
  }
  const nodes = Array.from({ length: opts.nnodes }, (_, n) => n);
  const refused = client.wait([runKeys.refused], timeoutMs).then(() => "refused" as const);
  refused.catch(() => {});
  try {
    const first = await Promise.race([
      client.wait(nodes.map(runKeys.nodeInfo), timeoutMs),
      refused,
    ]);
    if (first === "refused") await refusedElsewhere();
  } catch (e) {
    if (e instanceof RendezvousRefused) throw e;
    if (await client.get(runKeys.refused).catch(() => null) !== null) await refusedElsewhere();
    if (e instanceof StoreError && e.kind === "timeout") {
      const missing = nodes.filter((n) => e.missingKeys.includes(runKeys.nodeInfo(n)));
      throw new LaunchTimeout(
        `Rendezvous failed: node(s) ${
          missing.join(",") || "?"
        } did not join within ${opts.rdzvTimeoutS} s (--rdzv-timeout)`,
      );
    }
    throw new Error(
      `Rendezvous failed: the control store closed before every node joined (${
        (e as Error).message
      }): node 0's launcher has ended; its output says why`,
    );
  }
  const info = JSON.parse((await client.getText(runKeys.info))!) as RunInfo;
  for (const n of nodes) {
    const other = JSON.parse((await client.getText(runKeys.nodeInfo(n)))!) as RunInfo & {
      host: string;
    };
    const why = mismatch(other, n, mine, me);
    if (why) await refuse(why);
  }
  return info;
}

/**
 * The run.json an earlier launch left in `runDir`, or null. The record's reader (and the schema
 * library it validates with) loads only when there is one: a new run starts without them.
 */
async function readPreviousRecord(runDir: string): Promise<RunRecord | null> {
  try {
    Deno.statSync(join(runDir, RUN_FILES.run));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
  }
  return (await import("../run_record/record.ts")).readRunRecord(runDir);
}

/**
 * run.json of this launch: written as the first attempt begins and
 * rewritten as each attempt begins and ends; continued (not replaced) when
 * the directory holds the record of an earlier launch.
 */
async function startRunRecord(
  ctx: RunContext,
  argv: readonly string[],
  previous: RunRecord | null,
) {
  const {
    beginAttempt,
    behaviourEnv,
    continueRunRecord,
    finishAttempt,
    machineFacts,
    newRunRecord,
    sha256File,
    versions,
    writeRunRecord,
    writeRunRecordAsync,
  } = await import("../run_record/record.ts");
  const { AttemptSchema } = await import("../run_record/format.ts");
  const { opts, runDir, runId, threads, script } = ctx;
  // What CPU ranks' initProcessGroup() will choose (the same rule), and Gloo's versions when it is Gloo.
  // GPU ranks: NCCL, unless they are alone.
  const backend = opts.device === "cpu"
    ? plannedCpuBackend(opts.nnodes, opts.nproc, Deno.env.get("DTRAIN_CPU_BACKEND"))
    : opts.nnodes * opts.nproc > 1
    ? "nccl" as const
    : "single" as const;
  // The native side as the ranks will find it: the GPU stack of a GPU run, Gloo when it is Gloo.
  const plan = ctx.plan;
  const gpu = plan?.kind === "cuda" || plan?.kind === "cuda-emu" ? plan.kind : undefined;
  const v = versions(nativeVersions({ gpu, gloo: backend === "gloo" }), gpu ? plan!.names : []);
  const input = {
    runId,
    name: basename(runDir),
    argv: ["dtrain", ...argv],
    cwd: Deno.cwd(),
    script: { path: script, sha256: await sha256File(script), args: opts.scriptArgs },
    world: {
      nnodes: opts.nnodes,
      nprocPerNode: opts.nproc,
      hosts: [Deno.hostname()],
      ...(backend ? { backend } : {}),
      device: opts.device,
    },
    ...(opts.resume !== null ? { resume: opts.resume } : {}),
    versions: v,
    env: behaviourEnv({ ...Deno.env.toObject(), DTRAIN_NUM_THREADS: String(threads) }),
    machine: machineFacts(),
  };
  // Written as the first attempt begins (begin(), called right after): one write, not two.
  let rec = previous ? continueRunRecord(previous, input) : newRunRecord(input);
  return {
    /** Records attempt k's start; its writes and fsyncs leave the store answering the ranks. */
    async begin() {
      rec = beginAttempt(rec);
      await writeRunRecordAsync(runDir, rec);
    },
    /** Ends attempt k's entry, with the process group and numerics policy its rank 0 reported. */
    async finish(k: number, end: AttemptEnd) {
      const keys = attemptKeys((ctx.attemptBase ?? 0) + k); // the ranks' DTRAIN_RESTART_COUNT
      const report = async <S extends { parse(v: unknown): unknown }>(key: string, schema: S) => {
        const raw = await ctx.client.getText(key).catch(() => null);
        try {
          return raw === null ? undefined : schema.parse(JSON.parse(raw)) as ReturnType<S["parse"]>;
        } catch {
          return undefined; // a malformed report is left out of the record
        }
      };
      const processGroup = await report(keys.processGroup, AttemptSchema.shape.processGroup);
      const numerics = await report(keys.numerics, AttemptSchema.shape.numerics);
      const resumed = await report(keys.resume, AttemptSchema.shape.resumed);
      rec = finishAttempt(rec, {
        ...end,
        ...(processGroup ? { processGroup } : {}),
        ...(numerics ? { numerics } : {}),
        ...(resumed ? { resumed } : {}),
      });
      writeRunRecord(runDir, rec);
    },
    /**
     * Ends the open attempt, if any, synchronously (from a signal handler or the unload
     * event): the record never says "running" once its launcher is gone. Never throws.
     */
    closeIfOpen(end: AttemptEnd) {
      if (rec.attempts.at(-1)?.endedAt !== null) return;
      try {
        rec = finishAttempt(rec, end);
        writeRunRecord(runDir, rec);
      } catch (e) {
        console.error(`dtrain: could not close ${runDir}/run.json: ${(e as Error).message}`);
      }
    },
  };
}

/** What the checks before anything starts resolved, for the stages after them. */
interface Preflight {
  /** the script's absolute path */
  script: string;
  token: string;
  plan: DevicePlan;
  /** what resolving `--device auto` said, logged once the run directory exists */
  deviceNotices: string[];
}

/**
 * Stage 1, the refusals before anything starts (no store, no run directory, no rank): the script,
 * the token, the device ("auto" resolved once here, so every rank gets the same answer), --nproc
 * against the machine, --resume, then the slower type check and rerun's script hash.
 */
async function preflight(opts: LaunchOptions, log: LauncherLog): Promise<Preflight> {
  const script = checkScript(opts.script);
  const token = resolveToken(opts);
  const deviceNotices: string[] = [];
  opts.device = resolveDevice(opts.device, {
    notice: (line) => deviceNotices.push(line.replace(/^dtrain: /, "")),
  });
  checkNproc(opts.nproc, nodeCapacity(opts));
  const plan = devicePlan(opts);
  if (opts.resume !== null) opts.resume = checkResume(opts.resume);
  // After the cheap refusals: a bad option must not wait for seconds of type-checking.
  if (!opts.noCheck) await typeCheck(opts.script, script, log);
  if (opts.expectScriptSha256 !== undefined) await checkScriptHash(script, opts.expectScriptSha256);
  return { script, token, plan, deviceNotices };
}

/** What a launch holds while it runs: each way out (return, error, signal) releases it. */
class LaunchState {
  current: AttemptHandle | null = null;
  client: StoreClient | null = null;
  server: StoreServer | null = null;
  beat: ReturnType<typeof setInterval> | undefined;
  /** a stop signal arrived: whatever the attempt's outcome, do not restart */
  preempted = false;
  runLock: RunLock | null = null;
  /** A run directory this launch created, removed again if nothing ran in it. */
  createdDir: string | null = null;
  /** The run record of this launch once written (node 0); closed on every way out. */
  run: Awaited<ReturnType<typeof startRunRecord>> | null = null;
  constructor(readonly log: LauncherLog) {}

  /** Another node's launcher is gone: its attempt fails, and node 0 stops waiting for it. */
  async nodeLost(node: number, why: string): Promise<void> {
    // A launcher that said goodbye before disconnecting left normally.
    if (this.client && await this.client.get(runKeys.nodeExit(node)).catch(() => null) !== null) {
      return;
    }
    this.current?.nodeLost(node, why);
    // A launcher that is gone will not say goodbye: say it for it, so node 0 need not wait.
    this.client?.set(runKeys.nodeExit(node), "disconnected").catch(() => {});
  }
}

/**
 * Stage 2 (node 0): the control store, which the nodes' launchers and every rank connect to. A
 * launcher of another node that disconnects is lost.
 */
function hostStore(opts: LaunchOptions, token: string, s: LaunchState): void {
  if (opts.nodeRank !== 0) return;
  s.server = startStore(opts, token, s.log, (node, why) => void s.nodeLost(node, why));
}

/**
 * Stop signals and the process's end, from here to the launch's end: a signal goes to the running
 * attempt, or ends the launch between attempts; whatever ends this process (Deno.exit, an error
 * nobody caught) leaves no run.json saying "running". Returns the function that stops listening.
 */
function watchStops(s: LaunchState): () => void {
  const onSignal = (sig: Deno.Signal) => {
    s.preempted = true;
    if (s.current) return s.current.signal(sig);
    s.log.info(`received ${sig} while no rank is running; exiting`);
    s.run?.closeIfOpen({
      exitCode: signalExitCode(sig),
      signal: sig,
      reason: `the launcher received ${sig} between attempts; no rank was running`,
      interrupted: true,
    });
    s.runLock?.release();
    if (s.createdDir) removeEmptyRunDir(s.createdDir);
    Deno.exit(signalExitCode(sig));
  };
  const onUnload = () =>
    s.run?.closeIfOpen({
      exitCode: null,
      reason: "the launcher exited before this attempt ended",
    });
  globalThis.addEventListener("unload", onUnload);
  const stopListening = onStopSignals(onSignal);
  return () => {
    stopListening();
    globalThis.removeEventListener("unload", onUnload);
  };
}

/** Where this node reaches the control store. */
function storeAddress(opts: LaunchOptions, s: LaunchState): { host: string; port: number } {
  return {
    host: s.server ? "127.0.0.1" : opts.masterAddr,
    port: s.server?.port ?? opts.masterPort ?? MULTI_NODE_PORT,
  };
}

/**
 * Stage 3: this launcher's connection to the store (its own, or node 0's, waited for up to
 * --rdzv-timeout: a timeout that ends the run).
 */
async function connectStore(opts: LaunchOptions, token: string, s: LaunchState): Promise<void> {
  const { host, port } = storeAddress(opts, s);
  try {
    s.client = await StoreClient.connect({
      host,
      port,
      token,
      timeoutMs: s.server ? OWN_STORE_CONNECT_MS : opts.rdzvTimeoutS * 1000,
      identity: `launcher node ${opts.nodeRank}`,
      onRetry: (why) => s.log.info(`waiting for node 0's control store at ${host}:${port}: ${why}`),
    });
  } catch (e) {
    if (
      !s.server && e instanceof StoreError && e.kind === "connect" && / within /.test(e.message)
    ) {
      throw new LaunchTimeout(`${e.message} (--rdzv-timeout ${opts.rdzvTimeoutS} s)`);
    }
    throw e;
  }
}

/** The run this launcher joined. */
interface JoinedRun {
  runId: string;
  runDir: string;
  /** attempts that earlier launches into the run directory made */
  attemptBase: number;
  /** their run.json, continued by this launch (node 0) */
  previous: RunRecord | null;
}

/**
 * Stage 4: the run directory and the rendezvous. Node 0 proposes a directory, locks it (refusing
 * one another live launcher holds, before anyone joins) and reads an earlier launch's run.json
 * (a directory reused to resume keeps its run's id and record); every node meets the others and
 * learns the run's id. Nothing ran if this fails: a directory this launch created is removed.
 */
async function joinRun(opts: LaunchOptions, script: string, s: LaunchState): Promise<JoinedRun> {
  const proposed = opts.nodeRank === 0
    ? createRunDir({ runDir: opts.runDir, runId: makeRunId(script), exclusive: true })
    : null;
  if (proposed?.created) s.createdDir = proposed.dir;
  let info: RunInfo, previous: RunRecord | null = null;
  try {
    if (proposed) s.runLock = lockRunDir(proposed.dir, 0, proposed.runId);
    previous = proposed ? await readPreviousRecord(proposed.dir) : null;
    info = await rendezvous(
      s.client!,
      opts,
      previous?.runId ?? proposed?.runId ?? null,
      previous?.attempts.length ?? 0,
    );
  } catch (e) {
    s.runLock?.release();
    s.runLock = null;
    if (proposed?.created) removeEmptyRunDir(proposed.dir);
    throw e;
  }
  const { dir: runDir } = proposed ??
    createRunDir({ runDir: opts.runDir, runId: info.runId, exclusive: false });
  s.runLock ??= lockRunDir(runDir, opts.nodeRank, info.runId);
  return { runId: info.runId, runDir, attemptBase: info.attemptBase ?? 0, previous };
}

/**
 * Stage 5: the node's log file in the run directory, its heartbeat in the store, and what this
 * launch will do (the run, a lock taken over, the device notices and plan, a resume).
 */
function announce(opts: LaunchOptions, pre: Preflight, run: JoinedRun, s: LaunchState): void {
  const { log } = s;
  const { runId, runDir } = run;
  log.attach(
    `${runDir}/${opts.nodeRank === 0 ? "launcher.log" : `launcher-node${opts.nodeRank}.log`}`,
  );
  log.info(
    `run ${runId}: ${
      opts.nnodes > 1 ? `node ${opts.nodeRank} of ${opts.nnodes}, ` : ""
    }logs in ${runDir}`,
  );
  const gone = s.runLock!.previous;
  if (gone) {
    log.info(
      `took over the run directory's lock from run ${gone.runId} (pid ${gone.pid} on ${gone.host}), ` +
        `which ended without releasing it`,
    );
  }
  const c = s.client!;
  s.beat = setInterval(() => c.post(runKeys.nodeBeat(opts.nodeRank), String(Date.now())), BEAT_MS);
  c.post(runKeys.nodeBeat(opts.nodeRank), String(Date.now()));
  for (const line of pre.deviceNotices) log.info(line);
  const planLine = describePlan(pre.plan, opts.nodeRank, opts.nproc);
  if (planLine) log.info(planLine);
  if (opts.resume !== null) {
    log.info(`a Trainer resumes from the latest good checkpoint in ${opts.resume}`);
  }
}

/** What every attempt of the run is started with. */
function runContext(opts: LaunchOptions, pre: Preflight, run: JoinedRun, s: LaunchState) {
  const threads = opts.threads ??
    Math.max(1, Math.floor((navigator.hardwareConcurrency || 1) / opts.nproc));
  const ctx: RunContext = {
    opts,
    client: s.client!,
    log: s.log,
    runId: run.runId,
    runDir: run.runDir,
    token: pre.token,
    masterPort: storeAddress(opts, s).port,
    threads,
    script: pre.script,
    plan: pre.plan,
    attemptBase: run.attemptBase,
  };
  return ctx;
}

/** launch.json of this node: what it started, updated as attempts start and when the launch ends. */
function newLaunchRecord(opts: LaunchOptions, argv: readonly string[], ctx: RunContext) {
  const record: LaunchRecord = {
    runId: ctx.runId,
    command: ["dtrain", ...redactToken(argv)],
    script: ctx.script,
    scriptArgs: opts.scriptArgs,
    nproc: opts.nproc,
    nnodes: opts.nnodes,
    nodeRank: opts.nodeRank,
    startedAt: new Date().toISOString(),
    endedAt: null,
    exitCode: null,
    attempts: 0,
    outcome: null,
  };
  return { record, path: launchRecordPath(ctx.runDir, opts.nodeRank) };
}

/**
 * The first attempt, started before the records are written: its ranks' start-up (a Deno start,
 * module loading) overlaps the launcher's bookkeeping (hashing the script, opening the CPU library
 * for its build hash, loading the record schemas). No record, no run: if they cannot be written,
 * the ranks just started are stopped before the error is reported.
 */
async function startFirstAttempt(
  ctx: RunContext,
  argv: readonly string[],
  previous: RunRecord | null,
  launchRecord: { record: LaunchRecord; path: string },
  s: LaunchState,
): Promise<AttemptHandle> {
  const current = s.current = startAttempt(ctx, 0);
  // Spawning needs this process's event loop (the store it serves): the records wait for it.
  await current.started;
  try {
    writeLaunchRecord(launchRecord.path, launchRecord.record);
    // run.json: the job's rerun record (node 0 only), one entry per attempt.
    s.run = ctx.opts.nodeRank === 0 ? await startRunRecord(ctx, argv, previous) : null;
    await s.run?.begin();
  } catch (e) {
    current.launchError(`cannot write the run's records: ${(e as Error).message}`);
    await current.result;
    throw e;
  }
  return current;
}

/**
 * Stage 6: the attempts, restarting every rank after a rank's failure or a timeout, up to
 * --max-restarts (never after a stop signal); each attempt's start and end go into the records.
 * Returns the exit code and the grace period the last attempt's ranks were given.
 */
async function runAttempts(
  ctx: RunContext,
  argv: readonly string[],
  previous: RunRecord | null,
  s: LaunchState,
): Promise<{ code: number; graceMs: number }> {
  const { opts, log, attemptBase = 0 } = ctx;
  const launchRecord = newLaunchRecord(opts, argv, ctx);
  const { record } = launchRecord;
  let code = 1;
  let graceMs = 0;
  for (let k = 0;; k++) {
    record.attempts = k + 1;
    let current: AttemptHandle;
    if (k === 0) current = await startFirstAttempt(ctx, argv, previous, launchRecord, s);
    else {
      await s.run?.begin();
      current = s.current = startAttempt(ctx, k);
    }
    const result = await current.result;
    s.current = null;
    if (result.ok) {
      code = 0;
      record.outcome = `every rank exited 0${k > 0 ? ` after ${k} restart(s)` : ""}`;
      await s.run?.finish(k, { exitCode: 0 });
      break;
    }
    const { abort } = result;
    code = abort.code;
    graceMs = abort.graceMs;
    record.outcome = abort.detail + (abort.rank !== undefined ? ` (rank ${abort.rank})` : "");
    await s.run?.finish(k, {
      exitCode: abort.code,
      signal: abort.signal ?? null,
      failingRank: abort.rank ?? null,
      reason: abort.detail,
      interrupted: s.preempted,
    });
    const restartable = abort.reason === "rank-failed" || abort.reason === "timeout";
    if (!restartable || s.preempted || k >= opts.maxRestarts) break;
    log.info(
      `restarting every rank (restart ${k + 1} of ${opts.maxRestarts}); DTRAIN_RESTART_COUNT=${
        attemptBase + k + 1
      }`,
    );
  }
  record.endedAt = new Date().toISOString();
  record.exitCode = code;
  writeLaunchRecord(launchRecord.path, record);
  log.info(
    code === 0
      ? `run ${ctx.runId} finished: every rank exited 0`
      : `run ${ctx.runId} failed: exit code ${code}`,
  );
  return { code, graceMs };
}

/** The last stage, on every way out: what the launch held is released, in this order. */
async function release(s: LaunchState, stopWatching: () => void): Promise<void> {
  s.current = null;
  clearInterval(s.beat);
  stopWatching();
  s.client?.close();
  await s.server?.close();
  s.log.close();
  s.runLock?.release();
}

/**
 * Runs the launcher with parsed options; returns the process exit code. The stages, in the order
 * a launch happens: the refusals before anything starts, the control store (node 0), the
 * connection to it, the run directory and rendezvous, the announcement, the attempts, and on
 * every way out the release of what the launch held.
 *
 * @example
 * ```ts
 * const code = await launch(parseLaunchArgs(["--nproc", "2", "train.ts"]) as LaunchOptions, Deno.args);
 * ```
 */
export async function launch(opts: LaunchOptions, argv: readonly string[]): Promise<number> {
  const s = new LaunchState(new LauncherLog());
  const pre = await preflight(opts, s.log);
  hostStore(opts, pre.token, s);
  const stopWatching = watchStops(s);
  try {
    await connectStore(opts, pre.token, s);
    const run = await joinRun(opts, pre.script, s);
    announce(opts, pre, run, s);
    const ctx = runContext(opts, pre, run, s);
    const { code, graceMs } = await runAttempts(ctx, argv, run.previous, s);
    await leave(s.client!, opts, s.server, graceMs);
    return code;
  } catch (e) {
    s.run?.closeIfOpen({ exitCode: null, reason: `the launcher failed: ${(e as Error).message}` });
    throw e;
  } finally {
    await release(s, stopWatching);
  }
}

/**
 * Ends this launcher's part of the run. Other nodes say they are leaving;
 * node 0 keeps the store up until they have (their ranks may still be
 * saving), or until they are gone.
 */
async function leave(
  client: StoreClient,
  opts: LaunchOptions,
  server: StoreServer | null,
  graceMs: number,
): Promise<void> {
  if (!server) {
    await client.set(runKeys.nodeExit(opts.nodeRank), "1").catch(() => {});
    return;
  }
  const others = Array.from({ length: opts.nnodes - 1 }, (_, i) => runKeys.nodeExit(i + 1));
  if (others.length === 0) return;
  await client.wait(others, EXIT_WAIT_MS + graceMs).catch(() => {});
}
