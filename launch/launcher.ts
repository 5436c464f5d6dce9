/**
 * The launcher of one node: hosts the control store (node 0), meets the other nodes' launchers
 * (rendezvous), creates the run directory, runs attempts (restarting up to --max-restarts),
 * forwards every stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, …: os/stop_signals.ts), records
 * launch.json, and returns 0 only when every rank exited 0. launch() is its stages in the order a
 * launch happens; the rendezvous is rendezvous.ts, run.json run_json.ts, an attempt attempt.ts.
 */
import { resolveDevice } from "../tensor/device_choice.ts";
import type { DeviceKind } from "../tensor/backend.ts";
import { type CudaAvailability, cudaAvailability, gpuSharing } from "../ffi/cuda_discovery.ts";
import { cudaKernels, CudaRuntime } from "../ffi/cuda.ts";
import { describePlan, type DevicePlan, planDevices } from "./device_plan.ts";
import { resolve } from "node:path";
import { StoreClient, StoreError } from "../distributed/control/store.ts";
import { StoreServer } from "../distributed/control/store_server.ts";
import { attemptKeys, runKeys } from "../distributed/control/store_keys.ts";
import { type AttemptHandle, type RunContext, startAttempt } from "./attempt.ts";
import { rankV8Flags } from "./rank_v8_flags.ts";
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
import { checkNproc, type NodeCapacity } from "./nproc_limit.ts";
import { lockRunDir, type RunLock } from "./run_lock.ts";
import { rendezvous, type RunInfo } from "./rendezvous.ts";
import { readPreviousRecord, type RunJson, startRunRecord } from "./run_json.ts";

/** Default store port with several nodes (torchrun's). */
const MULTI_NODE_PORT = 29500;
/** How often a launcher refreshes its heartbeat in the store. */
const BEAT_MS = 1000;
/** Node 0 waits at most this long (plus the grace period) for other launchers to leave. */
const EXIT_WAIT_MS = 10_000;
/** Node 0's launcher reaching the store it serves itself: anything slower is a local fault. */
const OWN_STORE_CONNECT_MS = 10_000;
/**
 * run.json waits at most this long after the spawn for rank 0's process group: a script that makes
 * none (or makes it late) still has its record on disk while it runs, should the launcher be killed.
 */
const RUN_RECORD_WAIT_MS = 2_000;

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
  run: RunJson | null = null;
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
  const cores = navigator.hardwareConcurrency || 1;
  const threads = opts.threads ?? Math.max(1, Math.floor(cores / opts.nproc));
  const ctx: RunContext = {
    opts,
    client: s.client!,
    log: s.log,
    runId: run.runId,
    runDir: run.runDir,
    token: pre.token,
    masterPort: storeAddress(opts, s).port,
    threads,
    v8Flags: rankV8Flags(cores, opts.nproc),
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
 * The first attempt, started before the records are written. launch.json is written as soon as
 * the ranks are spawned. run.json waits until the ranks are past their start-up — rank 0 has made
 * its process group (its report arrives as its script reaches its first await, in a training
 * loop the first step) — or the attempt ends, or RUN_RECORD_WAIT_MS pass, whichever comes first:
 * building it (the record's module and schema library, hashing the script, opening the CPU
 * library for its build hash: ~50 ms of CPU, measured) would otherwise compete with the ranks'
 * Deno start and module loading for the machine's cores. Its times are still the attempt's start.
 * No record, no run: if they cannot be written, the ranks are stopped before the error is reported.
 */
async function startFirstAttempt(
  ctx: RunContext,
  argv: readonly string[],
  previous: RunRecord | null,
  launchRecord: { record: LaunchRecord; path: string },
  s: LaunchState,
): Promise<AttemptHandle> {
  const startedAt = new Date();
  const current = s.current = startAttempt(ctx, 0);
  // Spawning needs this process's event loop (the store it serves): the records wait for it.
  await current.started;
  try {
    writeLaunchRecord(launchRecord.path, launchRecord.record);
    // run.json: the job's rerun record (node 0 only), one entry per attempt.
    if (ctx.opts.nodeRank === 0) {
      const processGroup = attemptKeys(ctx.attemptBase ?? 0).processGroup;
      const made = ctx.client.wait([processGroup], RUN_RECORD_WAIT_MS).catch(() => {});
      await Promise.race([made, current.result]);
      s.run = await startRunRecord(ctx, argv, previous, startedAt);
      await s.run.begin(startedAt);
    }
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
